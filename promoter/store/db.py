"""Database engine, connection pragmas, sessions and migrations.

SQLite gets WAL, ``synchronous=FULL`` (``NORMAL`` for a session opened
``durable=False``), foreign keys, a busy timeout and, for a database file, the write
queue's connections (``promoter.store.write_queue``); PostgreSQL gets ``ServerOptions``
(timeouts, ``application_name``, pool size, ``pool_pre_ping``). Database errors become
``DatabaseBusy``, ``DatabaseUnavailable`` or ``StorageError``
(protocol: storage#database-errors). ``upgrade`` runs the Alembic migrations of
``promoter_migrations`` under a migration lock (protocol: hosts#migrations-under-lock):
PostgreSQL's advisory lock ``MIGRATION_LOCK_KEY``, or a ``flock`` of
``<database>.migrate-lock`` for SQLite; ``check_schema`` refuses a schema that is not the
code's. Fault point: ``migration_locked``.

Not here: queries.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, CursorResult, Engine, Executable, Row, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    DisconnectionError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from promoter import faults
from promoter.errors import (
    ConfigError,
    DatabaseBusy,
    DatabaseUnavailable,
    LedgerMissing,
    OperationConflict,
    PromoterError,
    SchemaMismatch,
    StorageError,
    ValidationFailed,
)
from promoter.fs import flush
from promoter.store import write_queue
from promoter.store.password_hiding import hidden

log = logging.getLogger("promoter.store")

_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_PG_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout passed, or NOWAIT found the row locked
# SQLSTATEs of a server that is gone or not there yet: class 08 (connection exception),
# admin_shutdown, crash_shutdown, cannot_connect_now (starting up or shutting down)
_PG_GONE = ("08", "57P01", "57P02", "57P03")
# pg_advisory_lock key of the migration lock: "promoter" in ASCII, as a signed 64-bit int
MIGRATION_LOCK_KEY = int.from_bytes(b"promoter", "big", signed=True)
# An unreachable database's detail, to any caller (the API's problem, the console's page)
UNANSWERED = "the database does not answer; try again in a few seconds"
REASON_EVERY = 10.0  # seconds: one reason's log line at most this often
# Any other database failure's detail, to any caller: the driver's message holds the
# statement's SQL, its bound parameters and a link, and goes to the log
STATEMENT_FAILED = (
    "the database refused or could not carry out a statement of this request; "
    "its message is in the daemon's log"
)


def _sqlite_pragmas(busy_timeout: float) -> Any:
    def apply(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()
        record.info["synchronous"] = "FULL"

    return apply


@dataclass(frozen=True)
class ServerOptions:
    """How a database server (PostgreSQL) is connected to: timeouts in seconds (0: none),
    the name the server shows for this host's connections, and the pool's size."""

    connect_timeout: float = 10.0
    lock_timeout: float = 5.0
    statement_timeout: float = 60.0
    idle_transaction_timeout: float = 60.0
    application_name: str = "promoter"
    pool_size: int = 5
    max_overflow: int = 10

    def connect_args(self) -> dict[str, Any]:
        """psycopg's connection arguments: the connect timeout, the name, the session's
        ``lock_timeout``, ``statement_timeout`` and ``idle_in_transaction_session_timeout``
        (milliseconds), and TCP's own bounds on a partition (``TCP_BOUNDS``)."""
        lock_ms, statement_ms = _ms(self.lock_timeout), _ms(self.statement_timeout)
        idle_ms = _ms(self.idle_transaction_timeout)
        return {
            "connect_timeout": max(1, math.ceil(self.connect_timeout))
            if self.connect_timeout
            else 0,
            "application_name": self.application_name[:63],  # the server's NAMEDATALEN
            "options": f"-c lock_timeout={lock_ms} -c statement_timeout={statement_ms} "
            f"-c idle_in_transaction_session_timeout={idle_ms}",
            **TCP_BOUNDS,
        }


