"""Wake-ups for long-polling readers: ``COMMITS`` is notified after each commit that wrote.

A ``Notifier`` keeps a generation counter and the waiting coroutines of any event loop;
``notify()`` may be called from any thread (the commit hooks of ``promoter.store.feed``
run in worker threads) and wakes every waiter. A reader takes ``generation`` before it
reads the database and passes it to ``wait``, so a commit between its read and its wait
is never missed. Deliberately not here: what a reader waits for, or commits of other
processes (readers re-check the database on a bounded interval for those).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def notify(self) -> None:
        with self._lock:
            self._generation += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)

    async def wait(self, seen: int, timeout: float) -> None:
        """Return after a notification later than generation ``seen``, or after ``timeout``."""
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            if self._generation != seen:
                return
            self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        finally:
            with self._lock:
                self._waiters.discard(waiter)


COMMITS = Notifier()
