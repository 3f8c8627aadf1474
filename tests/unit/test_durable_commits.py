"""``Database.session(durable=...)``: which SQLite commits are flushed, and that a relaxed
one never leaves its pooled connection relaxed for a durable one.

A durable session runs in ``synchronous=FULL`` (SQLite flushes the WAL at its commit,
counted as ``sqlite_commit`` when it wrote); ``durable=False`` in ``synchronous=NORMAL``
(not flushed, not counted). The mode is read back from SQLite itself on the very
connection each session uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from promoter.fs import flush
from promoter.store.db import Database, upgrade
from tests.support.rows import operation_row

FULL, NORMAL = 2, 1


@pytest.fixture
def database(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    upgrade(url)
    return Database(url, 5.0)


def _mode(session: Session) -> int:
    return int(session.execute(text("PRAGMA synchronous")).scalar_one())


def test_a_relaxed_commit_never_leaves_its_connection_relaxed_for_a_durable_one(
    database: Database,
) -> None:
    modes = []
    for durable in (True, False, True, False, False, True):
        with database.session(durable=durable) as session:
            modes.append(_mode(session))
    assert modes == [FULL, NORMAL, FULL, NORMAL, NORMAL, FULL]


def test_only_a_durable_commit_that_wrote_is_counted_as_a_flush(database: Database) -> None:
    before = flush.flushes()
    with database.session() as session:  # reads only: SQLite writes no WAL frame
        _mode(session)
    with database.session(durable=False) as session:
        session.add(operation_row("op_relaxed"))
    assert flush.flushes() - before == {}
    with database.session() as session:
        session.add(operation_row("op_durable"))
    assert flush.flushes() - before == {"sqlite_commit": 1}
    with database.session() as session:
        names = session.execute(text("SELECT operation_id FROM operations")).scalars().all()
    assert sorted(names) == ["op_durable", "op_relaxed"]