# a connection cut off from its server without a reset is given up in tens of seconds, not
# after TCP's retransmissions (about 15 minutes): data unacknowledged for 30 s, or 3
# keepalive probes 5 s apart unanswered after 10 s of silence, closes it, and the query
# waiting on it fails as the database being unavailable
TCP_BOUNDS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def usable_url(url: str) -> URL:
    """``url`` parsed, with a dialect and a driver this installation loads; else
    ``config_error`` (78), never a traceback. An unparsable URL is not repeated (it may
    hold a password)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(
            "the database URL (--database-url, database_url or PROMOTER_DATABASE_URL) is "
            "not a SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db"
        ) from exc
    try:
        parsed.get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as exc:
        shown = parsed.render_as_string(hide_password=True)
        raise ConfigError(
            f"the database URL {shown} names a database this installation cannot open "
            f"({exc}); PostgreSQL needs the postgres extra"
        ) from exc
    return parsed


def make_engine(
    url: str, busy_timeout: float = 30.0, server: ServerOptions | None = None
) -> Engine:
    """An engine for ``url``: SQLite with its pragmas and ``busy_timeout``; PostgreSQL
    with ``server``'s timeouts, name and pool size (other URLs: only the pool). A URL
    that cannot be opened here is ``config_error`` (``usable_url``)."""
    usable_url(url)
    if url.startswith("sqlite"):
        connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": busy_timeout}
        queued = write_queue.connection_class(make_url(url).database or "")
        if queued is not None:  # writers queue for the write lock, woken at once
            connect_args["factory"] = queued
        engine = create_engine(url, connect_args=connect_args)
        event.listen(engine, "connect", _sqlite_pragmas(busy_timeout))
        return engine
    server = server or ServerOptions()
    connect_args = server.connect_args() if url.startswith("postgresql") else {}
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=server.pool_size,
        max_overflow=server.max_overflow,
        connect_args=connect_args,
    )


def unreachable(exc: SQLAlchemyError) -> bool:
    """Whether ``exc`` says the database server cannot be reached or dropped the
    connection: a disconnect SQLAlchemy noticed (``connection_invalidated``, the pool's
    ``DisconnectionError``), or a psycopg ``OperationalError`` without a SQLSTATE (refused,
    no route, closed) or with one of a server gone or starting (``_PG_GONE``)."""
    if isinstance(exc, DisconnectionError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None)
    if not isinstance(exc, OperationalError) or not hasattr(orig, "sqlstate"):
        return False  # sqlite3's errors carry no SQLSTATE: SQLite has no server
    sqlstate = getattr(orig, "sqlstate", None)
    return sqlstate is None or str(sqlstate).startswith(_PG_GONE)


def translate(
    exc: SQLAlchemyError,
    *,
    url: str | None = None,
    outages: OutageLog | None = None,
    failures: StatementLog | None = None,
) -> PromoterError:
    """The promoter error for a database failure: busy (503), unreachable (503), storage
    (507), bad text, or an operation whose status moved under the request
    (``operation_conflict``, 409).

    An unreachable database's answer says only that it does not answer (``UNANSWERED``):
    the driver's message names the server's address and is noted in ``outages`` instead
    (the database's ``OutageLog``; a new one, which logs it at once, when none), with the
    password of ``url`` (the database's URL) hidden. Any other failure's answer says only
    that a statement failed (``STATEMENT_FAILED``): the driver's whole message (its SQL,
    bound parameters and link) is noted in ``failures`` (the database's ``StatementLog``; a
    new one, which logs it at once, when none), the password hidden.

    PostgreSQL cannot hold a NUL character in text: a request whose id or field has one
    is refused (``validation_failed``, 422) where SQLite would have stored or looked it up.
    """
    if isinstance(exc, DataError) and "NUL" in str(exc.orig):
        return ValidationFailed("a text value holds a NUL character, which cannot be stored")
    if isinstance(exc, StaleDataError):  # the row's status moved since it was read
        return OperationConflict(
            "the operation was changed by another request or host while this one was "
            "deciding; nothing of this request was recorded; look at it again"
        )
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(exc, OperationalError) and isinstance(code, int) and code & 0xFF in _SQLITE_BUSY:
        return DatabaseBusy("the database stayed locked by another writer; try again")
    if isinstance(exc, OperationalError) and getattr(orig, "sqlstate", None) == (
        _PG_LOCK_NOT_AVAILABLE
    ):
        return DatabaseBusy(
            "a row or table stayed locked by another transaction past database_lock_timeout; "
            "try again"
        )
    if unreachable(exc):  # the driver's words name the server: the log's, not the caller's
        (outages or OutageLog()).note(_reason(exc, url))
        return DatabaseUnavailable(UNANSWERED)
    (failures or StatementLog()).note(exc, url)
    return StorageError(STATEMENT_FAILED)


class Throttle:
    """Which lines of a log to write: a reason's first line at once, the same reason again
    at most once every ``REASON_EVERY`` seconds, with how many of it were held back since
    its last line (a burst of one failure is one line, a long one a line a while). Each
    reason is timed on its own, so two that alternate do not let each other through; the
    reasons are a bounded set (a driver's first line, an error's class and code)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._said: dict[str, tuple[float, int]] = {}  # reason: its last line's time, held back

    def admit(self, reason: str) -> int | None:
        """``None``: this line of ``reason`` is held back (counted); else it is written,
        and how many of ``reason`` were held back since its last line."""
        now = self._clock()
        with self._lock:
            said_at, held = self._said.get(reason, (None, 0))
            if said_at is not None and now - said_at < REASON_EVERY:
                self._said[reason] = (said_at, held + 1)
                return None
            self._said[reason] = (now, 0)
            return held


class OutageLog:
    """The driver's reason the database does not answer, logged on ``promoter.store`` at
    warning, each reason at most once every ``REASON_EVERY`` seconds (``Throttle``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = Throttle(clock)

    def note(self, reason: str) -> None:
        left_out = self._throttle.admit(reason)
        if left_out is None:
            return
        more = f" ({left_out} more since the last line)" if left_out else ""
        log.warning("the database cannot be reached: %s%s", reason, more)


class StatementLog:
    """A statement the database refused or could not carry out, logged on
    ``promoter.store`` at error with the driver's whole message: each kind of failure (the
    driver's error class and its SQLSTATE or SQLite error name) at most once every
    ``REASON_EVERY`` seconds (``Throttle``), so a caller who can make one statement fail
    again and again writes a line a while, not a line a request."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = Throttle(clock)

    def note(self, exc: SQLAlchemyError, url: str | None) -> None:
        kind = _kind(exc)
        left_out = self._throttle.admit(kind)
        if left_out is None:
            return
        more = f" ({left_out} more of {kind} since the last line)" if left_out else ""
        log.error("a database statement failed%s: %s", more, hidden(str(exc), url))


def _kind(exc: SQLAlchemyError) -> str:
    """The driver's error class and code of ``exc`` (``psycopg.errors.UndefinedTable
    42P01``, ``sqlite3.OperationalError SQLITE_ERROR``): never a word of its message."""
    orig = getattr(exc, "orig", None)
    cause = orig if isinstance(orig, BaseException) else exc
    code = getattr(cause, "sqlstate", None) or getattr(cause, "sqlite_errorname", None)
    name = f"{type(cause).__module__}.{type(cause).__qualname__}"
    return f"{name} {code}" if isinstance(code, str) and code else name


def _reason(exc: SQLAlchemyError, url: str | None) -> str:
    """The first line of the driver's message, with ``url`` and its password hidden, and
    any ``password=`` of a connection string."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return hidden((text.splitlines() or [exc.__class__.__name__])[0][:200], url)


def failed(what: str, exc: SQLAlchemyError, url: str) -> StorageError:
    """``what`` failed, said with the driver's message, ``url``'s password hidden (a
    migration's or a schema check's failure, told to the operator who ran it)."""
    return StorageError(f"{what}: {hidden(str(exc), url)}")


def alembic_config(url: str) -> Config:
    config = Config()
    location = resources.files("promoter_migrations")
    config.set_main_option("script_location", str(location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision(url: str) -> str | None:
    """The newest schema revision the code ships."""
    return _shipped()[0]


@functools.cache
def _shipped() -> tuple[str | None, frozenset[str]]:
    """The head and every revision of the migrations this code ships, read once a process:
    they are files of the installed package and do not change while it runs."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return script.get_current_head(), frozenset(r.revision for r in script.walk_revisions())


def _check_schema(url: str, connection: Connection, *, migrating: bool) -> bool:
    """Refuse a database whose revision is not the code's head (``SchemaMismatch``);
    when ``migrating``, an older revision is fine (the upgrade brings it to head).
    True when the database is at the head already (nothing to migrate)."""
    current = MigrationContext.configure(connection).get_current_revision()
    head, known_revisions = _shipped()
    if current == head:
        return True
    known = current is None or current in known_revisions
    if known and migrating:
        return False
    if known:
        raise SchemaMismatch(
            f"the database schema is at revision {current or 'none (empty)'}, older than "
            f"this code's {head}; run `promoter db upgrade` first"
        )
    raise SchemaMismatch(
        f"the database schema is at revision {current}, newer than this code's {head} "
        "(a newer promoter migrated it); run the promoter version that migrated it, "
        "or upgrade this one"
    )


@contextmanager
def _file_lock(url: str) -> Iterator[None]:
    """An exclusive ``flock`` beside a SQLite database file (none for a memory one)."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    descriptor = os.open(f"{database}.migrate-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # waits for the host migrating now
        yield
    finally:
        os.close(descriptor)  # releases the lock


@contextmanager
def migration_lock(url: str, connection: Connection) -> Iterator[None]:
    """Hold the migration lock of the database at ``url`` (waits while another host
    holds it); ``connection`` is the one the migration runs on."""
    if connection.dialect.name == "postgresql":
        # no lock, statement or idle timeout here: a migration waits and runs as long as
        # it takes; the advisory lock lives with the session, across transactions
        connection.exec_driver_sql("SET lock_timeout = 0")
        connection.exec_driver_sql("SET statement_timeout = 0")
        connection.exec_driver_sql("SET idle_in_transaction_session_timeout = 0")
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})")
        connection.commit()
        try:
            yield
        finally:
            connection.rollback()
            connection.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})")
            connection.commit()
    elif connection.dialect.name == "sqlite":
        with _file_lock(url):
            yield
    else:
        yield


def upgrade(url: str, server: ServerOptions | None = None) -> None:
    """Bring the database at ``url`` to the newest schema, under the migration lock;
    ``SchemaMismatch`` if it is newer than the code. The migration's own connection has
    no lock, statement or idle timeout (``server``'s connect timeout and name apply)."""
    engine = make_engine(url, server=server)
    try:
        with engine.connect() as connection, migration_lock(url, connection):
            faults.point("migration_locked")
            at_head = _check_schema(url, connection, migrating=True)
            connection.commit()
            if at_head:
                return  # Alembic's environment would find nothing to run
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
    except SQLAlchemyError as exc:
        if unreachable(exc):
            raise translate(exc, url=url) from exc
        raise failed("database migration failed", exc, url) from exc
    finally:
        engine.dispose()


def check_schema(url: str) -> None:
    """``SchemaMismatch`` unless the database at ``url`` is at the code's newest schema
    (older: not migrated yet; newer: the code is older than the schema)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _check_schema(url, connection, migrating=False)
    except SQLAlchemyError as exc:
        if unreachable(exc):
            raise translate(exc, url=url) from exc
        raise failed("database schema check failed", exc, url) from exc
    finally:
        engine.dispose()


def require_ledger(url: str) -> None:
    """For a command that needs an existing, migrated ledger: raise unless the database at
    ``url`` exists and is at the code's newest schema, creating nothing.

    A SQLite URL whose file does not exist is ``ledger_missing`` (connecting would create
    an empty file); a database at another revision is ``schema_mismatch``; a server that
    does not answer is ``database_unavailable``.
    """
    parsed = usable_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database
        if not path or path == ":memory:" or path.startswith("file:"):
            raise LedgerMissing(f"{url} is not a ledger a command can open")
        if not os.path.isfile(path):
            raise LedgerMissing(
                f"no ledger at {path}: point --state-dir at the daemon's state directory, "
                "or set PROMOTER_DATABASE_URL to its database (`promoter db upgrade` makes "
                "a new one)",
                path=path,
            )
        if os.path.getsize(path) == 0:  # opening it would write a header, pragmas, a WAL
            raise SchemaMismatch(
                f"the ledger at {path} is empty (not migrated); run `promoter db upgrade` first"
            )
    check_schema(url)


WROTE = "promoter.feed.wrote"  # in a session's info: it wrote (``promoter.store.feed``)


def run(session: Session | Connection, statement: Executable, params: Any = None) -> Any:
    """``session.execute(statement, params)``, for a hot Core statement on a table's own
    columns: the same SQL in the same transaction, on the session's connection, without
    the ORM's execution of it. As ``Session.execute`` does for any statement, pending ORM
    changes are flushed first; a write (INSERT, UPDATE, DELETE) is noted as the session's
    ``do_orm_execute`` listener notes one (``promoter.store.feed``). A statement on a
    mapped class, or a plain connection, is executed as given."""
    if not isinstance(session, Session) or (
        statement._propagate_attrs.get("compile_state_plugin") == "orm"
    ):
        return session.execute(statement, params)
    if session.autoflush and (session.new or session.dirty or session.deleted):
        session.flush()
    if getattr(statement, "is_dml", False):
        session.info[WROTE] = True
    connection: Connection = session.connection()
    result: CursorResult[Any] = connection.execute(statement, params)
    return result


def _writes(session: Session) -> bool:
    """Whether the session's transaction has written (or is about to write) anything."""
    if session.new or session.dirty or session.deleted:
        return True
    if not session.in_transaction():
        return False
    raw = session.connection().connection.dbapi_connection
    return bool(getattr(raw, "in_transaction", False))


def _synchronous(session: Session, mode: str) -> None:
    """Put the session's SQLite connection in ``synchronous=<mode>`` (a no-op when it is
    already: each pooled connection remembers its mode from its ``connect``)."""
    connection = session.connection()
    info = connection.connection.info
    if info.get("synchronous") != mode:
        info.pop("synchronous", None)  # unknown until the pragma has run
        connection.exec_driver_sql(f"PRAGMA synchronous={mode}")
        info["synchronous"] = mode


class Database:
    """An engine plus a session factory; ``session()`` commits or rolls back.

    ``write_guard``, when a daemon has set one, is called first in every transaction
    of an operation's unit of work (``promoter.store.journal.attempt``) and raises to
    refuse it (the host's epoch check, ``promoter.engine.fencing``)."""

    def __init__(
        self, url: str, busy_timeout: float = 30.0, server: ServerOptions | None = None
    ) -> None:
        self.url = url
        self.engine = make_engine(url, busy_timeout, server)
        self._factory = sessionmaker(self.engine, expire_on_commit=False)
        self._sqlite = self.engine.dialect.name == "sqlite"
        self.write_guard: Callable[[Session | Connection], None] | None = None
        self.outages = OutageLog()  # why it did not answer, logged (rate-limited)
        self.failures = StatementLog()  # statements that failed, logged (rate-limited)

    def guard_writes(self, session: Session | Connection) -> None:
        """Run ``write_guard`` (if set) in ``session``: raises to refuse its writes."""
        if self.write_guard is not None:
            self.write_guard(session)

    def first(self, statement: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        """The first row of a read-only Core ``statement``, on a pooled connection and
        without an ORM session (a hot read: the executor token look-up); errors are
        translated as ``session``'s are. It writes nothing and sets no ``synchronous``."""
        try:
            with self.engine.connect() as connection:
                return connection.execute(statement, params).first()
        except SQLAlchemyError as exc:
            raise translate(
                exc, url=self.url, outages=self.outages, failures=self.failures
            ) from exc

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """One read-only transaction on a pooled connection, without an ORM session: no
        flush, no session events, nothing to commit (a hot read of Core statements: the
        host's epoch check, an operation's view). It always ends rolled back, so it writes
        nothing, and sets no ``synchronous``; errors are translated as ``session``'s are.
        A lock it takes (PostgreSQL's transaction-scoped advisory locks) is held until the
        block ends, as in a session's transaction."""
        try:
            with self.engine.connect() as connection:
                yield connection  # autobegun by its first statement, rolled back on close
        except SQLAlchemyError as exc:
            raise translate(
                exc, url=self.url, outages=self.outages, failures=self.failures
            ) from exc

    @contextmanager
    def session(self, *, durable: bool = True) -> Iterator[Session]:
        """One transaction, committed when the block ends, rolled back on any error.

        ``durable=False`` (SQLite only): the commit is not flushed; it becomes durable
        with the next durable commit or checkpoint (the WAL is one file, written in
        order, so one sync of it makes every earlier commit durable too). For commits
        whose loss in a power failure leaves nothing unsafe behind: see
        ``docs/decisions/durable-commits-where-the-protocol-needs-them.md``. A durable
        commit on SQLite is one flush of the WAL (counted as ``sqlite_commit`` by
        ``promoter.fs.flush``); PostgreSQL's commits are always durable.
        """
        session = self._factory()
        try:
            if self._sqlite:  # before the transaction begins: pysqlite's BEGIN is deferred
                _synchronous(session, "FULL" if durable else "NORMAL")
            yield session
            if self._sqlite and durable and _writes(session):
                flush.note("sqlite_commit")
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise translate(
                exc, url=self.url, outages=self.outages, failures=self.failures
            ) from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def rolled_back(self, lock_wait_ms: int) -> Iterator[Session]:
        """A session whose transaction is always rolled back, never committed (a
        rehearsal's); a lock it would wait for longer than ``lock_wait_ms`` fails it
        instead (SQLite's busy timeout, PostgreSQL's ``lock_timeout``). On SQLite the
        connection is then dropped from the pool, so the shorter wait never outlives it."""
        session = self._factory()
        dialect = self.engine.dialect.name
        connection: Connection | None = None
        try:
            connection = session.connection()
            if dialect == "sqlite":
                connection.exec_driver_sql(f"PRAGMA busy_timeout={int(lock_wait_ms)}")
            elif dialect == "postgresql":  # for this transaction only
                connection.exec_driver_sql(f"SET LOCAL lock_timeout = {int(lock_wait_ms)}")
            yield session
        except SQLAlchemyError as exc:
            raise translate(
                exc, url=self.url, outages=self.outages, failures=self.failures
            ) from exc
        finally:
            try:
                if dialect == "sqlite" and connection is not None:
                    connection.invalidate()  # closed: SQLite rolls its transaction back
                session.rollback()
            finally:
                session.close()

    def ping(self) -> bool:
        try:
            with self.engine.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
            return True
        except SQLAlchemyError:
            return False

    def dispose(self) -> None:
        self.engine.dispose()
