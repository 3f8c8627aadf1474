"""The database a test's daemons use: SQLite in the state directory, or its own PostgreSQL one.

``PROMOTER_TEST_DATABASE=postgresql`` runs the suite against PostgreSQL. Every test is
given the name of a database of its own in ``PROMOTER_DATABASE_URL``, so every daemon the
test starts (in-process or as a child process) uses it; the server is
``PROMOTER_TEST_POSTGRES_URL`` (an admin URL, default the local trust-authenticated
``postgres`` database).

The database is created only when the test first opens it: ``install`` hooks every
connection this process makes (SQLAlchemy's ``do_connect``), and a connection to a named
but not yet created database first copies the migrated template into it; a child process
started by ``tests.support.process`` has it created before it starts (``ensure``). A test
that never opens a database (most unit tests) costs no database at all. A child process
that opens the database before the test process ever did finds no database and fails
with PostgreSQL's ``database … does not exist``: it never falls back to SQLite.

Names carry the process id and the xdist worker (``PYTEST_XDIST_WORKER``), so parallel
workers and concurrent runs against one server never share a database or a template.
Nothing here runs for SQLite; this module only drops databases it created itself.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
_names = itertools.count()
_UPGRADE = "import sys; from promoter.store.db import upgrade; upgrade(sys.argv[1])"


def backend() -> str:
    return os.environ.get("PROMOTER_TEST_DATABASE", "sqlite")


def admin_url() -> str:
    return os.environ.get("PROMOTER_TEST_POSTGRES_URL") or DEFAULT_ADMIN_URL


def own_url(tmp_path: Path, name: str) -> str:
    """The test's own database: ``PROMOTER_DATABASE_URL`` under the PostgreSQL pass, else
    a SQLite file ``name`` in ``tmp_path``."""
    return os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / name}"


def worker() -> str:
    """This process's xdist worker (``gw0``, ``gw1``…), or ``main`` when not distributed."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def postgres_answers(url: str | None = None) -> bool:
    """Whether a PostgreSQL server answers at ``url`` (default: the admin URL)."""
    try:
        engine = create_engine(url or admin_url(), connect_args={"connect_timeout": 2})
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:  # no driver, no server, no access: all mean "not here"
        return False


def _url_of(name: str) -> str:
    return make_url(admin_url()).set(database=name).render_as_string(hide_password=False)


def _prefix() -> str:
    return f"t{os.getpid()}_{worker()}"


