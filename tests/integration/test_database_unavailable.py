"""A database outage answers 503 ``database_unavailable`` with ``Retry-After``; both clients
retry it and succeed once the database is back.

The daemon runs on a PostgreSQL cluster this test makes and starts itself
(``tests.support.own_postgres``), never the machine's server. The clients' injected sleep
starts the database again on the first retry, so the retry meets a database that answers:
no sleep synchronizes anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from promoter.client.sync import AsyncPromoterClient, Backoff, PromoterClient
from promoter.errors import DatabaseUnavailable
from promoter.store.db import Database
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.own_postgres import OwnPostgres, binaries, own_postgres

BIN = binaries()
pytestmark = pytest.mark.skipif(BIN is None, reason="no PostgreSQL initdb installed here")


def restarting(server: OwnPostgres) -> tuple[Backoff, list[float]]:
    """A backoff whose first sleep starts the stopped database again (recording delays)."""
    slept: list[float] = []

    def sleep(delay: float) -> None:
        if not slept:
            server.start()
        slept.append(delay)

    async def async_sleep(delay: float) -> None:
        sleep(delay)

    return Backoff(4, 0.25, 8.0, sleep=sleep, async_sleep=async_sleep), slept


@pytest.mark.slow
def test_an_outage_answers_503_and_both_clients_retry_through_it(tmp_path: Path) -> None:
    assert BIN is not None
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with (
        own_postgres(BIN) as server,
        running_daemon(tmp_path / "s", {"w": repo}, database_url=server.url) as daemon,
    ):
        assert daemon.services.db.engine.dialect.name == "postgresql"
        token = daemon.orchestrator_token
        with daemon.orchestrator() as raw:
            assert raw.get("/v1/events").status_code == 200  # the pool holds a connection
            server.stop()
            answer = raw.get("/v1/events")
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "database_unavailable"
        assert answer.headers["Retry-After"] == "2"
        assert answer.headers["content-type"].startswith("application/problem+json")

        backoff, slept = restarting(server)
        with PromoterClient(daemon.url, token, backoff=backoff) as client:
            assert client.events().events == []
        assert slept == [0.25]  # one 503, then the database answered

        server.stop()
        backoff, slept = restarting(server)

        async def run() -> None:
            async with AsyncPromoterClient(daemon.url, token, backoff=backoff) as client:
                assert (await client.events()).events == []

        asyncio.run(run())
        assert slept == [0.25]

        server.stop()  # a client that gives up raises the problem as it came
        no_retry = Backoff(1)
        with (
            PromoterClient(daemon.url, token, backoff=no_retry) as client,
            pytest.raises(DatabaseUnavailable),
        ):
            client.events()
        server.start()
        with daemon.orchestrator() as raw:
            assert raw.get("/v1/events").status_code == 200


def test_an_unreachable_server_is_503_not_507_in_the_translation() -> None:
    """Without any server: a refused connection translates to ``database_unavailable``."""
    database = Database("postgresql+psycopg://postgres@127.0.0.1:9/postgres")
    try:
        with pytest.raises(DatabaseUnavailable), database.session() as session:
            session.connection()
    finally:
        database.dispose()
