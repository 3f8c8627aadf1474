"""What a database that does not answer says, and to whom: the caller hears only that it
does not answer; the driver's reason goes to the daemon's log, a URL's password hidden,
one line for one reason at most every ``REASON_EVERY`` seconds. Any other failure's
caller hears only that a statement failed; the driver's whole message is logged, the
password hidden as written in the URL (%-encoded) and decoded."""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError

from promoter.errors import DatabaseUnavailable, StorageError
from promoter.store.db import (
    REASON_EVERY,
    STATEMENT_FAILED,
    UNANSWERED,
    OutageLog,
    StatementLog,
    translate,
)

URL = "postgresql+psycopg://promoter:pw-never-shown@db.internal:5433/ledger"
DETAIL = "the database does not answer; try again in a few seconds"


def _refused(message: str) -> OperationalError:
    """A connection psycopg could not make (no SQLSTATE: the server never answered)."""
    orig = psycopg.OperationalError(message)
    assert orig.sqlstate is None
    return OperationalError("SELECT 1", {}, orig)


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "promoter.store" and r.levelno == logging.WARNING
    ]


def test_a_driver_message_naming_the_url_and_its_password_is_logged_with_them_hidden(
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = (
        f"connection to {URL} failed (host=db.internal password=pw-never-shown dbname=ledger): "
        "Connection refused\n\tIs the server running on that host?"
    )
    with caplog.at_level(logging.WARNING, "promoter.store"):
        error = translate(_refused(message), url=URL)
    assert isinstance(error, DatabaseUnavailable)
    assert (error.detail, UNANSWERED) == (DETAIL, DETAIL)
    assert error.context == {}
    assert _logged(caplog) == [
        "the database cannot be reached: connection to "
        "postgresql+psycopg://promoter:***@db.internal:5433/ledger failed (host=db.internal "
        "password=*** dbname=ledger): Connection refused"
    ]
    assert "pw-never-shown" not in caplog.text


def test_a_reason_is_logged_once_then_at_most_once_every_ten_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outages = OutageLog(clock=lambda: now[0])
    refused = _refused('connection to server at "10.0.0.5", port 5432 failed: Connection refused')
    with caplog.at_level(logging.WARNING, "promoter.store"):
        for _ in range(50):  # a burst of requests during the outage: one line
            assert translate(refused, url=URL, outages=outages).detail == DETAIL
        assert len(_logged(caplog)) == 1
        now[0] += REASON_EVERY - 0.01
        translate(refused, url=URL, outages=outages)
        assert len(_logged(caplog)) == 1
        now[0] += 0.01
        translate(refused, url=URL, outages=outages)
        closed = _refused("server closed the connection unexpectedly")
        translate(closed, url=URL, outages=outages)  # another reason: said at once
    reason = 'connection to server at "10.0.0.5", port 5432 failed: Connection refused'
    assert REASON_EVERY == 10.0
    assert _logged(caplog) == [
        f"the database cannot be reached: {reason}",
        f"the database cannot be reached: {reason} (50 more since the last line)",
        "the database cannot be reached: server closed the connection unexpectedly",
    ]


ENCODED_URL = "postgresql+psycopg://promoter:p%40ss%2Fw%3Ard@db.internal:5433/ledger"


def test_a_failed_statement_s_message_is_logged_whole_with_both_forms_of_the_password_hidden(
    caplog: pytest.LogCaptureFixture,
) -> None:
    orig = psycopg.errors.InsufficientPrivilege(
        "permission denied for table events (p@ss/w:rd, p%40ss%2Fw%3Ard)"
    )
    failed = ProgrammingError(
        "SELECT events.kind FROM events WHERE events.operation_id = %(id)s",
        {"id": "op-1", "note": "p@ss/w:rd"},
        orig,
    )
    with caplog.at_level(logging.ERROR, "promoter.store"):
        error = translate(failed, url=ENCODED_URL)
    assert isinstance(error, StorageError)
    assert (
        error.detail
        == STATEMENT_FAILED
        == (
            "the database refused or could not carry out a statement of this request; "
            "its message is in the daemon's log"
        )
    )
    assert error.context == {}
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.name == "promoter.store" and r.levelno == logging.ERROR
    ]
    assert logged == [
        "a database statement failed: (psycopg.errors.InsufficientPrivilege) permission "
        "denied for table events (***, ***)\n"
        "[SQL: SELECT events.kind FROM events WHERE events.operation_id = %(id)s]\n"
        "[parameters: {'id': 'op-1', 'note': '***'}]\n"
        "(Background on this error at: https://sqlalche.me/e/21/f405)"
    ]
    for form in ("p@ss", "p%40ss", "w:rd", "w%3Ard"):
        assert form not in caplog.text, form


def _undefined(table: str) -> ProgrammingError:
    """A statement PostgreSQL refused: a table that is not there (its name in the message)."""
    orig = psycopg.errors.UndefinedTable(f'relation "{table}" does not exist')
    return ProgrammingError("SELECT 1 FROM t", {"table": table}, orig)


def _privilege(table: str) -> ProgrammingError:
    orig = psycopg.errors.InsufficientPrivilege(f"permission denied for table {table}")
    return ProgrammingError("SELECT 1 FROM t", {"table": table}, orig)


def test_a_caller_failing_statements_again_and_again_is_a_line_every_ten_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request that makes a statement fail, sent in a loop (each with other words in the
    driver's message, and two kinds of failure taking turns): each kind is logged once,
    then at most once every ``REASON_EVERY`` seconds with how many were held back."""
    now = [100.0]
    failures = StatementLog(clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, "promoter.store"):
        for n in range(200):
            failed = _undefined(f"t{n}") if n % 2 else _privilege(f"t{n}")
            error = translate(failed, url=URL, failures=failures)
            assert (type(error), error.detail) == (StorageError, STATEMENT_FAILED)
        now[0] += REASON_EVERY - 0.01
        translate(_undefined("late"), url=URL, failures=failures)
        now[0] += 0.01
        translate(_undefined("t200"), url=URL, failures=failures)
    logged = [
        r.getMessage().splitlines()[0]
        for r in caplog.records
        if r.name == "promoter.store" and r.levelno == logging.ERROR
    ]
    assert logged == [
        "a database statement failed: (psycopg.errors.InsufficientPrivilege) permission "
        "denied for table t0",
        'a database statement failed: (psycopg.errors.UndefinedTable) relation "t1" does '
        "not exist",
        "a database statement failed (100 more of psycopg.errors.UndefinedTable 42P01 since "
        'the last line): (psycopg.errors.UndefinedTable) relation "t200" does not exist',
    ]
