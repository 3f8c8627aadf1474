"""A command of the person's command line loads none of the daemon, and only what it uses.

Each command runs as the installed program does (``promoter.cli.main.entry``) in a process
of its own against a real daemon; what it imported is read at exit (an at-exit hook, which
must still run when the program ends without its teardown). No command that talks to a
daemon may load the daemon's side: its web stack, its database, its services, the
asynchronous client, nor httpx (nor its transport, httpcore) for a loopback daemon. A command
printing JSON loads no rich, nor do ``run --list`` and ``receipt verify`` load rich's
console: they print only plain or merely styled lines. One that reads no wire document
loads no pydantic; nor do ``receipt verify``, which checks its documents with the
pydantic-free validator, and ``bundle build`` from a grant file, nor when it submits
(the receipt checked by the validator too); ``bundle build`` of the common shape loads no
typer either. ``run --list``, ``review`` and ``receipt verify`` load no typer (their
command lines read without it), and ``receipt verify`` none of securesystemslib (the
signature checked with cryptography alone), nor what only ``--chain`` or ``--worktree``
use; neither makes a dataclass. ``bundle build`` makes none either, and loads neither
``datetime`` nor ``rfc8785`` (promoter's JCS fast path), nor ``tempfile`` and ``shutil``
(its scratch space is ``promoter.fs.scratch``'s). What these cost is measured in
``bench/cli_start.py``, not here: the assertions are about modules, so they do not depend on the machine's speed.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import pytest
from typer._click.core import ParameterSource
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from promoter.cli.lazy import ENTRIES, load
from promoter.cli.params import _Spared
from promoter.config import RepositoryConfig
from promoter.domain.documents import sealed_grant
from promoter.domain.models import GrantV1, PatchBundleV1, PatchVerificationReceiptV1
from promoter.executor import sandbox as sandboxes
from tests.gitutil import git
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import make_grant
from tests.support.promotion import promote, submit

# the daemon's own: its web stack, its database, its services, the async client
SERVER = (
    "promoter.api",
    "promoter.adapters",
    "promoter.config",
    "promoter.engine",
    "promoter.store",
    "promoter.client.aio",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic_settings",
    "asyncio",
)
# what an offline receipt check and a sandbox's own files legitimately use of those
ALLOWED = (
    "promoter.engine.receipts.signing",
    "promoter.store.keyring",
    "promoter.engine.receipts.statement",
    "promoter.engine.receipts.chain",
    "promoter.engine.receipts.worktree",
    "promoter.engine.receipts",
    "promoter.engine",
    "promoter.store",
    "promoter.store.durable",
    "promoter.store.state_temps",
)
PROBE = """\
import atexit, json, os, sys
def _loaded():
    with open(os.environ["LOADED_OUT"], "w") as out:
        json.dump(sorted(sys.modules), out)
