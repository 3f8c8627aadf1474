"""The journal refuses every status change the transition table does not hold.

Walks ``promoter.domain.status.TRANSITIONS`` through real rows in a real SQLite database
(migrated by Alembic): every listed move is accepted, every other pair of statuses for
the kind is refused with ``operation_conflict``, also when the status is assigned directly
on the row instead of through ``journal.set_status``.
"""

from __future__ import annotations

import itertools

import pytest

from promoter.domain.status import (
    STATUSES,
    TRANSITIONS,
    OperationKind,
    OperationStatus,
    check_transition,
)
from promoter.errors import OperationConflict
from promoter.store import journal
from promoter.store.db import Database
from promoter.store.tables import OperationRow, StepRow
from tests.support.rows import journal_database, operation_row

_ids = itertools.count()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Database:
    return journal_database(f"sqlite:///{tmp_path_factory.mktemp('transitions') / 'journal.db'}")


def _row_at(database: Database, kind: OperationKind, path: list[OperationStatus]) -> str:
    """A fresh operation of ``kind`` moved along ``path`` (each move allowed)."""
    operation_id = f"op_{next(_ids):06d}"
    with database.session() as session:
        session.add(operation_row(operation_id, kind.value))
    with database.session() as session:
        for status in path:
            journal.set_status(session, operation_id, status)
    return operation_id


def _reachable(kind: OperationKind) -> dict[OperationStatus, list[OperationStatus]]:
    """A shortest path from ``in_progress`` to every status the kind can reach."""
    table = TRANSITIONS[kind]
    paths: dict[OperationStatus, list[OperationStatus]] = {OperationStatus.IN_PROGRESS: []}
    frontier = [OperationStatus.IN_PROGRESS]
    while frontier:
        nxt = []
        for status in frontier:
            for target in sorted(table.get(status, frozenset())):
                if target not in paths:
                    paths[target] = [*paths[status], target]
                    nxt.append(target)
        frontier = nxt
    return paths


@pytest.mark.parametrize("kind", list(OperationKind))
def test_journal_accepts_exactly_the_table(database: Database, kind: OperationKind) -> None:
    reachable = _reachable(kind)
    accepted, refused = [], []
    for start, target in itertools.product(sorted(reachable), STATUSES):
        operation_id = _row_at(database, kind, reachable[start])
        try:
            with database.session() as session:
                journal.set_status(session, operation_id, target)
            accepted.append((start, target))
        except OperationConflict as exc:
            assert exc.code == "operation_conflict"
            refused.append((start, target))
    expected = {
        (start, target)
        for start in reachable
        for target in STATUSES
        if target == start or target in TRANSITIONS[kind].get(start, frozenset())
    }
    assert set(accepted) == expected
    assert set(refused) == {(s, t) for s in reachable for t in STATUSES} - expected


def test_every_status_is_reachable_and_only_final_ones_are_dead_ends() -> None:
    for kind in OperationKind:
        reachable = _reachable(kind)
        for status in reachable:
            if status not in TRANSITIONS[kind]:
                assert status.value in {
                    "completed",
                    "rolled_back",
                    "rollback_partial",
                    "rollback_failed",
                    "abandoned",
                    "refused",
                }
    assert set(_reachable(OperationKind.PROMOTION)) == set(STATUSES)


def test_a_final_rollback_never_moves_again_even_by_direct_assignment(database: Database) -> None:
    operation_id = _row_at(database, OperationKind.ROLLBACK, [OperationStatus.ROLLED_BACK])
    with pytest.raises(OperationConflict), database.session() as session:
        row = session.get(OperationRow, operation_id)
        assert row is not None
        row.status = "in_progress"
    with database.session() as session:
        assert journal.require(session, operation_id).status == "rolled_back"


def test_unknown_statuses_and_kinds_are_refused() -> None:
    with pytest.raises(OperationConflict):
        check_transition("promotion", "in_progress", "done")
    with pytest.raises(OperationConflict):
        check_transition("merge", "in_progress", "completed")
    with pytest.raises(ValueError):
        StepRow(operation_id="op_x", seq=0, path="a", operation="create", status="done")
