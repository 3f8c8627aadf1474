"""The daemon's watchdog: no operation of this process stays ``in_progress`` with no attempt.

Every ``watchdog_seconds`` (a thread the app starts, ``Watchdog``) ``sweep`` reads the
operations whose recorded owner is exactly this process and that are ``in_progress`` or
``applied_unverified``, and marks each one that no thread of this process runs now
(``promoter.engine.liveness``) ``needs_recovery`` with code ``attempt_lost``: its
attempt ended without putting it back (its last writes failed while the database was
unreachable, and the bounded retries of ``promoter.store.outage`` ran out). Each is
written in its own transaction, checked against the status it was read in (the row's
status is its version): one that moved meanwhile is left as it is. A sweep also marks
this host's orphans (``promoter.engine.operation.recover.scan_orphans``), which the
start-up scan may have missed while the database was down. With ``auto_recover`` the
marked operations are then recovered by the usual table (``auto_recover``); otherwise
they wait for ``promoter ops recover``.

Why reading the live set after the row is enough: every entry point enters
``running(operation_id)`` before the transaction that can make the row ``in_progress``,
and an ``in_progress`` row is never claimed again (only ``needs_recovery`` is), so an
operation read ``in_progress`` and then found not live cannot have an attempt starting.

A sweep that cannot reach the database is logged and tried again at the next one.

Deliberately not here: what recovery does (``promoter.engine.operation.recover``), the
owner lease (``promoter.engine.ownership``).
"""

from __future__ import annotations

import logging
import threading

from promoter.domain.status import RUNNING, OperationStatus
from promoter.engine.operation.recover import auto_recover, scan_orphans
from promoter.engine.ports import Attempting, Journaling
from promoter.errors import OperationConflict, PromoterError
from promoter.store import journal

log = logging.getLogger("promoter.watchdog")

CODE = "attempt_lost"


def _mark(services: Journaling, operation_id: str) -> bool:
    """``operation_id`` to ``needs_recovery`` if it is still running and still not live."""
    try:
        with journal.unit_of_work(services.db) as session:
            row = journal.get_operation(session, operation_id)
            if row is None or row.status not in RUNNING or services.live.has(operation_id):
                return False
            journal.set_status(
                session,
                operation_id,
                OperationStatus.NEEDS_RECOVERY,
                code=CODE,
                detail=(
                    f"its attempt in this daemon (pid {row.owner_pid}) ended without "
                    f"putting it back: it was {row.status} with no attempt running"
                ),
            )
    except OperationConflict:  # it moved between the read and the write: not ours to mark
        return False
    return True


def sweep(services: Attempting) -> list[str]:
    """Mark this process's running operations that no thread runs, and this host's
    orphans, ``needs_recovery``; recover them with ``auto_recover``. Returns the marked."""
    with journal.unit_of_work(services.db) as session:
        rows = journal.owned_by(session, services.stamp(), RUNNING)
    lost = [
        row.operation_id
        for row in rows
        if not services.live.has(row.operation_id) and _mark(services, row.operation_id)
    ]
    for operation_id in lost:
        log.warning(
            "operation %s had no live attempt in this daemon: marked needs_recovery",
            operation_id,
        )
    marked = lost + scan_orphans(services)
    if marked and services.settings.auto_recover:
        auto_recover(services, marked)
    return marked


class Watchdog:
    """``sweep`` every ``services.settings.watchdog_seconds`` in a thread of its own."""

    def __init__(self, services: Attempting) -> None:
        self._services = services
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="promoter-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._services.settings.watchdog_seconds):
            try:
                sweep(self._services)
            except PromoterError as exc:  # the database may be down: the next sweep tries
                log.warning("watchdog sweep failed: [%s] %s", exc.code, exc.detail)
            except Exception:
                log.exception("watchdog sweep stopped by an unexpected error")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
