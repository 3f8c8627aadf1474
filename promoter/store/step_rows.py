"""The journal's steps and created directories (protocol: promotion#operation-states) in the
database, per operation.

Functions take an open ``Session`` and the operation id; the engine decides what goes into
one transaction. Steps are written and read in bulk, as plain rows (no ORM object is made
per step: a plan of 1150 steps spent most of its time making them); reads return the
typed ``Step`` records of ``promoter.domain.records``. Deliberately not here: the
operation's status and attempts (``promoter.store.journal``), deciding what a step is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Connection, String, Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from promoter.domain.records import Step
from promoter.domain.status import StepStatus
from promoter.store import witness
from promoter.store.db import run
from promoter.store.tables import CreatedDirRow, StepRow

_STEPS = cast(Table, StepRow.__table__)  # the table itself, for Core bulk inserts
_ADD_STEPS = insert(_STEPS)  # built once: every plan inserts its steps


def add_steps(session: Session, operation_id: str, steps: Sequence[dict[str, Any]]) -> None:
    """Insert the steps (all ``pending``) in one Core ``executemany`` on the table: the
    ORM's per-row bulk bookkeeping is skipped (no row object is made for them)."""
    if not steps:
        return
    run(
        session,
        _ADD_STEPS,
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
    witness.steps(session, operation_id, steps)


_STEP_COLUMNS = (  # the table's own columns: the reads run without the ORM's part
    _STEPS.c.seq,
    _STEPS.c.path,
    _STEPS.c.operation,
    _STEPS.c.old_state,
    _STEPS.c.new_state,
    _STEPS.c.status,
    _STEPS.c.temp_name,
    _STEPS.c.detail,
)


# the per-operation statements, built once with the operation id (and status) as
# parameters: a statement built per call cost more processor time than running it. The
# parameter names are not column names (an UPDATE reserves those for its SET clause).
# No step is ever an ORM object in a session, so there is none to synchronize: the
# UPDATE and DELETE are on the table (Core), which the ORM would otherwise copy and key
# anew on every call; the session is flushed first by hand, as before any ORM statement.
_OPERATION = bindparam("steps_operation_id", type_=String())
_STEPS_OF = select(*_STEP_COLUMNS).where(_STEPS.c.operation_id == _OPERATION).order_by(_STEPS.c.seq)
_MARK_ALL = (
    update(_STEPS)
    .where(_STEPS.c.operation_id == _OPERATION)
    .values(status=bindparam("steps_status"))
)
_DELETE_STEPS = delete(_STEPS).where(_STEPS.c.operation_id == _OPERATION)
_DIRS = cast(Table, CreatedDirRow.__table__)
_CREATED_DIRS = select(_DIRS.c.path).where(_DIRS.c.operation_id == _OPERATION).order_by(_DIRS.c.seq)


def steps(session: Session | Connection, operation_id: str) -> list[Step]:
    """The operation's steps in order, read as plain rows: no ORM object is made per step
    (an operation view of 1150 steps spent most of its time making them). The session
    flushes first, as for any query, so a step changed in it is read as changed."""
    return [
        Step(
            seq=seq,
            path=path,
            operation=operation,
            old_state=old_state,
            new_state=new_state,
            status=StepStatus(status),
            temp_name=temp_name,
            detail=detail,
        )
        for seq, path, operation, old_state, new_state, status, temp_name, detail in (
            run(session, _STEPS_OF, {"steps_operation_id": operation_id})
        )
    ]


def has_steps(session: Session, operation_id: str) -> bool:
    query = select(StepRow.seq).where(StepRow.operation_id == operation_id).limit(1)
    return session.scalar(query) is not None


def set_steps(
    session: Session,
    operation_id: str,
    statuses: dict[int, StepStatus],
    details: dict[int, str] | None = None,
) -> None:
    """Set the status (and detail) of the steps named by seq, in one bulk statement."""
    if statuses:
        run(
            session,
            update(StepRow),
            [
                {
                    "operation_id": operation_id,
                    "seq": seq,
                    "status": status.value,
                    **({"detail": details[seq]} if details and seq in details else {}),
                }
                for seq, status in statuses.items()
            ],
        )


def mark_all_steps(session: Session, operation_id: str, status: StepStatus) -> None:
    """Set every step of an operation to ``status`` in one statement."""
    session.flush()
    run(session, _MARK_ALL, {"steps_operation_id": operation_id, "steps_status": status.value})


def delete_steps(session: Session, operation_id: str) -> None:
    """Remove every step of an operation in one statement (a new plan replaces them)."""
    session.flush()
    run(session, _DELETE_STEPS, {"steps_operation_id": operation_id})


def add_created_dirs(session: Session, operation_id: str, paths: Iterable[str]) -> None:
    """Journal the directories in ``paths`` not journaled yet (nothing is read for none)."""
    paths = list(paths)
    if not paths:
        return
    known = set(created_dirs(session, operation_id))
    start = len(known)
    fresh = [p for p in dict.fromkeys(paths) if p not in known]
    session.add_all(
        CreatedDirRow(operation_id=operation_id, path=path, seq=start + index)
        for index, path in enumerate(fresh)
    )


def delete_created_dirs(session: Session, operation_id: str) -> None:
    """Forget the directory intents of an attempt that was refused (its directories are gone)."""
    session.execute(delete(CreatedDirRow).where(CreatedDirRow.operation_id == operation_id))


def created_dirs(session: Session | Connection, operation_id: str) -> list[str]:
    """The directories the operation journaled as to be created, in journal order."""
    return list(session.scalars(_CREATED_DIRS, {"steps_operation_id": operation_id}))
