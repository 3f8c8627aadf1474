"""A journal write made from a stale read never overwrites a newer status.

The operations row's status is its version (``promoter.store.tables``): every UPDATE
through the ORM carries ``WHERE status = <the status the row was read with>``. Here one
session holds a row while a second moves it and commits; the first session's write is
refused (``operation_conflict``) and nothing of it is recorded. Before, the first write
won: a report landed on a row whose status it had never seen, and a status change that
the transition table allowed from the stale status (``needs_reconciliation`` →
``abandoned``) overwrote ``completed``. A row read through the journal is held by its
session, so a later read in the same transaction neither reads it again nor changes what
the write is checked against. Runs on SQLite, and on PostgreSQL under
``PROMOTER_TEST_DATABASE=postgresql``.
"""

from __future__ import annotations

import gc
import itertools
from pathlib import Path

import pytest

from promoter.domain.status import OperationStatus as S
from promoter.errors import OperationConflict
from promoter.store import journal
from promoter.store.db import Database
from promoter.store.tables import OperationRow
from tests.support.databases import own_url
from tests.support.rows import journal_database, operation_row
from tests.support.statements import selects_from, statements

_ids = itertools.count()
STALE = (
    "the operation was changed by another request or host while this one was deciding; "
    "nothing of this request was recorded; look at it again"
)


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return journal_database(own_url(tmp_path, "journal.db"))


def _at(database: Database, *path: S) -> str:
    operation_id = f"op_stale{next(_ids):06d}"
    with database.session() as session:
        session.add(operation_row(operation_id))
    with database.session() as session:
        for status in path:
            journal.set_status(session, operation_id, status)
    return operation_id


def _row(database: Database, operation_id: str) -> tuple[str, dict[str, object] | None]:
    with database.session() as session:
        row = journal.require(session, operation_id)
        return row.status, row.report


def test_a_status_change_from_a_stale_read_is_refused(database: Database) -> None:
    op_id = _at(database, S.NEEDS_RECONCILIATION)
    with pytest.raises(OperationConflict) as refused, database.session() as stale:
        held = stale.get(OperationRow, op_id)  # read as needs_reconciliation, and kept
        assert held is not None and held.status == S.NEEDS_RECONCILIATION
        with database.session() as other:  # meanwhile: continue claims it and completes
            journal.set_status(other, op_id, S.IN_PROGRESS)
            journal.set_status(other, op_id, S.COMPLETED)
        journal.set_status(stale, op_id, S.ABANDONED, code="abandoned")
    assert refused.value.detail == STALE
    assert _row(database, op_id) == (S.COMPLETED, None)


def test_a_report_written_from_a_stale_read_is_refused(database: Database) -> None:
    op_id = _at(database)
    with pytest.raises(OperationConflict) as refused, database.session() as stale:
        held = stale.get(OperationRow, op_id)
        assert held is not None and held.status == S.IN_PROGRESS
        with database.session() as other:
            journal.set_status(other, op_id, S.NEEDS_RECOVERY, report={"why": "owner gone"})
        journal.set_report(stale, op_id, {"written": "from the stale read"})
    assert refused.value.detail == STALE
    assert _row(database, op_id) == (S.NEEDS_RECOVERY, {"why": "owner gone"})


def test_a_write_after_a_change_that_kept_the_status_goes_through(database: Database) -> None:
    op_id = _at(database)
    with database.session() as first:
        held = first.get(OperationRow, op_id)
        assert held is not None
        with database.session() as other:  # the status stays: nothing for the check to see
            journal.set_report(other, op_id, {"by": "other"})
        journal.set_status(first, op_id, S.COMPLETED)
    assert _row(database, op_id) == (S.COMPLETED, {"by": "other"})


def test_a_row_read_through_the_journal_stays_the_one_writes_are_checked_against(
    database: Database,
) -> None:
    # the journal hands out records, not rows: before the session held the row, nothing
    # kept it, the identity map let it go, and the write read it again (seeing
    # ``completed``) instead of being checked against what the decision was made on
    op_id = _at(database, S.NEEDS_RECONCILIATION)
    with pytest.raises(OperationConflict) as refused, database.session() as stale:
        decided_on = journal.require(stale, op_id)
        assert decided_on.status == S.NEEDS_RECONCILIATION
        gc.collect()
        with database.session() as other:
            journal.set_status(other, op_id, S.IN_PROGRESS)
            journal.set_status(other, op_id, S.COMPLETED)
        assert journal.require(stale, op_id).status == S.NEEDS_RECONCILIATION
        journal.set_status(stale, op_id, S.ABANDONED, code="abandoned")
    assert refused.value.detail == STALE
    assert _row(database, op_id) == (S.COMPLETED, None)


def test_an_operation_is_read_once_per_transaction(database: Database) -> None:
    op_id = _at(database)
    with statements(database.engine) as seen, database.session() as session:
        journal.require(session, op_id)
        gc.collect()
        journal.set_report(session, op_id, {"step": 1})
        journal.require(session, op_id)
        journal.set_status(session, op_id, S.COMPLETED)
    assert len(selects_from(seen, "operations")) == 1, seen
    assert _row(database, op_id) == (S.COMPLETED, {"step": 1})
