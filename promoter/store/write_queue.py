"""SQLite's writers one at a time, each woken the moment the one before it is done.

SQLite takes one writer at a time. A writer that finds the write lock taken sleeps in
SQLite's busy handler, 1, 2, 5, 10, 15, 20, 25, ... ms at a time, and can sleep on long
after the lock is free: with two workers, the lock was measured free while a writer
waited for about a fifth of the time (``docs/benchmarks.md``). Each SQLite connection of
promoter's (``connection_class``) therefore takes an exclusive ``flock`` of
``<database>.write-lock`` (a file of promoter's own beside the database, in the state
directory) just before the statement that begins its write transaction (pysqlite begins
one before the first INSERT, UPDATE, DELETE or REPLACE), and drops it once that
transaction commits or rolls back, or the connection closes. The kernel wakes a waiting
writer as soon as the lock is dropped, whichever worker, daemon or thread held it (each
transaction opens the file anew: a ``flock`` is its open file's, not its process's).

SQLite's lock stays the authority: a writer outside this queue (another program, an
older promoter) is waited for with the busy timeout, as before. The queue's wait is
bounded by the connection's busy timeout too (read when the lock is found taken, so a
rehearsal's shorter one applies): past it the statement fails as SQLite's own wait would,
busy (``database_busy``), and nothing was written.

A writer that finds the lock taken watches the state directory (inotify) for the close
of a file opened for writing (a holder unlocks, then closes its descriptor) and tries
again at each, and every ``_RECHECK`` seconds (the kernel reports an ended process's
close just before its lock is dropped), until its time is up. It waits in the kernel, so
the thread woken is the writer's own: in a busy process each thread woken waits its turn
for the interpreter's lock. The watch's descriptor is closed by a thread of its own
(closing one waits for the kernel's grace period, 10-30 ms measured). Without inotify,
the blocking ``flock`` runs in a thread of its own so that the wait can end on time, and
a lock it gets after its writer gave up is dropped at once. A lock file that cannot be
opened (a symlink, not promoter's) is logged once and writers go straight to SQLite's
lock.

Fault point: ``ledger_write_queued`` (the queue's lock just taken, SQLite's not yet).

Deliberately not here: PostgreSQL (its writers wait on row locks the server wakes),
reads and schema changes (outside the queue, SQLite's busy handler as before), and which
writes a transaction makes (``promoter.store``'s modules).
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import select
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from promoter import faults
from promoter.fs import inotify

log = logging.getLogger("promoter.store")

SUFFIX = ".write-lock"
# the thread a writer without inotify waits in; it ends once it has the lock (dropped at
# once when its writer gave up)
WAITER_THREAD = "ledger-write-queue-wait"
_BEGINS = ("INSERT", "UPDATE", "DELETE", "REPLACE")  # what pysqlite begins a transaction for
_SQLITE_BUSY = 5
# the longest a waiter sleeps between tries: a holder whose process ended drops its lock
# just after the kernel reports its close (the unlock before the close is promoter's own)
_RECHECK = 0.1
_warned: set[str] = set()


def _begins_write(statement: str) -> bool:
    return statement.lstrip()[:7].upper().startswith(_BEGINS)


def _busy(message: str) -> sqlite3.OperationalError:
    """The error SQLite's own busy wait ends with (``promoter.store.db.translate`` makes it
    ``database_busy``)."""
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = _SQLITE_BUSY
    error.sqlite_errorname = "SQLITE_BUSY"
    return error


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if path not in _warned:
            _warned.add(path)
            log.warning(
                "the ledger's write queue %s cannot be opened (%s): writers wait "
                "in SQLite's busy handler instead",
                path,
                exc,
            )
        return None


class _Waiter:
    """A blocking ``flock`` of ``descriptor`` in a thread of its own, given up on time."""

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.got = threading.Event()
        self.guard = threading.Lock()
        self.abandoned = False
        self.error: OSError | None = None
        threading.Thread(target=self._wait, name=WAITER_THREAD, daemon=True).start()

    def _wait(self) -> None:
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
        with self.guard:
            if self.abandoned:
                os.close(self.descriptor)  # the writer gave up: drop the lock at once
                return
            self.got.set()

    def result(self, timeout: float) -> bool:
        """Whether the lock was taken within ``timeout`` seconds (else it never will be
        this writer's: a late lock is dropped by the waiting thread)."""
        self.got.wait(timeout)
        with self.guard:
            if self.got.is_set():
                if self.error is not None:
                    raise self.error
                return True
            self.abandoned = True
            return False


_closing: queue.SimpleQueue[inotify.Inotify] = queue.SimpleQueue()
_closer_started = threading.Lock()
_closer: list[threading.Thread] = []


def _close_later(watcher: inotify.Inotify) -> None:
    """Close ``watcher`` in a thread of its own: closing an inotify descriptor waits for
    the kernel's grace period (10-30 ms measured), which the writer need not wait for."""
    with _closer_started:
        if not _closer:
            thread = threading.Thread(
                target=_close_each, name="ledger-write-queue-close", daemon=True
            )
            thread.start()
            _closer.append(thread)
    _closing.put(watcher)


def _close_each() -> None:
    while True:
        _closing.get().close()


def _watched(descriptor: int, path: str, timeout: float) -> bool | None:
    """Wait for the ``flock`` of ``descriptor`` (the file ``path``) by watching its folder
    for a close of a file opened for writing: the lock's holder unlocks and then closes
    its descriptor, so each close is a reason to try again. True once
    taken, False past ``timeout`` seconds, None where inotify cannot be had (the caller
    waits in a thread instead). The watch is in place before the first try, so no
    release between them goes unseen."""
    try:
        watcher = inotify.Inotify()
    except OSError:
        return None
    try:
        try:
            watcher.add_watch(os.fsencode(os.path.dirname(path) or "."), inotify.IN_CLOSE_WRITE)
        except OSError:
            return None
        fd = watcher.fd
        assert fd is not None  # open until the ``finally`` below
        poller = select.poll()  # not select(): a daemon's descriptors may pass 1024
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller.poll(min(left, _RECHECK) * 1000)
            watcher.read_events()  # drained: whichever file it was, try again
    finally:
        _close_later(watcher)


def _take(path: str, timeout: Callable[[], float]) -> int | None:
    """An exclusive ``flock`` of ``path`` within ``timeout()`` seconds (asked only when it
    is taken): its descriptor; None when the file cannot be opened (SQLite's lock alone
    then); ``_busy`` past the time."""
    descriptor = _open(path)
    if descriptor is None:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return descriptor
    except BlockingIOError:
        pass
    except OSError:
        os.close(descriptor)
        raise
    seconds = timeout()
    try:
        watched = _watched(descriptor, path, seconds)
    except BaseException:
        os.close(descriptor)
        raise
    if watched:
        return descriptor
    if watched is False:
        os.close(descriptor)
    else:  # no inotify: a thread waits, and owns the descriptor once it gives up
        try:
            waiter = _Waiter(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        if waiter.result(seconds):
            return descriptor
    raise _busy("database is locked (the ledger's write queue stayed taken)")


class QueuedCursor(sqlite3.Cursor):
    """A cursor that takes its connection's place in the write queue before the
    statement that begins a write transaction."""

    def execute(self, sql: str, parameters: Any = (), /) -> QueuedCursor:
        connection = self.connection
        if isinstance(connection, QueuedConnection):
            connection.before(sql)
        super().execute(sql, parameters)
        return self

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> QueuedCursor:
        connection = self.connection
        if isinstance(connection, QueuedConnection):
            connection.before(sql)
        super().executemany(sql, seq_of_parameters)
        return self


class QueuedConnection(sqlite3.Connection):
    """A pysqlite connection whose write transactions hold the queue's lock; made by
    ``connection_class`` for one database's lock file."""

    lock_path = ""
    _held: int | None = None

    def cursor(self, factory: Any = QueuedCursor) -> Any:
        return super().cursor(factory)

    def before(self, sql: str) -> None:
        """Take the queue's lock if ``sql`` begins a write transaction."""
        if self._held is not None or self.in_transaction or not _begins_write(sql):
            return
        self._held = _take(self.lock_path, self._busy_timeout)
        if self._held is not None:
            faults.point("ledger_write_queued")

    def _busy_timeout(self) -> float:
        """The connection's busy timeout, seconds (``PRAGMA busy_timeout``)."""
        row = sqlite3.Connection.execute(self, "PRAGMA busy_timeout").fetchone()
        return float(row[0]) / 1000 if row else 0.0

    def _drop(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            try:  # dropped before the close: a waiter woken by the close finds it free
                fcntl.flock(held, fcntl.LOCK_UN)
            finally:
                os.close(held)

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            if not self.in_transaction:
                self._drop()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._drop()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._drop()


def connection_class(database: str) -> type[QueuedConnection] | None:
    """The connection class queueing the writers of the SQLite file ``database``; None
    for a database of no file (memory, a URI), which has no state directory to queue in."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return type("QueuedConnection", (QueuedConnection,), {"lock_path": database + SUFFIX})
