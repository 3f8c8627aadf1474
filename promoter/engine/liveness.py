"""Which operations a thread of this process is running now (its live attempts).

An entry point that can move an operation to ``in_progress`` under this process (a
promotion's request and its attempt, an approval, a recovery, a reconciliation, a
rollback, a restore) enters ``running(operation_id)`` *before* the transaction that
claims the row and leaves it when its thread is done with the operation, whatever the
outcome. An operation of this process that is ``in_progress`` while no thread runs it
here is therefore one whose attempt died without putting it back (its last write failed:
the database was unreachable). The owner lease's heartbeat renews only live operations
(``promoter.engine.ownership.Heartbeat``) and the watchdog
(``promoter.engine.operation.watchdog``) marks the others ``needs_recovery``.

One registry serves the whole process (``PROCESS``, every ``Services``' default): an
operation's recorded owner is a process, so two daemons' services in one process (tests)
must see each other's attempts as live.

Deliberately not here: the database (this is memory of one process only), and what is
done about an operation that is not live (the watchdog's).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class LiveAttempts:
    """A count per operation id of the threads of this process running it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: Counter[str] = Counter()

    def enter(self, operation_id: str) -> None:
        with self._lock:
            self._count[operation_id] += 1

    def leave(self, operation_id: str) -> None:
        with self._lock:
            self._count[operation_id] -= 1
            if self._count[operation_id] <= 0:
                del self._count[operation_id]

    @contextmanager
    def running(self, operation_id: str) -> Iterator[None]:
        """``operation_id`` is live while the block runs."""
        self.enter(operation_id)
        try:
            yield
        finally:
            self.leave(operation_id)

    @contextmanager
    def handed_on(self) -> Iterator[Callable[[str], None]]:
        """A block that makes operations live (``adopt(operation_id)``, before the
        transaction that creates them commits) for a caller to start: when the block ends
        normally they stay live and whoever submits their attempt leaves them; when it
        raises (the commit included) they are left at once."""
        adopted: list[str] = []

        def adopt(operation_id: str) -> None:
            self.enter(operation_id)
            adopted.append(operation_id)

        try:
            yield adopt
        except BaseException:
            for operation_id in adopted:
                self.leave(operation_id)
            raise

    def has(self, operation_id: str) -> bool:
        with self._lock:
            return operation_id in self._count

    def now(self) -> frozenset[str]:
        """The operations live at this moment."""
        with self._lock:
            return frozenset(self._count)


PROCESS = LiveAttempts()  # this process's: see the module docstring
