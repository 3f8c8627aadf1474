"""A daemon or CLI whose database schema is not the code's head
(protocol: hosts#migrations-under-lock).

Newer than the code (a newer promoter migrated it): ``promoter db upgrade`` and
``promoter serve`` exit 78 with ``schema_mismatch``, naming both revisions, and touch
nothing. Older: ``check_schema`` refuses it, ``upgrade`` (and so ``serve``) migrates it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from promoter.errors import SchemaMismatch
from promoter.store.db import alembic_config, check_schema, head_revision, upgrade
from tests.support import forkserver

_FUTURE = "9999_from_a_newer_promoter"


def _set_revision(url: str, revision: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


def _cli(state_dir: Path, url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env["PROMOTER_DATABASE_URL"] = url
    return forkserver.run_text(
        [sys.executable, "-m", "promoter.cli.main", *argv, "--state-dir", str(state_dir)],
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_a_newer_schema_is_refused_by_upgrade_and_serve(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    upgrade(url)
    _set_revision(url, _FUTURE)
    with pytest.raises(SchemaMismatch, match=_FUTURE):
        check_schema(url)
    with pytest.raises(SchemaMismatch, match="newer than this code"):
        upgrade(url)
    head = head_revision(url)
    assert head is not None
    for argv in (("db", "upgrade"), ("serve", "--port", "0")):
        answer = _cli(tmp_path / "s", url, *argv)
        assert answer.returncode == 78, answer.stderr
        assert "schema_mismatch" in answer.stderr
        assert _FUTURE in answer.stderr and head in answer.stderr
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == (
            _FUTURE
        )
    engine.dispose()


def test_an_older_schema_is_refused_unmigrated_and_migrated_by_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'older.db'}"
    command.upgrade(alembic_config(url), "0005")
    with pytest.raises(SchemaMismatch, match="run `promoter db upgrade`"):
        check_schema(url)
    upgrade(url)
    check_schema(url)  # at head now


def test_an_empty_database_is_refused_unmigrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(SchemaMismatch, match="none"):
        check_schema(url)
