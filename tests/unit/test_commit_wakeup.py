"""A commit wakes the long-polling readers exactly when it wrote, however it wrote.

``promoter.store.feed`` notifies ``COMMITS`` after a commit that flushed ORM objects or
executed an INSERT, UPDATE or DELETE statement (the journal writes an operation's steps
as bulk statements, with no ORM object); a commit that only read notifies nobody. The
notifier is replaced by a fresh one for each test, so the counts are exact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter.domain.status import StepStatus
from promoter.store import feed, journal, step_rows
from promoter.store.db import Database
from promoter.store.wakeup import Notifier
from tests.support.rows import journal_database

OPERATION = "op_000001"
STEP = {"path": "src/app.py", "operation": "modify", "old": None, "new": None}


@pytest.fixture
def notifier(monkeypatch: pytest.MonkeyPatch) -> Notifier:
    fresh = Notifier()
    monkeypatch.setattr(feed, "COMMITS", fresh)
    return fresh


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return journal_database(f"sqlite:///{tmp_path / 'wakeup.db'}", OPERATION)


def test_a_commit_of_only_bulk_step_statements_wakes_the_readers(
    database: Database, notifier: Notifier
) -> None:
    with database.session() as session:
        step_rows.add_steps(session, OPERATION, [STEP, {**STEP, "path": "src/b.py"}])
    assert notifier.generation == 1
    with database.session() as session:
        step_rows.set_steps(session, OPERATION, {0: StepStatus.COMPLETED})
    assert notifier.generation == 2
    with database.session() as session:
        step_rows.mark_all_steps(session, OPERATION, StepStatus.COMPLETED)
    assert notifier.generation == 3
    with database.session() as session:
        step_rows.delete_steps(session, OPERATION)
    assert notifier.generation == 4


def test_a_commit_that_only_read_wakes_nobody(database: Database, notifier: Notifier) -> None:
    with database.session() as session:
        assert journal.require(session, OPERATION).status == "in_progress"
        assert step_rows.steps(session, OPERATION) == []
        assert not step_rows.has_steps(session, OPERATION)
    assert notifier.generation == 0


def test_a_commit_of_orm_objects_wakes_the_readers(database: Database, notifier: Notifier) -> None:
    with database.session() as session:
        step_rows.add_created_dirs(session, OPERATION, ["src/made"])
    assert notifier.generation == 1
    with database.session() as session:
        assert step_rows.created_dirs(session, OPERATION) == ["src/made"]
    assert notifier.generation == 1