atexit.register(_loaded)
sys.argv = ["promoter", *sys.argv[1:]]
from promoter.cli.main import entry
entry()
"""


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def loaded_by(args: list[str], env: dict[str, str], out: Path) -> tuple[int, set[str], str]:
    """The exit code, the modules loaded and stdout of ``promoter ARGS``."""
    if out.exists():
        out.unlink()
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env, "LOADED_OUT": str(out)},
        timeout=120,
    )
    assert out.exists(), f"the at-exit hook did not run: {result.stderr}"
    modules = set(json.loads(out.read_text()))
    modules.discard("httpx._main")  # the placeholder standing in for httpx's command line
    return result.returncode, modules, result.stdout


@pytest.fixture
def held(tmp_path: Path, repo: Path) -> Iterator[tuple[Daemon, dict[str, str]]]:
    """A daemon whose repository needs approval, one promotion held, its files on disk."""
    config = RepositoryConfig(path=repo, approval="required")
    with running_daemon(tmp_path / "state", {"work": config}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        changes = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        assert promote(daemon, bundle, receipt).json()["status"] == "awaiting_approval"
        with daemon.orchestrator() as client:
            path = f"/v1/bundles/{bundle['bundle_id']}/verification.dsse"
            (tmp_path / "verification.dsse").write_bytes(client.get(path).content)
            (tmp_path / "keys.json").write_bytes(client.get("/v1/keys").content)
        # a worktree with one change and its grant, for ``bundle build`` (no daemon asked)
        git(tmp_path, "clone", "-q", str(repo), str(tmp_path / "executor"))
        (tmp_path / "executor" / "src" / "app.py").write_bytes(b"print('v3')\n")
        grant = sealed_grant(GrantV1.model_validate(make_grant(repo, identity)))
        (tmp_path / "grant.json").write_text(json.dumps(grant.wire()))
        yield daemon, {"bundle": bundle["bundle_id"], "dir": str(tmp_path)}


def _commands(found: dict[str, str]) -> dict[str, list[str]]:
    envelope = [f"{found['dir']}/verification.dsse", "--keys", f"{found['dir']}/keys.json"]
    build = ["bundle", "build", "--worktree", f"{found['dir']}/executor"]
    build += ["--grant", f"{found['dir']}/grant.json"]
    return {
        "help": ["--help"],
        "run_list": ["run", "--list"],  # the state directory from PROMOTER_STATE_DIR
        "review": ["review"],
        "review_json": ["review", "--json"],
        "ops_list": ["ops", "list"],
        "ops_list_json": ["ops", "list", "--json"],
        "bundle_show": ["bundle", "show", found["bundle"]],
        "bundle_show_json": ["bundle", "show", found["bundle"], "--json"],
        "bundle_diff_json": ["bundle", "diff", found["bundle"], "--json"],
        "receipt_verify": ["receipt", "verify", *envelope],
        "receipt_verify_json": ["receipt", "verify", *envelope, "--json"],
        "bundle_build": [*build, "--out", f"{found['dir']}/built.json"],
        "bundle_build_printed": [*build, "--json"],
    }


NO_WIRE_MODEL = ("help", "run_list", "review", "review_json", "ops_list", "ops_list_json")
# they check the envelope and the receipt with ``promoter.domain.wirecheck``, not the models;
# ``bundle build`` the grant and the bundle it seals (its models' bytes: test_builder_records)
NO_PYDANTIC = (
    *NO_WIRE_MODEL,
    "receipt_verify",
    "receipt_verify_json",
    "bundle_build",
    "bundle_build_printed",
)
# they print only lines rich would print as they are, or only styled (``promoter.cli.common``;
# the diff of ``review`` as ``promoter.cli.styled`` text)
PLAIN = ("run_list", "receipt_verify", "review")
# their command lines read without typer (``promoter.cli.run_args``, ``quick_args``)
NO_TYPER = ("run_list", "review", "review_json", "receipt_verify", "receipt_verify_json")


def test_client_commands_load_no_server_module_no_rich_for_json_no_unused_models(
    held: tuple[Daemon, dict[str, str]], tmp_path: Path
) -> None:
    daemon, found = held
    env = {
        "PROMOTER_URL": daemon.url,
        "PROMOTER_TOKEN": daemon.operator_token,
        "PROMOTER_STATE_DIR": str(tmp_path / "runs-state"),
    }
    for name, args in _commands(found).items():
        code, modules, stdout = loaded_by(args, env, tmp_path / "loaded.json")
        assert code == 0, (name, stdout)
        server = sorted(m for m in modules if _within(m, SERVER) and m not in ALLOWED)
        assert server == [], name
        assert "httpcore" not in modules, name  # a loopback daemon through http1
        assert "httpx" not in modules, name  # ... without httpx (``promoter.client.direct``)
        assert "http.client" not in modules, name  # ... nor http.client (``http1``)
        if name.endswith("_json"):
            assert "rich" not in modules, name
            json.loads(stdout)  # and what it printed is the JSON
        if name in NO_PYDANTIC:
            assert "pydantic" not in modules, name
            assert "promoter.domain.models" not in modules, name
        if name == "help":
            assert "httpx" not in modules and "rich" not in modules
        if name == "run_list":  # the run path's modules only for a run (promoter.cli.run_start)
            assert not {"promoter.cli.run_start", "promoter.executor.confine"} & modules
            assert not {"promoter.executor.layers", "promoter.store.durable"} & modules
        if name in PLAIN:
            assert "rich.console" not in modules, name  # plain lines, written without it
        if name == "review_json":
            [waiting] = json.loads(stdout)
            assert waiting["status"] == "awaiting_approval"
            assert waiting["bundle_id"] == found["bundle"]
        if name == "receipt_verify_json":
            assert json.loads(stdout)["valid"] is True
        if name in NO_TYPER:
            assert "typer" not in modules, name
        if name.startswith(("review", "receipt_verify")):  # their records: no dataclasses
            assert "dataclasses" not in modules, name
            assert "promoter.fs.own_temp" not in modules, name  # ``promoter serve`` writes
        if name == "run_list":
            assert "secrets" not in modules  # a run id's, made only for a run
        if name.startswith("receipt_verify"):  # the signature checked with cryptography alone
            assert "securesystemslib" not in modules, name
            # the ledger's keys read as the PEM cryptography writes, without its PEM readers
            assert "cryptography.hazmat.primitives.serialization" not in modules, name
            assert "promoter.engine.receipts.chain" not in modules, name  # --chain's only
            assert "promoter.engine.receipts.worktree" not in modules, name  # --worktree's
        if name == "bundle_build":  # its table of paths, plain off a terminal
            assert "rich" not in modules, (name, stdout)
            assert "logging" not in modules  # the daemon's logs only
            # a build from a grant file asks no daemon and judges no worktree state
            assert "promoter.cli.userconfig" not in modules
            assert "promoter.domain.path_state" not in modules
        if name.startswith("bundle_build"):  # read without typer (``promoter.cli.bundle_args``)
            assert not {"typer", "click", "promoter.cli.app", "promoter.cli.lazy"} & modules
            # timestamps checked without ``datetime``, the bundle's JCS on the fast path
            assert not {"datetime", "rfc8785", "dataclasses"} & modules, name
            # its scratch directory and files made without them (``promoter.fs.scratch``)
            assert not {"tempfile", "shutil", "random"} & modules, name
        if name == "bundle_build_printed":  # no spinner off a terminal, asked without rich
            assert "rich" not in modules, name
            built = json.loads(stdout)["bundle"]
            assert [c["path"] for c in built["changes"]] == ["src/app.py"]
            PatchBundleV1.model_validate(built)  # here, in the test's process


def test_bundle_build_submit_reads_its_receipt_without_pydantic(
    held: tuple[Daemon, dict[str, str]], tmp_path: Path, repo: Path
) -> None:
    """``bundle build --submit`` checks the receipt with the validator, not its model, and
    prints the same document the model would give back."""
    daemon, found = held
    identity = daemon.services.registry.by_name("work").identity
    grant = sealed_grant(
        GrantV1.model_validate(make_grant(repo, identity, grant_id="grt_s"))
    ).wire()
    (tmp_path / "submitted.json").write_text(json.dumps(grant))
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code in (200, 201), answer.text
        minted = orch.post("/v1/executor-tokens", json={"executor_run_id": "run_1"})
        assert minted.status_code == 201, minted.text
    (tmp_path / "executor.token").write_text(minted.json()["token"])
    args = ["bundle", "build", "--worktree", f"{found['dir']}/executor"]
    args += ["--grant", str(tmp_path / "submitted.json"), "--submit", "--json"]
    args += ["--token-file", str(tmp_path / "executor.token")]
    code, modules, stdout = loaded_by(args, {"PROMOTER_URL": daemon.url}, tmp_path / "l.json")
    assert code == 0, stdout
    assert "pydantic" not in modules and "promoter.domain.models" not in modules
    receipt = json.loads(stdout)["verification_receipt"]
    assert PatchVerificationReceiptV1.model_validate(receipt).wire() == receipt
    assert {check["status"] for check in receipt["checks"]} == {"passed"}


def test_the_program_exits_with_the_error_code_after_its_at_exit_work(tmp_path: Path) -> None:
    """Ending without the interpreter's teardown keeps the exit code and the message."""
    missing = tmp_path / "absent.dsse"
    out = tmp_path / "loaded.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "receipt", "verify", str(missing)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LOADED_OUT": str(out)},
        timeout=120,
    )
    assert result.returncode == 78
    assert "[config_error]" in result.stderr and str(missing) in result.stderr
    assert out.exists()


