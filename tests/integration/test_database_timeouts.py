"""PostgreSQL timeouts and names (protocol: hosts#fencing): a row lock held past
``database_lock_timeout`` is answered 503 ``database_busy`` with ``Retry-After``, not a
wait without end; a transaction a hung host left open is ended by the server after
``database_idle_transaction_timeout``, and its row locks with it; the daemon's
connections are named ``promoter/<host id>``.

Deterministic: another connection holds the lease's row lock, the request is issued and
its code asserted, then the lock is released and the same request succeeds. The
PostgreSQL tests run in the PostgreSQL pass only; the option and translation checks run
everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
from psycopg import errors as pg_errors
from sqlalchemy.exc import OperationalError

from promoter.config import load_settings
from promoter.errors import DatabaseBusy, DatabaseUnavailable
from promoter.store import hosts
from promoter.store.db import Database, ServerOptions, translate
from tests.support.daemon import running_daemon
from tests.support.flows import make_lease

_LEASE = "/v1/leases/wf_locked/stage"


def _lease(fence: int) -> dict[str, object]:
    return make_lease(fence=fence)


def test_settings_have_bounded_defaults_and_reach_the_connection_options(tmp_path: Path) -> None:
    settings = load_settings(None, state_dir=tmp_path)
    assert (
        settings.database_connect_timeout,
        settings.database_lock_timeout,
        settings.database_statement_timeout,
        settings.database_idle_transaction_timeout,
        settings.database_pool_size,
        settings.database_max_overflow,
    ) == (10.0, 5.0, 60.0, 60.0, 5, 10)
    options = ServerOptions(
        connect_timeout=2.5,
        lock_timeout=0.25,
        statement_timeout=0,
        idle_transaction_timeout=1.5,
        application_name="promoter/h1",
    )
    assert options.connect_args() == {
        "connect_timeout": 3,
        "application_name": "promoter/h1",
        "options": "-c lock_timeout=250 -c statement_timeout=0 "
        "-c idle_in_transaction_session_timeout=1500",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30_000,
    }


def test_a_postgresql_lock_timeout_is_database_busy() -> None:
    orig = pg_errors.LockNotAvailable("canceling statement due to lock timeout")
    assert orig.sqlstate == "55P03"
    error = translate(OperationalError("SELECT … FOR UPDATE", {}, orig))
    assert isinstance(error, DatabaseBusy)


@pytest.mark.postgresql_only
def test_a_held_row_lock_answers_database_busy_with_retry_after(tmp_path: Path) -> None:
    with (
        running_daemon(tmp_path / "s", {}, host_id="host-a", database_lock_timeout=0.5) as daemon,
        daemon.orchestrator() as orch,
    ):
        assert orch.put(_LEASE, json=_lease(5)).status_code == 200
        holder = sa.create_engine(os.environ["PROMOTER_DATABASE_URL"])
        try:
            with holder.connect() as connection:
                names = connection.execute(
                    sa.text(
                        "SELECT DISTINCT application_name FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name LIKE 'promoter/%'"
                    )
                ).scalars()
                assert list(names) == ["promoter/host-a"]
                connection.execute(
                    sa.text("SELECT fence FROM leases WHERE workflow_id = 'wf_locked' FOR UPDATE")
                )  # the row stays locked until this transaction ends
                answer = orch.put(_LEASE, json=_lease(6))  # waits only its lock timeout
                assert answer.status_code == 503, answer.text
                assert answer.json()["code"] == "database_busy"
                assert answer.headers["Retry-After"] == "1"
                connection.rollback()  # the lock is released
            assert orch.put(_LEASE, json=_lease(6)).status_code == 200
        finally:
            holder.dispose()


@pytest.mark.postgresql_only
def test_a_row_a_hung_host_holds_in_an_open_transaction_is_released_by_the_server() -> None:
    """A host that stops inside a transaction (here: between its statements) holding a
    host row locked: another host's update of that row waits, and goes through once the
    server ends the idle transaction; the hung host's next statement finds its connection
    gone (503 ``database_unavailable``) and nothing of its transaction was kept."""
    url = os.environ["PROMOTER_DATABASE_URL"]
    hung = Database(url, server=ServerOptions(idle_transaction_timeout=0.5))
    other = Database(url, server=ServerOptions(lock_timeout=30))  # would answer busy
    try:
        with other.session() as session:
            hosts.register(session, "host-hung", [], "2000-01-01T00:00:00Z")
        with pytest.raises(DatabaseUnavailable), hung.session() as stuck:
            stuck.execute(sa.text("UPDATE hosts SET epoch = 40 WHERE host_id = 'host-hung'"))
            # the hung host's transaction sits idle here, its row lock held
            with other.session() as session:
                raised = session.execute(
                    sa.text("UPDATE hosts SET epoch = epoch + 1 WHERE host_id = 'host-hung'")
                )
                assert raised.rowcount == 1
            stuck.execute(sa.text("SELECT 1"))  # it continues: its connection is gone
        with other.session() as session:
            epoch = session.execute(
                sa.text("SELECT epoch FROM hosts WHERE host_id = 'host-hung'")
            ).scalar_one()
        assert epoch == 2  # the other host's update, not the hung one's 40
    finally:
        hung.engine.dispose()
        other.engine.dispose()


def test_the_metrics_name_the_host(tmp_path: Path) -> None:
    with running_daemon(tmp_path / "s", {}, host_id="host-m") as daemon, daemon.client() as c:
        assert 'promoter_host_info{host_id="host-m"} 1.0' in c.get("/metrics").text
