"""A failed migration or schema check is told to the operator who ran it with the
driver's message, the database URL's password hidden: as written in the URL (%-encoded)
and decoded, and the URL itself with it hidden."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import ProgrammingError

from promoter.errors import StorageError
from promoter.store.db import failed

URL = "postgresql+psycopg://promoter:p%40ss%2Fw%3Ard@db.internal:5433/ledger"


@pytest.mark.parametrize("what", ["database migration failed", "database schema check failed"])
def test_a_migration_s_driver_message_naming_the_password_is_told_with_it_hidden(
    what: str,
) -> None:
    orig = psycopg.errors.InsufficientPrivilege(
        f"permission denied for schema public (p@ss/w:rd, p%40ss%2Fw%3Ard, {URL})"
    )
    refused = ProgrammingError("CREATE TABLE alembic_version (version_num text)", {}, orig)
    error = failed(what, refused, URL)
    assert isinstance(error, StorageError)
    assert error.detail == (
        f"{what}: (psycopg.errors.InsufficientPrivilege) permission denied for schema "
        "public (***, ***, postgresql+psycopg://promoter:***@db.internal:5433/ledger)\n"
        "[SQL: CREATE TABLE alembic_version (version_num text)]\n"
        "(Background on this error at: https://sqlalche.me/e/21/f405)"
    )
    for form in ("p@ss", "p%40ss", "w:rd", "w%3Ard"):
        assert form not in error.detail, form