def test_spared_coercion_answers_what_typers_own_answers(tmp_path: Path) -> None:
    """For every parameter of every command: its default, None, and what may be typed."""
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir(mode=0)
    for entry in ENTRIES:
        command = load(entry)
        commands = [command, *getattr(command, "commands", {}).values()]
        for cmd in commands:
            ctx = cmd.make_context(cmd.name, [], resilient_parsing=True)
            for param in cmd.params:
                descriptor = getattr(param, "type_descriptor", None)
                if descriptor is None:
                    continue
                values = [param.get_default(ctx), None, *_TYPED.get(descriptor.annotation, [])]
                if descriptor.annotation is Path:
                    values += [str(tmp_path), str(tmp_path / "absent"), str(unreadable)]
                if descriptor.annotation == list[Path]:
                    here = (str(tmp_path / "absent"), "rel/p")
                    values += [(str(tmp_path),), here, (*here, str(unreadable))]
                for value in values:
                    for source in (ParameterSource.DEFAULT, ParameterSource.COMMANDLINE):
                        ctx.set_parameter_source(param.name, source)
                        spared = _answer(_Spared(descriptor).coerce, value, param, ctx)
                        own = _answer(build_runtime_param(descriptor).coerce, value, param, ctx)
                        assert spared == own, (cmd.name, param.name, value)


