"""Contracts: generated schemas, the error-code registry, migrations, import boundaries."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from promoter.domain.schemas import render
from promoter.domain.wirecheck_gen import TARGET, render_module
from promoter.errors import PromoterError, all_error_classes
from promoter.store.db import make_engine, upgrade
from promoter.store.tables import Base
from tests.support.databases import own_url

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schemas_are_up_to_date() -> None:
    rendered = render()
    committed = {
        p.name: p.read_text(encoding="utf-8") for p in (ROOT / "schemas").glob("*.schema.json")
    }
    assert committed == rendered, "run `make schemas` and commit the result"


def test_committed_validator_schemas_are_up_to_date() -> None:
    """The pydantic-free validator reads what the generator makes of the models now."""
    assert TARGET == ROOT / "promoter" / "domain" / "wire_schemas.py"
    committed = TARGET.read_text(encoding="utf-8")
    assert committed == render_module(), "run `make schemas` and commit the result"


def test_error_codes_are_unique_and_documented() -> None:
    classes = all_error_classes()
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes))
    reference = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    undocumented = [
        cls.code for cls in classes if cls is not PromoterError and f"`{cls.code}`" not in reference
    ]
    assert undocumented == []
    for cls in classes:
        assert 400 <= cls.http_status <= 599
        # sysexits, and 130 (128 + SIGINT) for a run stopped by Ctrl-C
        assert 64 <= cls.exit_code <= 78 or (cls.code, cls.exit_code) == ("interrupted", 130)


def test_migrations_match_the_models(tmp_path: Path) -> None:
    # the test's own database: SQLite here, PostgreSQL in the suite's PostgreSQL pass
    url = own_url(tmp_path, "contract.db")
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert diff == []


IO_MODULES = {"os", "subprocess", "socket", "sqlalchemy", "httpx", "fastapi", "shutil", "pathlib"}


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_domain_imports_no_io() -> None:
    offenders = []
    for path in (ROOT / "promoter" / "domain").glob("*.py"):
        if path.name in ("schemas.py", "wirecheck_gen.py"):  # generators write files
            continue
        for name in _imports(path):
            if name.split(".")[0] in IO_MODULES or (
                name.startswith("promoter.")
                and not name.startswith(("promoter.domain", "promoter.errors"))
            ):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_core_layers_do_not_import_adapters() -> None:
    offenders = []
    for layer in ("engine", "fs", "git", "store", "domain"):
        for path in (ROOT / "promoter" / layer).rglob("*.py"):
            offenders += [
                f"{path.name}: {name}"
                for name in _imports(path)
                if name.startswith(("promoter.api", "promoter.cli", "promoter.adapters"))
            ]
    assert offenders == []


def test_adapters_sit_below_the_api_and_the_cli() -> None:
    offenders = []
    for path in (ROOT / "promoter" / "adapters").rglob("*.py"):
        offenders += [
            f"{path.relative_to(ROOT)}: {name}"
            for name in _imports(path)
            if name.startswith(("promoter.api", "promoter.cli"))
        ]
    assert offenders == []


HTTP_STACK = {"httpx", "starlette", "fastapi", "uvicorn"}


def test_the_engine_speaks_no_http() -> None:
    """HTTP is the adapters' and the API's: the engine reaches them through ports."""
    offenders = []
    for path in (ROOT / "promoter" / "engine").rglob("*.py"):
        offenders += [
            f"{path.relative_to(ROOT)}: {name}"
            for name in _imports(path)
            if name.split(".")[0] in HTTP_STACK
        ]
    assert offenders == []


# What ``promoter.api`` still imports from the store, each for a reason that is not a read:
# reads go through ``promoter.engine.queries`` (and the engine's other use cases).
API_STORE_IMPORTS = {
    # the authenticated caller and the executor's quota: types the dependencies hand out
    "promoter/api/deps.py": {"promoter.store.credentials", "promoter.store.quota"},
    "promoter/api/routes/bundles.py": {"promoter.store.credentials"},
    "promoter/api/routes/review.py": {"promoter.store.credentials"},
    # the upload stream: bytes written to the blob store as the request body arrives
    "promoter/api/routes/blobs.py": {
        "promoter.store",
        "promoter.store.blob_batch",
        "promoter.store.blobs",
        "promoter.store.quota",
    },
    # the one request's blobs streamed into a batch as blobs.py's, and its second credential
    "promoter/api/routes/promotions.py": {
        "promoter.store.blob_batch",
        "promoter.store.credentials",
    },
    # the commit signal a long-poll waits on: it carries no data
    "promoter/api/longpoll.py": {"promoter.store.wakeup"},
    # the start-up sweep of a killed writer's temps in the state directory: a write
    "promoter/api/app.py": {"promoter.store.state_temps"},
    # the sweep of a killed daemon's metrics directory, judged as a temp's writer: a write
    "promoter/api/metrics_dir.py": {"promoter.store.state_temps"},
    # the authenticated caller a costly read is admitted for: a type
    "promoter/api/admission.py": {"promoter.store.credentials"},
    # a console session is its credential's: the token's digest
    "promoter/api/ui/login.py": {"promoter.store.credentials"},
    # a console session is a row of the ledger, opened, used and ended by every worker
    "promoter/api/ui/sessions.py": {
        "promoter.store",
        "promoter.store.console_sessions",
        "promoter.store.db",
    },
}


def test_the_api_reads_through_engine_queries() -> None:
    """No API module reads the store or runs git itself."""
    offenders = []
    for path in (ROOT / "promoter" / "api").rglob("*.py"):
        where = str(path.relative_to(ROOT))
        allowed = API_STORE_IMPORTS.get(where, set())
        offenders += [
            f"{where}: {name}"
            for name in _imports(path)
            if name.startswith(("promoter.git", "promoter.store")) and name not in allowed
        ]
    assert offenders == []


def test_the_api_hops_to_threads_through_its_own_pools() -> None:
    """Blocking work of a route runs on the request's pool (``promoter.api.workers``): a
    route that used Starlette's helper would put the operator's work on the shared pool
    that other roles can fill (protocol: api#work-bounded-per-caller)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "promoter" / "api").rglob("*.py")
        if "starlette.concurrency" in _imports(path) or "fastapi.concurrency" in _imports(path)
    ]
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the promoter and bench modules it imports, anywhere in it: a function's
    own import and one under ``if TYPE_CHECKING`` tie the two modules all the same."""
    paths = [*(ROOT / "promoter").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    modules = {_module_name(path): path for path in paths}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        graph[module] = {t for t in map(known, names) if t is not None and t != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_import_circles() -> None:
    assert _circles(_import_graph()) == []


# The engine's packages and modules, highest first: each imports only those below it. The
# use cases that combine others (operation) sit on top; the ports (the narrow views of
# services), the process state (services and what it holds) at the bottom.
ENGINE_LAYERS: list[set[str]] = [
    {"operation"},
    {"review"},
    {"gc", "trace"},
    {"snapshots"},
    {"intake"},
    {"verify"},
    {"receipts"},
    {"fencing", "locking", "routing", "repo_settings", "queries", "tickets"},
    {"ports"},
    {"services"},
    {"ownership"},
    {"liveness", "host_state", "repos", "webhooks", "state_sharing"},
]


def _engine_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["promoter", "engine"] and len(parts) > 2 else None


def test_every_engine_part_has_a_layer() -> None:
    parts = {
        part
        for path in (ROOT / "promoter" / "engine").iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").exists())
        for part in [path.stem]
    }
    assert parts == set().union(*ENGINE_LAYERS)


def test_the_engine_imports_downward() -> None:
    """Inside ``promoter.engine`` an import goes from a package or module to one in a lower
    layer, never sideways or back up: intake never reaches into the operations that use it."""
    rank = {part: i for i, layer in enumerate(ENGINE_LAYERS) for part in layer}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in _import_graph().items()
        if (source := _engine_part(module)) is not None
        for target in targets
        if (part := _engine_part(target)) is not None
        and part != source
        and rank.get(part, -1) <= rank.get(source, len(rank))
    )
    assert upward == []


def test_database_rows_never_leave_the_store() -> None:
    """The store hands out typed records; only ``promoter.store`` knows the tables."""
    offenders = []
    for path in (ROOT / "promoter").rglob("*.py"):
        if path.parent.name == "store":
            continue
        offenders += [
            f"{path.relative_to(ROOT)}: {name}"
            for name in _imports(path)
            if name == "promoter.store.tables"
        ]
    assert offenders == []


def _commands() -> dict[str, Any]:
    """Every command of ``promoter`` by its full name (``ops show``), the lazily loaded
    groups' too (``promoter.cli.lazy``: the top group's ``commands`` holds only the
    ones ``main`` defines until each is loaded)."""
    import typer.main
    from typer._click.core import Context  # typer's own click, which its groups use
    from typer.core import TyperGroup

    from promoter.cli.lazy import LazyCommand
    from promoter.cli.main import app

    top = typer.main.get_command(app)
    assert isinstance(top, TyperGroup)
    found: dict[str, Any] = {}
    with Context(top) as ctx:
        for name in top.list_commands(ctx):
            sub = top.get_command(ctx, name)
            if isinstance(sub, LazyCommand):
                sub = sub.real()
            if isinstance(sub, TyperGroup):
                found.update({f"{name} {child}": c for child, c in sub.commands.items()})
            else:
                found[name] = sub
    return found


def test_cli_reference_documents_every_command() -> None:
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    commands = _commands()
    assert {"ops show", "keys list", "hosts fence", "snapshot restore"} <= set(commands)
    missing = [
        name for name in commands if name not in reference and f"promoter {name}" not in reference
    ]
    assert missing == []


# the person's commands are documented at length in their guides; the common client
# options (and ``--json``) are stated once below the table
_PERSONS = ("run", "review", "approve", "reject", "reopen", "merge", "status", "receipt", "bundle")
_COMMON = {"--url", "--token-file", "--json", "--help", "-h"}


def test_cli_reference_names_every_option_of_the_operators_commands() -> None:
    """Each option of a command that is not the person's is in the first cell of its
    command's row of docs/reference/cli.md."""
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    cells = [line.split(" | ")[0] for line in reference.splitlines() if line.startswith("| `")]
    missing = []
    for name, command in _commands().items():
        if name.split()[0] in _PERSONS:
            continue
        pattern = re.compile(rf"(^|[`,] ?|promoter ){re.escape(name)}\b")
        (cell,) = [c for c in cells if pattern.search(c)] or [""]
        options = [o for p in command.params for o in p.opts if o.startswith("--")]
        missing += [f"{name} {o}" for o in options if o not in _COMMON and o not in cell]
    assert missing == []


