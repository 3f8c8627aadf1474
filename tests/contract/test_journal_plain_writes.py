"""The hot path's journal writes as plain statements, against the held row they replace.

``journal.write_plan_events`` and ``journal.complete`` write an operation read in the same
transaction (``journal.read_required``) with ``WHERE status = <the status read>``, as the
ORM's version check of a held row does. Attacked here: a row another request or host
moved meanwhile (refused with ``operation_conflict``, nothing of the write recorded), a
move the transition table forbids (refused as the ORM refuses it); and what they write
(the row, its attempt, the feed, the witness) is compared with what the held row's
writes (``set_outcome_event``, ``set_receipt``, ``set_report``, ``set_status``,
``set_plan_events``) leave. ``journal.start_operation`` (a new promotion's row and first
attempt as two INSERTs) against ``create_operation`` with ``start_attempt``: every column,
the attempt and the feed alike; a twin already in the table and a first status the table
forbids refused alike. Runs on SQLite, and on PostgreSQL under
``PROMOTER_TEST_DATABASE=postgresql``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from promoter.domain.status import OperationKind
from promoter.domain.status import OperationStatus as S
from promoter.errors import OperationConflict, PromoterError
from promoter.store import journal, ledger, witness
from promoter.store.db import Database
from promoter.store.tables import AttemptRow, FeedRow, OperationRow
from tests.support.databases import own_url
from tests.support.rows import journal_database, operation_row

_ids = itertools.count()
STALE = (
    "the operation was changed by another request or host while this one was deciding; "
    "nothing of this request was recorded; look at it again"
)
RECEIPT = {"receipt": "document", "n": 1}


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return journal_database(own_url(tmp_path, "journal.db"))


def _at(database: Database, *path: S) -> str:
    operation_id = f"op_plain{next(_ids):06d}"
    with database.session() as session:
        session.add(operation_row(operation_id))
        session.flush()
        journal.start_attempt(session, operation_id)
    with database.session() as session:
        for status in path:
            journal.set_status(session, operation_id, status)
    return operation_id


_SHOWN = ("status", "code", "detail", "report", "receipt", "receipt_sha256")


def _state(database: Database, operation_id: str) -> dict[str, Any]:
    """The row, its attempts and its feed entries, the ids and times left out."""
    with database.session() as session:
        row = session.get(OperationRow, operation_id)
        assert row is not None
        attempts = session.scalars(
            select(AttemptRow).where(AttemptRow.operation_id == operation_id)
        ).all()
        entries = session.scalars(
            select(FeedRow).where(FeedRow.operation_id == operation_id).order_by(FeedRow.position)
        ).all()
        return {
            **{name: getattr(row, name) for name in _SHOWN},
            "events": (row.decision_event_id, row.action_event_id, row.outcome_event_id),
            "attempts": [(a.attempt, a.status, a.code, a.ended_at is None) for a in attempts],
            "feed": [(e.kind, e.status, e.code, e.event_id is None) for e in entries],
        }


def _without_event_ids(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "events": tuple(e is None for e in state["events"])}


def test_a_completion_from_a_stale_read_is_refused_and_records_nothing(
    database: Database,
) -> None:
    op_id = _at(database)
    with pytest.raises(OperationConflict) as refused, database.session() as stale:
        read = journal.read_required(stale, op_id)
        assert read.status == S.IN_PROGRESS
        with database.session() as other:  # meanwhile: the watchdog hands it to recovery
            journal.set_status(other, op_id, S.NEEDS_RECOVERY, report={"why": "owner gone"})
        outcome = ledger.append(stale, op_id, "outcome", {"status": "completed"})
        journal.complete(stale, read, report={}, receipt=(outcome, RECEIPT, "5" * 64))
    assert refused.value.detail == STALE
    state = _state(database, op_id)
    assert (state["status"], state["report"], state["receipt"]) == (
        S.NEEDS_RECOVERY,
        {"why": "owner gone"},
        None,
    )
    assert state["attempts"] == [(1, S.NEEDS_RECOVERY, None, False)]
    # the creation's and the other's, no outcome
    assert [kind for kind, *_ in state["feed"]] == ["status", "status"]


def test_plan_events_from_a_stale_read_are_refused_and_record_nothing(
    database: Database,
) -> None:
    op_id = _at(database)
    with pytest.raises(OperationConflict) as refused, database.session() as stale:
        read = journal.read_required(stale, op_id)
        with database.session() as other:
            journal.set_status(other, op_id, S.NEEDS_RECOVERY)
        decision = ledger.append(stale, op_id, "decision", {"allowed": True})
        action = ledger.append(stale, op_id, "action", {"target_count": 1})
        journal.write_plan_events(stale, read, decision, action)
    assert refused.value.detail == STALE
    assert _state(database, op_id)["events"] == (None, None, None)


def test_a_completion_the_transition_table_forbids_is_refused(database: Database) -> None:
    op_id = _at(database, S.NEEDS_RECONCILIATION, S.ABANDONED)
    with pytest.raises(OperationConflict) as refused, database.session() as session:
        journal.complete(session, journal.read_required(session, op_id), report=None)
    assert refused.value.context["current_status"] == S.ABANDONED
    assert _state(database, op_id)["status"] == S.ABANDONED


def test_a_completion_writes_what_the_held_rows_writes_wrote(database: Database) -> None:
    plain, held = _at(database), _at(database)
    seen: dict[str, witness.Witness] = {}
    for op_id in (plain, held):
        with witness.watch(op_id) as watched:
            seen[op_id] = watched
            with journal.unit_of_work(database) as session:
                decision = ledger.append(session, op_id, "decision", {"allowed": True})
                action = ledger.append(session, op_id, "action", {"target_count": 1})
                if op_id == plain:
                    read = journal.read_required(session, op_id)
                    journal.write_plan_events(session, read, decision, action)
                else:
                    journal.set_plan_events(session, op_id, decision, action)
            with journal.unit_of_work(database) as session:
                read = journal.read_required(session, op_id)
                outcome = ledger.append(session, op_id, "outcome", {"status": "completed"})
                if op_id == plain:
                    receipt = (outcome, RECEIPT, "5" * 64)
                    journal.complete(session, read, report={"kept": 1}, receipt=receipt)
                else:
                    journal.set_outcome_event(session, op_id, outcome)
                    journal.set_receipt(session, op_id, RECEIPT, "5" * 64)
                    journal.set_report(session, op_id, {"kept": 1})
                    journal.set_status(session, op_id, S.COMPLETED)
    assert _without_event_ids(_state(database, plain)) == _without_event_ids(_state(database, held))
    state = _state(database, plain)
    assert state["status"] == S.COMPLETED and state["attempts"] == [(1, S.COMPLETED, None, False)]
    assert [kind for kind, *_ in state["feed"]] == ["status", "decision", "action", "outcome"]
    assert [status for _, status, *_ in state["feed"]] == [S.IN_PROGRESS] * 3 + [S.COMPLETED]
    assert seen[plain].ended is not None and seen[held].ended is not None
    assert seen[plain].ended == seen[held].ended
    assert [e[:2] for e in seen[plain].events] == [e[:2] for e in seen[held].events]
    assert seen[plain].ended is not None and seen[plain].ended.status == S.COMPLETED


def test_a_completion_of_a_row_holding_its_receipt_keeps_it(database: Database) -> None:
    op_id = _at(database)
    with database.session() as session:
        journal.set_receipt(session, op_id, RECEIPT, "5" * 64)
    with database.session() as session:
        journal.complete(session, journal.read_required(session, op_id), report={})
    state = _state(database, op_id)
    assert (state["status"], state["receipt"], state["receipt_sha256"], state["report"]) == (
        S.COMPLETED,
        RECEIPT,
        "5" * 64,
        {},
    )


# --- a new operation and its first attempt, as plain INSERTs (``journal.start_operation``) ---

_EVIDENCE = ("grt_started", "2" * 64, "bnd_started", "3" * 64, "4" * 64)
_OWNER = (4242, "started-at", "boot-id", "host-a", "2026-12-06T21:00:00Z")
_REPOSITORY = ("repo_" + "0" * 32, "demo")


def _start(session: Any, op_id: str, status: S, *, plain: bool) -> None:
    if plain:
        journal.start_operation(
            session,
            operation_id=op_id,
            kind=OperationKind.PROMOTION,
            status=status,
            repository=_REPOSITORY,
            owner=_OWNER,
            evidence=_EVIDENCE,
            fence=7,
        )
        return
    grant_id, grant_sha256, bundle_id, bundle_sha256, receipt_sha256 = _EVIDENCE
    journal.create_operation(
        session,
        operation_id=op_id,
        kind=OperationKind.PROMOTION,
        status=status,
        repository_identity=_REPOSITORY[0],
        repository_name=_REPOSITORY[1],
        owner=_OWNER,
        grant_id=grant_id,
        bundle_id=bundle_id,
        grant_sha256=grant_sha256,
        bundle_sha256=bundle_sha256,
        verification_receipt_sha256=receipt_sha256,
        fence=7,
    )
    session.flush()
    journal.start_attempt(session, op_id)


_STAMPS = ("operation_id", "created_at", "updated_at")


def _columns(database: Database, op_id: str) -> dict[str, Any]:
    """Every column of the row and of its attempts, but its id and times; its feed."""
    with database.session() as session:
        row = session.get(OperationRow, op_id)
        assert row is not None
        columns = {c.key: getattr(row, c.key) for c in OperationRow.__table__.columns}
        attempts = session.scalars(select(AttemptRow).where(AttemptRow.operation_id == op_id))
        entries = session.scalars(
            select(FeedRow).where(FeedRow.operation_id == op_id).order_by(FeedRow.position)
        )
        return {
            **{k: v for k, v in columns.items() if k not in _STAMPS},
            "times": (columns["created_at"] == columns["updated_at"]),
            "attempts": [
                (a.attempt, a.status, a.code, a.detail, a.ended_at, a.started_at is not None)
                for a in attempts
            ],
            "feed": [
                (e.kind, e.status, e.code, e.event_id, e.operation_kind, e.repository_name)
                for e in entries
            ],
        }


@pytest.mark.parametrize("status", [S.IN_PROGRESS, S.AWAITING_APPROVAL])
def test_a_started_operation_writes_what_the_held_rows_creation_wrote(
    database: Database, status: S
) -> None:
    plain, held = f"op_plain{next(_ids):06d}", f"op_plain{next(_ids):06d}"
    returned = {}
    for op_id in (plain, held):
        with witness.watch(op_id) as watched, journal.unit_of_work(database) as session:
            _start(session, op_id, status, plain=op_id == plain)
            if op_id == plain:  # what it answers is what it wrote, read back in its transaction
                returned[op_id] = journal.read_required(session, op_id)
        assert watched.ended is None and watched.events == []  # a creation tells no witness
    assert _columns(database, plain) == _columns(database, held)
    state = _columns(database, plain)
    assert (state["status"], state["attempt"], state["fence"], state["owner_pid"]) == (
        status,
        1,
        7,
        4242,
    )
    assert state["attempts"] == [(1, status, None, None, None, True)]
    assert state["feed"] == [("status", status, None, None, "promotion", "demo")]
    with database.session() as session:
        assert returned[plain] == journal.read_required(session, plain)


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "held"])
def test_a_twin_of_a_started_operation_is_refused_alike_and_records_nothing(
    database: Database, plain: bool
) -> None:
    op_id = f"op_plain{next(_ids):06d}"
    with database.session() as session:
        _start(session, op_id, S.IN_PROGRESS, plain=True)
    before = _columns(database, op_id)
    with pytest.raises(PromoterError) as refused, database.session() as session:
        _start(session, op_id, S.AWAITING_APPROVAL, plain=plain)
    assert isinstance(refused.value.__cause__, IntegrityError)
    assert _columns(database, op_id) == before


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "held"])
def test_a_start_the_transition_table_forbids_is_refused_alike(
    database: Database, plain: bool
) -> None:
    op_id = f"op_plain{next(_ids):06d}"
    with pytest.raises(OperationConflict) as refused, database.session() as session:
        _start(session, op_id, S.COMPLETED, plain=plain)
    assert refused.value.context["status"] == S.COMPLETED
    with database.session() as session:
        assert journal.read_operation(session, op_id) is None