class Server:
    """This process's databases on the admin server: the migrated template, made on first
    need, and each test's database, made on its first connection (``PendingDatabase``)."""

    def __init__(self) -> None:
        self._admin = create_engine(admin_url(), isolation_level="AUTOCOMMIT")
        self._template: str | None = None
        self._lock = threading.Lock()
        self.pending: dict[str, PendingDatabase] = {}  # by database name

    def execute(self, statement: str) -> None:
        with self._admin.connect() as connection:
            connection.execute(text(statement))

    def template(self) -> str:
        """A database migrated to the newest schema, to copy for each test.

        Copying it (``CREATE DATABASE … TEMPLATE``) costs a tenth of a second; each
        daemon's own ``upgrade`` then finds nothing to do.
        """
        with self._lock:
            if self._template is None:
                name = f"{_prefix()}_template"
                self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                self.execute(f'CREATE DATABASE "{name}"')
                # migrated by a process of its own: the first connection may come from
                # inside a daemon's own migration, and Alembic's context does not nest
                subprocess.run([sys.executable, "-c", _UPGRADE, _url_of(name)], check=True)
                self._template = name
            return self._template

    def reserve(self, label: str) -> PendingDatabase:
        """A name for a test's database, created when it is first connected to."""
        slug = re.sub(r"[^a-z0-9]+", "_", label.lower())[-30:].strip("_")
        name = f"{_prefix()}_{next(_names)}_{slug}"[:63]
        pending = PendingDatabase(self, name)
        self.pending[name] = pending
        return pending

    def close(self) -> None:
        for pending in list(self.pending.values()):
            pending.drop()
        if self._template is not None:
            self.execute(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')
            self._template = None
        self._admin.dispose()


class PendingDatabase:
    """One test's database: named at once, created on its first connection, dropped after."""

    def __init__(self, server: Server, name: str) -> None:
        self.server = server
        self.name = name
        self.url = _url_of(name)
        self.created = False  # stays true once created, dropped or not
        self.dropped = False
        self._lock = threading.Lock()

    def ensure(self) -> str:
        """Create the database (a copy of the template) unless it exists; its URL."""
        with self._lock:
            if self.dropped:
                raise RuntimeError(f"{self.name} is opened after its test ended")
            if not self.created:
                template = self.server.template()
                self.server.execute(f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')
                self.created = True
        return self.url

    def drop(self) -> None:
        with self._lock:
            if self.created and not self.dropped:
                self.server.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            self.dropped = True
        self.server.pending.pop(self.name, None)


_server: Server | None = None


def _before_connect(dialect: Any, _record: Any, _args: Any, params: dict[str, Any]) -> None:
    """SQLAlchemy's ``do_connect``: a pending database is created before its first use."""
    if _server is None or dialect.name != "postgresql":
        return
    pending = _server.pending.get(str(params.get("dbname", "")))
    if pending is not None:
        pending.ensure()


@contextmanager
def connect_hook(callback: Any) -> Iterator[None]:
    """``callback`` given every connection this process opens (SQLAlchemy's ``do_connect``)
    while inside."""
    event.listen(Engine, "do_connect", callback)
    try:
        yield
    finally:
        event.remove(Engine, "do_connect", callback)


@contextmanager
def install() -> Iterator[Server]:
    """This process's ``Server``, with every PostgreSQL connection watched for a pending
    database; on leaving, every database it created is dropped."""
    global _server
    server = _server = Server()
    try:
        with connect_hook(_before_connect):
            yield server
    finally:
        _server = None
        server.close()


def ensure(url: str | None) -> None:
    """Create the database at ``url`` now if it is a test's pending one (before a child
    process that will use it starts); any other URL is left alone."""
    if _server is None or not url:
        return
    pending = _server.pending.get(make_url(url).database or "")
    if pending is not None:
        pending.ensure()


# Tests that never open the test's database (tests/unit and tests/property unless marked
# ``database``, and any marked ``database_free``) run in the SQLite pass only: the
# PostgreSQL pass would run the same code again. The SQLite pass holds them to it:
# ``watch_database_free`` notes a connection to a daemon's default database (a
# ``promoter.db``: under PostgreSQL, ``PROMOTER_DATABASE_URL`` names the test's database
# instead) made by the test's thread or a thread it started. A file a test names itself
# (``sqlite:///…/ledger.db``) is SQLite under either pass, so it needs no second run.
_database_free: list[str] = []  # the node id of the database-free test now running
_earlier_threads: set[int] = set()  # threads of earlier tests, still winding down
opened_by_database_free: list[str] = []


def _note_connect(dialect: Any, _record: Any, args: Any, _params: Any) -> None:
    if not _database_free or dialect.name != "sqlite" or not args:
        return
    if threading.get_ident() in _earlier_threads:
        return
    if os.path.basename(str(args[0])) == "promoter.db":
        opened_by_database_free.append(_database_free[0])


@contextmanager
def watch_database_free(nodeid: str) -> Iterator[None]:
    """While ``nodeid`` runs, note every connection to a daemon's default database."""
    _database_free[:] = [nodeid]
    _earlier_threads.clear()
    _earlier_threads.update(t.ident for t in threading.enumerate() if t.ident is not None)
    _earlier_threads.discard(threading.get_ident())
    event.listen(Engine, "do_connect", _note_connect)
    try:
        yield
    finally:
        event.remove(Engine, "do_connect", _note_connect)
        _database_free.clear()


def database_free(path: str, markers: set[str]) -> bool:
    """Whether a test (its file's path from the tests' root, its markers) never opens a
    database, so the PostgreSQL pass need not run it again."""
    if "database_free" in markers:
        return True
    return path.split("/", 1)[0] in {"unit", "property"} and "database" not in markers


if __name__ == "__main__":  # `python -m tests.support.databases`: exit 0 when a server answers
    sys.exit(0 if postgres_answers() else 1)