# the person's commands (docs/guide/); the options every command shares are in the
# paragraph under the reference's table
PERSONS_COMMANDS = ("run", "review", "merge", "status", "receipt", "bundle")
SHARED_OPTIONS = frozenset({"--help", "--url", "--token-file", "--state-dir"})


def test_cli_reference_names_every_option_of_the_persons_commands() -> None:
    import click
    import typer.main

    from promoter.cli.main import app

    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    synopses = [line.split(" | ")[0] for line in reference.splitlines() if line.startswith("| `")]
    group = typer.main.get_command(app)
    unnamed = []
    for name in PERSONS_COMMANDS:
        command = group.get_command(click.Context(group), name)  # type: ignore[attr-defined]
        command = command.real() if hasattr(command, "real") else command
        children = getattr(command, "commands", None)
        for sub, leaf in (children or {None: command}).items():
            full = f"{name} {sub}" if sub else name
            text = " ".join(s for s in synopses if f"promoter {full}" in s)
            assert text, full
            for param in leaf.params:
                names = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
                if names and not SHARED_OPTIONS & set(names) and not any(n in text for n in names):
                    unnamed.append(f"promoter {full} {names[0]}")
    assert unnamed == []


def test_cli_reference_states_the_exit_codes_receipt_verify_returns() -> None:
    from promoter.cli import receipt_verify

    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    rows = {line.split(" | ")[0]: line for line in reference.splitlines()}
    for code in (receipt_verify.EXIT_WORKTREE_DIFFERS, receipt_verify.EXIT_SIGNATURE_NOT_CHECKED):
        assert "receipt verify" in rows.get(f"| {code}", ""), code
