"""The database a test's daemons use: SQLite in the state directory, or a fresh PostgreSQL one.

``PROMOTER_TEST_DATABASE=postgresql`` runs the suite against PostgreSQL: every test gets
its own database, created before it and dropped after it, named in
``PROMOTER_DATABASE_URL`` so every daemon the test starts (in-process or as a child
process) uses it. The server is ``PROMOTER_TEST_POSTGRES_URL`` (an admin URL, default the
local trust-authenticated ``postgres`` database). Nothing here runs for SQLite.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
_names = itertools.count()


def backend() -> str:
    return os.environ.get("PROMOTER_TEST_DATABASE", "sqlite")


def admin_url() -> str:
    return os.environ.get("PROMOTER_TEST_POSTGRES_URL") or DEFAULT_ADMIN_URL


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


@contextmanager
def migrated_template() -> Iterator[str]:
    """A database migrated to the newest schema, to copy for each test; dropped afterwards.

    Copying it (``CREATE DATABASE … TEMPLATE``) costs a tenth of a second; each daemon's
    own ``upgrade`` then finds nothing to do.
    """
    from promoter.store.db import upgrade

    name = f"t{os.getpid()}_template"
    admin = create_engine(admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    upgrade(_url_of(name))  # its engine is disposed: no session holds the template open
    try:
        yield name
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def fresh_postgres_database(label: str, template: str | None = None) -> Iterator[str]:
    """A new database on the admin server (a copy of ``template``, else empty), dropped
    afterwards; yields its URL."""
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower())[-30:].strip("_")
    name = f"t{os.getpid()}_{next(_names)}_{slug}"[:63]
    admin = create_engine(admin_url(), isolation_level="AUTOCOMMIT")
    copy = f' TEMPLATE "{template}"' if template else ""
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    try:
        yield _url_of(name)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":  # `python -m tests.support.databases`: exit 0 when a server answers
    import sys

    sys.exit(0 if postgres_answers() else 1)
