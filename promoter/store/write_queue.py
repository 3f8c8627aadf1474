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
busy (``database_busy``), and nothing was written. The blocking ``flock`` runs in a
thread of its own so that the wait can end on time; a lock it gets after its writer gave
up is dropped at once. A lock file that cannot be opened (a symlink, not promoter's) is
logged once and writers go straight to SQLite's lock.

Fault point: ``ledger_write_queued`` (the queue's lock just taken, SQLite's not yet).

Deliberately not here: PostgreSQL (its writers wait on row locks the server wakes),
reads and schema changes (outside the queue, SQLite's busy handler as before), and which
writes a transaction makes (``promoter.store``'s modules).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from promoter import faults

log = logging.getLogger("promoter.store")

SUFFIX = ".write-lock"
_BEGINS = ("INSERT", "UPDATE", "DELETE", "REPLACE")  # what pysqlite begins a transaction for
_SQLITE_BUSY = 5
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
        threading.Thread(target=self._wait, name="ledger-write-queue", daemon=True).start()

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
    try:
        waiter = _Waiter(descriptor)
    except BaseException:
        os.close(descriptor)
        raise
    if waiter.result(timeout()):
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
            os.close(held)  # closing the only descriptor of the open file drops the lock

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
