"""Putting an operation back after its attempt failed unexpectedly.

The journal decides: ``refused`` when no step was journaled (nothing was written), else
``needs_recovery``. Deliberately not here: retrying through an outage (the caller,
``operation.runner``), recovering (``operation.recover``).
"""

from __future__ import annotations

from promoter.domain.status import RUNNING, OperationStatus
from promoter.engine.operation import promote
from promoter.errors import PromoterError
from promoter.store import journal, step_rows
from promoter.store.db import Database


def put_back(db: Database, operation_id: str, error: PromoterError) -> str:
    """The outcome the journal proves after a failed attempt, recorded: ``refused`` when no
    step was journaled (nothing was written), else ``needs_recovery``. Read afresh each
    time: a commit whose answer was lost may have happened. Returns the status. A host
    fenced meanwhile puts nothing back (``host_fenced``, noted for ``/readyz``): the
    operation is the new owner's (protocol: promotion#fence-stops-every-write)."""
    with journal.unit_of_work(db, fenced=True) as session:
        row = journal.get_operation(session, operation_id)
        if row is None or row.status not in RUNNING:
            return "unknown" if row is None else str(row.status)
        if step_rows.steps(session, operation_id):
            journal.set_status(
                session,
                row.operation_id,
                OperationStatus.NEEDS_RECOVERY,
                code=error.code,
                detail=error.detail,
            )
            return OperationStatus.NEEDS_RECOVERY
    promote.refuse(db, operation_id, error)
    return OperationStatus.REFUSED
