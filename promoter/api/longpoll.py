"""Bounded long-polls that hold no worker thread while they wait.

``long_poll(services, probe, wait)`` runs ``probe`` (a database read) in a worker
thread (a wait is held at most the ``max_wait_seconds`` setting); while it answers
``None`` and the wait has not ended, the coroutine sleeps on
``promoter.store.wakeup.COMMITS`` (a commit of this process wakes it at once) for at
most ``RECHECK_SECONDS``, the bound after which it reads again to see commits of other
daemons sharing the ledger. A stopping daemon ends every wait at the next re-check.
Each read first authenticates the caller's token again (``promoter.api.deps.caller_token``;
the two trusted tokens never change): a wait whose credential was removed, or whose
executor token expired, ends at the next re-check with ``401 unauthenticated``.
One credential holds at most ``max_waits_per_credential`` waits at once (counted by its
token on ``services.waits``), and all credentials together at most half the connection
cap (``wait_cap``); past either a wait is ``429 too_many_requests`` at once: a wait is in
the daemon's turn, and a connection there is one the connection cap never closes
(``promoter.api.connections``), so waits could otherwise hold every connection and keep
the operator out (docs/operator/limits.md).
Fault point: ``long_poll_probe`` (in the worker thread, before each read).
Deliberately not here: what is probed (the routes of ``promoter.api.routes.events`` and
``operations``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from promoter.api.connections import connection_cap
from promoter.api.deps import caller_token
from promoter.api.workers import run_in_threadpool
from promoter.engine.ports import Polling
from promoter.errors import TooManyRequests
from promoter.faults import point
from promoter.store.wakeup import COMMITS

T = TypeVar("T")
MAX_WAIT_SECONDS = 300.0
RECHECK_SECONDS = 1.0


def wait_cap(max_connections: int) -> int:
    """The waits a serving process holds at once, of all credentials: half the
    connections it serves (``connection_cap``), so the other half stays for requests that
    end and for the operator; at least one."""
    return max(1, connection_cap(max_connections) // 2)


def _refuse_past_bounds(services: Polling, held: str) -> None:
    """``TooManyRequests`` when the credential of ``held`` (its token), or the process,
    holds as many waits as it may."""
    settings = services.settings
    retry = settings.admission_retry_after_seconds
    if services.waits[held] >= settings.max_waits_per_credential:
        raise TooManyRequests(
            f"this credential already holds {settings.max_waits_per_credential} waits at "
            f"once; try again after {retry} s",
            retry_after=retry,
        )
    bound = wait_cap(settings.max_connections)
    if sum(services.waits.values()) >= bound:
        raise TooManyRequests(
            f"the daemon already holds {bound} waits at once, at most half its "
            f"{connection_cap(settings.max_connections)} connections; try again after "
            f"{retry} s",
            retry_after=retry,
        )


async def long_poll(services: Polling, probe: Callable[[], T | None], wait: float) -> T | None:
    """``probe()``'s first answer that is not ``None``, or ``None`` once ``wait`` has ended."""
    loop = asyncio.get_running_loop()
    limit = min(MAX_WAIT_SECONDS, services.settings.max_wait_seconds)
    deadline = loop.time() + min(max(wait, 0.0), limit)
    token = caller_token()
    again = token is not None and services.auth.trusted(token) is None
    held = token or ""
    if deadline > loop.time():
        _refuse_past_bounds(services, held)

    def checked() -> T | None:
        point("long_poll_probe")
        if again:
            services.auth.authenticate(token)  # Unauthenticated once removed or expired
        return probe()

    services.waits[held] += 1
    try:
        while True:
            seen = COMMITS.generation
            answer = await run_in_threadpool(checked)
            remaining = deadline - loop.time()
            if answer is not None or remaining <= 0 or services.stopping.is_set():
                return answer
            await COMMITS.wait(seen, min(remaining, RECHECK_SECONDS))
    finally:
        services.waits[held] -= 1
        if not services.waits[held]:
            del services.waits[held]
