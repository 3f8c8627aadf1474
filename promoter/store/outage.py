"""Retrying a write while the database cannot be reached: bounded backoff, logged.

``through_outage(write, what, limit)`` calls ``write()`` and, while it fails with
``database_unavailable`` (the server is gone or restarting) or ``database_busy`` (a lock
held by another connection, a locked SQLite file), calls it again after a backoff that
starts at 0.25 s and doubles up to 2 s, for at most ``limit`` seconds in all; each wait
is logged on ``promoter.store`` as a warning naming ``what``. Past the limit the last
error is raised. Any other error is raised at once. ``write`` must be a whole
transaction that can be run again (each call opens its own session and reads what it
decides on afresh).

``wait_for_database(db, what, deadline)`` waits, with the same backoff, until a new
connection answers ``SELECT 1``; past ``deadline`` (a ``time.monotonic()`` value) it
reaches the fault point ``outage_bound_passed`` and returns False. It writes nothing: an
attempt that lost its database before its plan was journaled waits here, then does its
read-back and its plan again.

Fault point ``database_retry``: reached before each wait (a test pauses there to bring
the database back at a known moment).

Deliberately not here: what is written (the caller's), and retrying a request (a
client retries a 503 itself, ``promoter.client.wire``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from promoter import faults
from promoter.errors import DatabaseBusy, DatabaseUnavailable
from promoter.store.db import Database

log = logging.getLogger("promoter.store")

T = TypeVar("T")

FIRST_WAIT = 0.25
LONGEST_WAIT = 2.0


def through_outage(write: Callable[[], T], what: str, limit: float) -> T:
    """``write()``, tried again through an outage of up to ``limit`` seconds."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        code = getattr(error, "code", type(error).__name__)
        log.warning(
            "%s: the database did not answer (%s, try %d); trying again in %.2f s",
            what,
            code,
            state.attempt_number,
            state.next_action.sleep if state.next_action is not None else 0.0,
        )
        faults.point("database_retry")

    retrying = Retrying(
        retry=retry_if_exception_type((DatabaseUnavailable, DatabaseBusy)),
        wait=wait_exponential(multiplier=FIRST_WAIT, min=FIRST_WAIT, max=LONGEST_WAIT),
        stop=stop_after_delay(limit),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(write)


def wait_for_database(db: Database, what: str, deadline: float) -> bool:
    """Whether the database answered again before ``deadline`` (``time.monotonic()``)."""
    delay, tries = FIRST_WAIT, 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("%s: the database did not answer within its bound; giving up", what)
            faults.point("outage_bound_passed")
            return False
        tries += 1
        log.warning(
            "%s: the database did not answer (try %d); trying again in %.2f s",
            what,
            tries,
            min(delay, left),
        )
        faults.point("database_retry")
        time.sleep(min(delay, left))
        delay = min(delay * 2, LONGEST_WAIT)
        if db.ping():
            return True
