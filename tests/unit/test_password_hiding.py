"""A database URL's password is hidden where it would show, and only there.

Hiding once replaced every occurrence of the password's text, so a short password
mangled the message: ``a`` took the ``a`` out of every word, ``postgres`` the scheme
(``***ql+psycopg``). Now the URL's password position is hidden in every form the
password takes (decoded, %-encoded, as written), the text elsewhere only where it stands
alone, or anywhere once it is long. Through ``failed`` (told to the operator who ran a
migration) and ``translate`` (logged), as the daemon uses them.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError

from promoter.store.db import failed, translate

DRIVER = "(psycopg.errors.InsufficientPrivilege) "
TAIL = (
    "\n[SQL: CREATE TABLE alembic_version (version_num text)]\n"
    "(Background on this error at: https://sqlalche.me/e/21/f405)"
)


def _told(message: str, url: str) -> str:
    orig = psycopg.errors.InsufficientPrivilege(message)
    refused = ProgrammingError("CREATE TABLE alembic_version (version_num text)", {}, orig)
    detail = failed("database migration failed", refused, url).detail
    prefix = "database migration failed: " + DRIVER
    assert detail.startswith(prefix) and detail.endswith(TAIL), detail
    return detail.removeprefix(prefix).removesuffix(TAIL)


def test_a_one_letter_password_is_hidden_in_the_url_and_nowhere_else() -> None:
    url = "postgresql+psycopg://promoter:a@db.internal:5433/ledger"
    message = (
        f"connection to {url} failed: FATAL:  password authentication failed for user "
        '"promoter" at postgresql://promoter:a@10.0.0.5/ledger; missing "=" after "a"'
    )
    assert _told(message, url) == (
        "connection to postgresql+psycopg://promoter:***@db.internal:5433/ledger failed: "
        'FATAL:  password authentication failed for user "promoter" at '
        'postgresql://promoter:***@10.0.0.5/ledger; missing "=" after "***"'
    )


def test_postgres_as_the_password_leaves_the_scheme_and_words_whole() -> None:
    url = "postgresql+psycopg://admin:postgres@db.internal:5432/ledger"
    message = (
        f"connection to {url} failed: the postgresql server said admin:postgres@db is "
        "not allowed; (postgres) tried"
    )
    assert _told(message, url) == (
        "connection to postgresql+psycopg://admin:***@db.internal:5432/ledger failed: the "
        "postgresql server said admin:***@db is not allowed; (***) tried"
    )


def test_a_user_named_as_the_password_is_hidden_too() -> None:
    """Showing the user would show the password: over-hiding is the safe side."""
    url = "postgresql+psycopg://postgres:postgres@db.internal:5432/ledger"
    message = f'connection to {url} failed: password authentication failed for user "postgres"'
    assert _told(message, url) == (
        "connection to postgresql+psycopg://***:***@db.internal:5432/ledger failed: "
        'password authentication failed for user "***"'
    )


def test_a_password_with_url_characters_is_hidden_in_each_of_its_forms() -> None:
    written = "p%40ss%3Aw%2Frd%25"  # p@ss:w/rd%
    url = f"postgresql+psycopg://promoter:{written}@db.internal:5433/ledger"
    message = (
        f"permission denied ({url}; postgresql://promoter:p@ss:w/rd%@db; "
        f"p@ss:w/rd% and {written} alone; password=p@ss:w/rd% dbname=ledger)"
    )
    told = _told(message, url)
    assert told == (
        "permission denied (postgresql+psycopg://promoter:***@db.internal:5433/ledger; "
        "postgresql://promoter:***@db; *** and *** alone; password=*** dbname=ledger)"
    )
    for form in ("p@ss", "w/rd", "p%40ss", "w%2Frd", "rd%"):
        assert form not in told, form


def test_a_long_password_is_hidden_even_inside_a_word() -> None:
    url = "postgresql+psycopg://promoter:correcthorsebattery@db.internal/ledger"
    message = "bad option xcorrecthorsebatteryx near correcthorsebattery"
    assert _told(message, url) == "bad option x***x near ***"


def test_the_logged_line_of_a_failed_statement_hides_a_short_password_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "postgresql+psycopg://promoter:a@db.internal:5433/ledger"
    orig = psycopg.errors.InsufficientPrivilege(f"a table is missing at {url}")
    with caplog.at_level(logging.ERROR, "promoter.store"):
        translate(ProgrammingError("SELECT 1", {}, orig), url=url)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "promoter.store"]
    assert line.startswith(
        "a database statement failed: (psycopg.errors.InsufficientPrivilege) *** table is "
        "missing at postgresql+psycopg://promoter:***@db.internal:5433/ledger\n"
    )


def test_an_unreachable_database_logs_its_reason_with_the_url_hidden(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "postgresql+psycopg://postgres:a@db.internal:5433/postgres"
    orig = psycopg.OperationalError(f"connection to {url} failed: Connection refused")
    with caplog.at_level(logging.WARNING, "promoter.store"):
        translate(OperationalError("SELECT 1", {}, orig), url=url)
    assert [r.getMessage() for r in caplog.records if r.name == "promoter.store"] == [
        "the database cannot be reached: connection to "
        "postgresql+psycopg://postgres:***@db.internal:5433/postgres failed: Connection refused"
    ]


def test_a_password_given_in_the_query_string_is_hidden_where_it_stands() -> None:
    """A password set as the URL's ``?password=`` (percent-encoded there) is the URL's
    password too: hidden decoded and encoded where it stands, not only after ``=``."""
    url = "postgresql+psycopg://promoter@db.internal/ledger?password=s3cr%40t"
    message = f"connecting to {url} with {{'password': 's3cr@t'}} failed: password: s3cr%40t"
    told = _told(message, url)
    assert "s3cr" not in told, told
    assert told == (
        "connecting to postgresql+psycopg://promoter@db.internal/ledger?password=*** with "
        "{'password': '***'} failed: password: ***"
    )


def test_a_quoted_setting_with_an_escaped_quote_is_hidden_whole() -> None:
    """libpq quotes a conninfo value with ``'`` and escapes a quote in it as ``\\'``:
    the whole value is hidden, not only up to the escaped quote."""
    url = "postgresql+psycopg://promoter@db.internal/ledger"  # the password set elsewhere
    told = _told(r"invalid connection string: host=db password='it\'s x' port=5", url)
    assert told == "invalid connection string: host=db password=*** port=5", told
