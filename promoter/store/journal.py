"""The journal (SPEC §5.3) in the database: operations, attempts, steps, created directories.

Functions take an open ``Session``; the engine decides what goes into one transaction
(every state change is committed before the next side effect). Every status change goes
through the transition table of ``promoter.domain.states`` (the row refuses any other).
Deliberately not here: the hash-chained events (``promoter.store.ledger``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from promoter.domain.states import OperationStatus, StepStatus
from promoter.errors import OperationUnknown
from promoter.store.repo import now
from promoter.store.tables import AttemptRow, CreatedDirRow, OperationRow, StepRow


def get_operation(session: Session, operation_id: str) -> OperationRow | None:
    return session.get(OperationRow, operation_id)


def require(session: Session, operation_id: str) -> OperationRow:
    """The operation row, which the caller knows exists."""
    row = session.get(OperationRow, operation_id)
    if row is None:
        raise OperationUnknown(
            f"operation {operation_id} vanished from the journal", operation_id=operation_id
        )
    return row


def list_operations(
    session: Session, *, status: str | None = None, repository: str | None = None, limit: int = 500
) -> list[OperationRow]:
    query = select(OperationRow).order_by(OperationRow.created_at.desc()).limit(limit)
    if status:
        query = query.where(OperationRow.status == status)
    if repository:
        query = query.where(
            (OperationRow.repository_identity == repository)
            | (OperationRow.repository_name == repository)
        )
    return list(session.scalars(query))


def operations_with_status(session: Session, status: str) -> list[OperationRow]:
    return list(session.scalars(select(OperationRow).where(OperationRow.status == status)))


def set_status(
    session: Session,
    operation: OperationRow,
    status: OperationStatus,
    *,
    code: str | None = None,
    detail: str | None = None,
    report: dict[str, Any] | None = None,
) -> None:
    operation.status = status
    operation.code = code
    operation.detail = detail
    if report is not None:
        operation.report = report
    operation.updated_at = now()
    attempt = session.get(AttemptRow, (operation.operation_id, operation.attempt))
    if attempt is not None:
        attempt.status = status
        attempt.code = code
        attempt.detail = detail
        if status is not OperationStatus.IN_PROGRESS:
            attempt.ended_at = now()


def start_attempt(session: Session, operation: OperationRow) -> None:
    session.add(
        AttemptRow(
            operation_id=operation.operation_id,
            attempt=operation.attempt,
            status=operation.status,
            started_at=now(),
        )
    )


def attempts(session: Session, operation_id: str) -> list[AttemptRow]:
    query = select(AttemptRow).where(AttemptRow.operation_id == operation_id)
    return list(session.scalars(query.order_by(AttemptRow.attempt)))


def add_steps(session: Session, operation_id: str, steps: Sequence[dict[str, Any]]) -> None:
    if not steps:
        return
    session.execute(
        insert(StepRow),
        [
            {
                "operation_id": operation_id,
                "seq": seq,
                "path": step["path"],
                "operation": step["operation"],
                "old_state": step["old"],
                "new_state": step["new"],
                "status": StepStatus.PENDING.value,
                "temp_name": step.get("temp_name"),
            }
            for seq, step in enumerate(steps)
        ],
    )


def steps(session: Session, operation_id: str) -> list[StepRow]:
    query = select(StepRow).where(StepRow.operation_id == operation_id).order_by(StepRow.seq)
    return list(session.scalars(query))


def mark_all_steps(session: Session, operation_id: str, status: StepStatus) -> None:
    """Set every step of an operation to ``status`` in one statement."""
    session.execute(
        update(StepRow).where(StepRow.operation_id == operation_id).values(status=status.value)
    )


def delete_steps(session: Session, operation_id: str) -> None:
    for row in steps(session, operation_id):
        session.delete(row)


def add_created_dirs(session: Session, operation_id: str, paths: Sequence[str]) -> None:
    known = {row.path for row in created_dirs(session, operation_id)}
    start = len(known)
    fresh = [p for p in dict.fromkeys(paths) if p not in known]
    session.add_all(
        CreatedDirRow(operation_id=operation_id, path=path, seq=start + index)
        for index, path in enumerate(fresh)
    )


def delete_created_dirs(session: Session, operation_id: str) -> None:
    """Forget the directory intents of an attempt that was refused (its directories are gone)."""
    session.execute(delete(CreatedDirRow).where(CreatedDirRow.operation_id == operation_id))


def created_dirs(session: Session, operation_id: str) -> list[CreatedDirRow]:
    query = select(CreatedDirRow).where(CreatedDirRow.operation_id == operation_id)
    return list(session.scalars(query.order_by(CreatedDirRow.seq)))