# what the person may type, by annotation (a repeatable option's or the command's: tuples)
_TYPED: dict[Any, list[Any]] = {
    str: ["x", "caf\udce9 ", ""],
    bool: [True, False],
    list[str]: [("a", "caf\udce9 ", ""), ()],
    Path: ["rel/p", "", "caf\udce9", "-"],
    list[Path]: [("rel/p", "", "caf\udce9", "-"), ("a",), (), ["a", "rel/p"], []],
}


def _answer(coerce: Callable[..., Any], value: Any, param: Any, ctx: Any) -> tuple[Any, ...]:
    """A coercion's value and its type, or the refusal it raised and its words."""
    try:
        value = coerce(value, param, ctx)
    except BadParameter as exc:
        return ("refused", exc.format_message())
    return (value, type(value))


def test_run_yes_builds_and_promotes_without_pydantic(tmp_path: Path, repo: Path) -> None:
    """``promoter run --yes``: the grant read back, the bundle built and promoted with its
    evidence, the receipt shown, and no model loaded for any of it, nor rich, nor typer."""
    with running_daemon(tmp_path / "state", {"work": RepositoryConfig(path=repo)}) as daemon:
        env = {
            "PROMOTER_URL": daemon.url,
            "PROMOTER_TOKEN": daemon.operator_token,
            "PROMOTER_STATE_DIR": str(tmp_path / "runs-state"),
        }
        script = "printf 'added\\n' > added.txt"
        args = ["run", "--repo", "work", "--yes", "--keep", "--", "sh", "-c", script]
        first = loaded_by(args, env, tmp_path / "loaded.json")
        (record,) = sandboxes.list_runs(tmp_path / "runs-state")
        # the next step chains on the first: its grant's base read back as records
        script = "printf 'again\\n' >> added.txt"
        args = ["run", "--continue", record.run_id, "--yes", "--", "sh", "-c", script]
        chained = loaded_by(args, env, tmp_path / "loaded.json")
    for code, modules, stdout in (first, chained):
        assert code == 0, stdout
        server = sorted(m for m in modules if _within(m, SERVER) and m not in ALLOWED)
        assert server == []
        assert "pydantic" not in modules
        assert "promoter.domain.models" not in modules
        # its lines (the command's words with their backslashes too) and its summary are
        # plain off a terminal: written without rich
        assert "rich" not in modules, stdout
        assert "_strptime" not in modules  # the grant's timestamps read without it
        assert "httpx" not in modules  # the loopback daemon reached without it
        assert "typer" not in modules  # its command line read without typer (run_args)
        assert "tenacity" not in modules  # every call answered at its first try
        # the loopback daemon over promoter's own HTTP/1.1 (``promoter.client.http1``): no
        # http.client, whose email parser and ssl cost 18 ms; the rare paths' logging, the
        # architecture read without platform, an address resolved without the idna codec
        slow = {"http.client", "email", "ssl", "logging", "platform", "encodings.idna"}
        assert slow & modules == set(), stdout
        # what only another path uses: a base laid over an older one, a copied clone, a
        # gitlink or a changed path beside the seed's, several files synced as a group,
        # a grant file, the daemon's row-by-row bundle bytes
        assert RUN_ELSEWHERE & modules == set(), stdout
        # each record class of the path has its own docstring: ``dataclass`` writes
        # none by ``inspect.signature``, whose first call costs more than the record
        assert _undocumented_records(modules) == [], stdout
        # its records made by ``promoter.domain.record_type``: no ``dataclasses``, whose import
        # (``inspect``, ``ast``, ``dis``, ``tokenize``) and compilations cost 20-30 ms
        assert {"dataclasses", "inspect"} & modules == set(), stdout
    assert (repo / "added.txt").read_bytes() == b"added\nagain\n"


# modules ``promoter run --yes`` loads only off its common path
RUN_ELSEWHERE = {
    "promoter.executor.base_delta",
    "promoter.executor.sandbox_repo",
    "promoter.git.gitlinks",
    "promoter.fs.group_sync",
    "promoter.domain.json_input",
    "promoter.domain.jcs_rows",
}


def _undocumented_records(modules: set[str]) -> list[str]:
    """The dataclasses defined in the loaded promoter modules without a docstring."""
    found = []
    for name in sorted(m for m in modules if _within(m, ("promoter",))):
        for cls in vars(importlib.import_module(name)).values():
            own = isinstance(cls, type) and is_dataclass(cls) and cls.__module__ == name
            if own and (cls.__doc__ or "").startswith(cls.__name__ + "("):
                found.append(f"{name}.{cls.__qualname__}")
    return found
