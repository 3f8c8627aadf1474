"""Database engine, connection pragmas, sessions and migrations.

SQLite gets WAL, ``synchronous=FULL``, foreign keys and a busy timeout on every
connection; other SQLAlchemy URLs (PostgreSQL) are used as they are. A SQLite write
still locked out by another writer when the busy timeout ends raises ``DatabaseBusy``
(503); a full disk (``SQLITE_FULL``) and every other database error raise
``StorageError`` (507). The schema is owned by Alembic: ``upgrade`` runs the migrations
shipped as the ``promoter_migrations`` package (the top-level ``migrations/`` folder).
This module holds no queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DataError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from promoter.errors import (
    DatabaseBusy,
    OperationConflict,
    PromoterError,
    StorageError,
    ValidationFailed,
)

_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)


def _sqlite_pragmas(busy_timeout: float) -> Any:
    def apply(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    return apply


def make_engine(url: str, busy_timeout: float = 30.0) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": busy_timeout}
        )
        event.listen(engine, "connect", _sqlite_pragmas(busy_timeout))
        return engine
    return create_engine(url, pool_pre_ping=True)


def translate(exc: SQLAlchemyError) -> PromoterError:
    """The promoter error for a database failure: busy (503), storage (507), bad text, or
    an operation whose status moved under the request (``operation_conflict``, 409).

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
    code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
    if isinstance(exc, OperationalError) and isinstance(code, int) and code & 0xFF in _SQLITE_BUSY:
        return DatabaseBusy("the database stayed locked by another writer; try again")
    return StorageError(f"database error: {exc.__class__.__name__}: {exc}")


def alembic_config(url: str) -> Config:
    config = Config()
    location = resources.files("promoter_migrations")
    config.set_main_option("script_location", str(location))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Bring the database at ``url`` to the newest schema."""
    try:
        command.upgrade(alembic_config(url), "head")
    except SQLAlchemyError as exc:
        raise StorageError(f"database migration failed: {exc}") from exc


class Database:
    """An engine plus a session factory; ``session()`` commits or rolls back."""

    def __init__(self, url: str, busy_timeout: float = 30.0) -> None:
        self.url = url
        self.engine = make_engine(url, busy_timeout)
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        session = self._factory()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise translate(exc) from exc
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
            raise translate(exc) from exc
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
