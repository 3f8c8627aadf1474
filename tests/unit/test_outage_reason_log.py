"""What a database that does not answer says, and to whom: the caller hears only that it
does not answer; the driver's reason goes to the daemon's log, a URL's password hidden,
one line for one reason at most every ``REASON_EVERY`` seconds."""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from promoter.errors import DatabaseUnavailable
from promoter.store.db import REASON_EVERY, UNANSWERED, OutageLog, translate

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
