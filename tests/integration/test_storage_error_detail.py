"""A database failure that is not an outage (a statement the database refuses or cannot
carry out) answers 507 ``storage_error`` with one fixed detail: never the driver's words,
which hold the statement's SQL, its bound parameters and a link to SQLAlchemy's pages. The
driver's message goes to the daemon's log on ``promoter.store``.

The failure is real: a table of the test's own ledger (its SQLite file, or its own
PostgreSQL database under the PostgreSQL pass) is dropped under the running daemon.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.support.daemon import running_daemon
from tests.support.flows import init_repo

DETAIL = (
    "the database refused or could not carry out a statement of this request; "
    "its message is in the daemon's log"
)


def test_a_dropped_table_answers_507_without_the_driver_s_sql_parameters_or_link(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with (
        running_daemon(tmp_path / "s", {"work": repo}) as daemon,
        daemon.orchestrator() as orchestrator,
    ):
        assert orchestrator.get("/v1/events").status_code == 200
        with daemon.services.db.engine.begin() as connection:
            connection.execute(text("DROP TABLE event_feed"))
        caplog.clear()
        with caplog.at_level(logging.ERROR, "promoter.store"):
            answer = orchestrator.get("/v1/events", params={"limit": 93})
    assert answer.status_code == 507
    problem = answer.json()
    assert (problem["code"], problem["detail"]) == ("storage_error", DETAIL)
    for driver_s in (
        "event_feed",
        "SELECT",
        "parameters",
        "sqlalche.me",
        "OperationalError",
        "ProgrammingError",
        "93",
    ):
        assert driver_s not in answer.text, driver_s
    failed = [
        r.getMessage()
        for r in caplog.records
        if r.name == "promoter.store" and r.levelno == logging.ERROR
    ]
    missing = ("no such table: event_feed", 'relation "event_feed" does not exist')
    assert any(
        line.startswith("a database statement failed: ") and any(m in line for m in missing)
        for line in failed
    ), failed
