"""The worker pool that runs promotion attempts off the request thread.

``Runner`` submits an attempt (``operation.promote.run``) with the request's context and
remembers its future; ``wait_for`` blocks on it. An attempt that fails unexpectedly is put
back (``operation.put_back``) through a database outage, and recovered at once when the
database went away and ``auto_recover`` is set. Deliberately not here: deciding whether an
attempt runs (``operation.requests``, ``operation.decisions``).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from promoter.domain.records import Ticket
from promoter.domain.status import OperationStatus
from promoter.engine.operation import promote
from promoter.engine.operation.put_back import put_back
from promoter.engine.operation.recover import auto_recover
from promoter.engine.ports import Attempting, Promoting
from promoter.engine.services import AttemptRunner
from promoter.errors import DatabaseBusy, DatabaseUnavailable, HostFenced, stopped_by
from promoter.store.outage import through_outage

log = logging.getLogger("promoter.operations")


class Runner:
    """Runs attempts off the request thread and remembers their futures."""

    def __init__(self, services: Attempting, workers: int = 4) -> None:
        self._services = services
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="promoter-op")
        self._futures: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def submit(self, ticket: Ticket) -> Future[None]:
        with self._lock:
            run = contextvars.copy_context().run  # the request's context (its id) goes along
            self._services.live.enter(ticket.operation_id)  # left when the attempt ends
            try:
                future = self._pool.submit(run, _guarded_run, self._services, ticket)
            except BaseException:
                self._services.live.leave(ticket.operation_id)
                raise
            self._futures[ticket.operation_id] = future
            return future

    def future(self, operation_id: str) -> Future[None] | None:
        with self._lock:
            return self._futures.get(operation_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _guarded_run(services: Attempting, ticket: Ticket) -> None:
    """Run an attempt; an unexpected fault leaves the operation for recovery, never stuck.

    The operation is put back (``operation.put_back``) through a database outage
    (``promoter.store.outage``); once it is ``needs_recovery`` because the database went
    away, a daemon with ``auto_recover`` recovers it at once."""
    operation_id = ticket.operation_id
    try:
        try:
            promote.run(services, ticket)
        except HostFenced as exc:  # logged by the check; the operation is the new owner's
            log.error(
                "the attempt of %s stopped: this host is fenced; in the worktree: %s",
                operation_id,
                exc.context.get("worktree", "nothing written"),
            )
            raise
        except Exception as exc:
            outage = isinstance(exc, DatabaseUnavailable | DatabaseBusy)
            if outage:
                log.warning("attempt of %s lost its database: %s", operation_id, exc)
            else:
                log.exception("attempt of %s failed unexpectedly", operation_id)
            error = stopped_by(exc, "the attempt")
            status = through_outage(
                lambda: put_back(services.db, operation_id, error),
                f"putting back operation {operation_id}",
                services.settings.outage_retry_seconds,
            )
            log.warning("operation %s put back: %s", operation_id, status)
            if (
                outage
                and status == OperationStatus.NEEDS_RECOVERY
                and services.settings.auto_recover
            ):
                auto_recover(services, [operation_id])
    finally:
        services.live.leave(operation_id)


def runner(services: Promoting) -> AttemptRunner:
    """The daemon's attempt runner, made on first use."""
    return services.once("runner", lambda: Runner(services))


def wait_for(services: Promoting, operation_id: str, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the running attempt; return early if none runs here.

    An attempt that had already failed before this request (its failure could not even be
    recorded: the database was unreachable) is not waited for and its error is never
    answered again: the request answers the operation's recorded status instead."""
    future = runner(services).future(operation_id)
    if future is None or (future.done() and (future.cancelled() or future.exception())):
        return
    with contextlib.suppress(FutureTimeout):
        future.result(timeout=timeout)
