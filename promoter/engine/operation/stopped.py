"""A claimed operation that an error stops is put back, never left ``in_progress``.

A recovery, a reconciliation's ``continue``, a rollback and a restore run in the
request's thread; each first claims its operation (``in_progress`` under this process).
``put_back`` is what each does when any exception stops it after that: the operation
returns to the status the caller names (``needs_recovery``, or ``needs_reconciliation``
for a ``continue``) with the error's code and detail, unless it has already moved on; an
exception that is neither promoter's own nor an ``OSError`` is logged with its
traceback. While the database cannot be reached the write is tried again with a bounded
backoff (``promoter.store.outage``: the request waits); past the bound the error is
raised and the daemon's watchdog puts the operation back once the database answers
(``promoter.engine.operation.watchdog``). An attempt's runner does the same for attempts
(``promoter.engine.operation.runner``).

Deliberately not here: which status an operation goes back to (the caller's), how a
foreign exception is translated (``promoter.errors.stopped_by``), and ``BaseException``s
that are not ``Exception``s (a stopping interpreter: start-up recovery's case).
"""

from __future__ import annotations

import logging

from promoter.domain.status import OperationStatus
from promoter.engine.ports import Pacing
from promoter.errors import HostFenced, PromoterError, stopped_by
from promoter.store import journal
from promoter.store.outage import through_outage

log = logging.getLogger("promoter.stopped")


def put_back(
    services: Pacing, operation_id: str, status: OperationStatus, exc: Exception, what: str
) -> None:
    """Put ``operation_id`` back to ``status`` after ``exc`` stopped its ``what`` (a word:
    ``recovery``, ``rollback``…); then raise the translation of ``exc`` from it, unless
    ``exc`` is a ``PromoterError``, which the caller's bare ``raise`` re-raises as it is."""
    if isinstance(exc, HostFenced):  # the operation is the new owner's: nothing is written
        return
    if not isinstance(exc, PromoterError | OSError):
        log.exception("%s %s stopped unexpectedly", what, operation_id)
    error = stopped_by(exc, f"the {what}")

    def write() -> None:
        with journal.unit_of_work(services.db) as session:
            row = journal.get_operation(session, operation_id)
            if row is not None and row.status == OperationStatus.IN_PROGRESS:
                journal.set_status(
                    session, row.operation_id, status, code=error.code, detail=error.detail
                )

    through_outage(
        write, f"putting back {what} {operation_id}", services.settings.outage_retry_seconds
    )
    if error is not exc:
        raise error from exc
