"""Contracts: generated schemas, the error-code registry, migrations, import boundaries."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from promoter.domain.schemas import render
from promoter.errors import PromoterError, all_error_classes
from promoter.store.db import make_engine, upgrade
from promoter.store.tables import Base

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schemas_are_up_to_date() -> None:
    rendered = render()
    committed = {
        p.name: p.read_text(encoding="utf-8") for p in (ROOT / "schemas").glob("*.schema.json")
    }
    assert committed == rendered, "run `make schemas` and commit the result"


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
        assert 64 <= cls.exit_code <= 78


def test_migrations_match_the_models(tmp_path: Path) -> None:
    # the test's own database: SQLite here, PostgreSQL in the suite's PostgreSQL pass
    url = os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / 'contract.db'}"
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
        if path.name == "schemas.py":  # the schema generator writes files by design
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
                if name.startswith(("promoter.api", "promoter.cli"))
            ]
    assert offenders == []


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


def test_cli_reference_documents_every_command() -> None:
    import typer.main

    from promoter.cli.main import app

    reference = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    command = typer.main.get_command(app)
    assert hasattr(command, "commands")
    missing = []
    for name, sub in command.commands.items():
        names = [f"promoter {name}"]
        if hasattr(sub, "commands"):
            names = [f"{name} {child}" for child in sub.commands]
        missing += [n for n in names if n not in reference]
    assert missing == []
