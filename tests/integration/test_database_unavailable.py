"""A database outage answers 503 ``database_unavailable`` with ``Retry-After``; both clients
retry it and succeed once the database is back; every operation of the served contract
that lists that answer gives it.

The daemon runs on a PostgreSQL cluster this test makes and starts itself
(``tests.support.own_postgres``), never the machine's server. The clients' injected sleep
starts the database again on the first retry, so the retry meets a database that answers:
no sleep synchronizes anything.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter.client.sync import AsyncPromoterClient, Backoff, PromoterClient
from promoter.errors import DatabaseUnavailable
from promoter.store.db import Database
from tests.support.daemon import running_daemon
from tests.support.flows import head, init_repo
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


# A value each path or required query parameter accepts, so that a route's request is
# well formed and only the ledger stands between it and its answer.
SAMPLES = {
    "bundle_id": "bnd_" + "0" * 32,
    "operation_id": "op_" + "0" * 32,
    "sha256": "0" * 64,
    "grant_id": "grt_demo1",
    "workflow_id": "wf",
    "stage": "s",
    "host": "host-b",
    "name": "work",
    "repository": "work",
    "tree": "0" * 40,
    "from": "0" * 40,
    "to": "0" * 40,
    "commit": "0" * 40,
    "code": "database_unavailable",
    "fence": "1",
}
METHODS = ("get", "put", "post", "delete", "patch")


def _request(
    op: dict[str, Any], path: str, samples: dict[str, str]
) -> tuple[str, dict[str, str], dict[str, str], dict[str, Any]]:
    """The concrete path, query and headers that have a sample, and ``op``'s own example."""
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    for param in op.get("parameters", []):
        if param["in"] == "path":
            path = path.replace("{" + param["name"] + "}", samples[param["name"]])
        elif param["in"] == "query" and param["name"] in samples:
            query[param["name"]] = samples[param["name"]]
        elif param["in"] == "header" and param["name"] in samples:
            headers[param["name"]] = samples[param["name"]]
    body: dict[str, Any] = {}
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" in content:
        body["json"] = content["application/json"].get("example", {})
    elif content:
        body["content"] = b"\0"
        headers["content-type"] = next(iter(content))
    return path, query, headers, body


# Operations that answer with the host's own credential through an outage, and why: what
# they say is held by this host, not the ledger (with a credential read from the ledger,
# an executor token, they answer 503 like every other).
OWN_ANSWERS = {
    "whoami": "the host's own tokens are compared in memory",
    "getMetrics": "the counters are this host's own (and public: no token is read)",
    "listRepositories": "the served repositories from the configuration, `cluster` null",
    "listHosts": "this host's own view, `database_up` false",
    "worktreeChanges": "the watch of the worktree is in memory",
    "getBlob": "the blob store is on disk",
    "diffSnapshots": "the snapshots are trees of the shadow repository",
}


def _answer(answer: httpx.Response) -> tuple[int, str | None, str | None]:
    problem = answer.headers.get("content-type", "").startswith("application/problem+json")
    code = answer.json().get("code") if problem else None
    return answer.status_code, code, answer.headers.get("Retry-After")


@pytest.mark.slow
def test_every_route_that_reads_the_ledger_answers_503_while_the_database_is_down(
    tmp_path: Path,
) -> None:
    """Every operation of the served contract that lists ``database_unavailable`` answers
    exactly that, with ``Retry-After``, when the daemon's own PostgreSQL cluster is
    stopped: with a credential read from the ledger (an executor token), and with the
    host's own credential for each role it admits unless its answer is the host's own
    (``OWN_ANSWERS``, which then answer below 500); the operations that need no ledger
    (``/healthz``, ``/problems``, ``/openapi.json``) still answer and ``/readyz`` names the
    database. The operations are read from ``/openapi.json``: a new route is covered."""
    assert BIN is not None
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with (
        own_postgres(BIN) as server,
        running_daemon(tmp_path / "s", {"work": repo}, database_url=server.url) as daemon,
    ):
        with daemon.operator() as client:
            contract = client.get("/openapi.json").json()
            minted = client.post("/v1/executor-tokens", json={"executor_run_id": "run_x"})
            snapshot = client.post("/v1/repositories/work/snapshots", json={})
        assert (minted.status_code, snapshot.status_code) == (201, 201), snapshot.text
        tree = snapshot.json()["tree"]
        executor = minted.json()["token"]
        tokens = {"orchestrator": daemon.orchestrator_token, "operator": daemon.operator_token}
        samples = {
            **SAMPLES,
            "Promoter-Executor-Token": executor,
            "tree": tree,
            "from": tree,
            "to": tree,
            "commit": head(repo)[0],
        }
        server.stop()
        wrong, own, asked = [], set(), 0
        with daemon.client() as raw:
            for template, item in contract["paths"].items():
                for method, op in item.items():
                    if method not in METHODS:
                        continue
                    path, query, headers, body = _request(op, template, samples)
                    if op["operationId"] == "restoreSnapshot":
                        body["json"] = {"expected_current_tree": tree}
                    declared = "database_unavailable" in json.dumps(op["responses"].get("503"))
                    roles = op.get("x-roles") or []  # none: a public route reads no token
                    credentials = [("executor", executor)] if declared and roles else []
                    credentials += [(role, tokens[role]) for role in roles if role in tokens]
                    for role, token in credentials or [(None, None)]:
                        auth = {"Authorization": f"Bearer {token}"} if token else {}
                        answer = raw.request(
                            method, path, params=query, headers={**headers, **auth}, **body
                        )
                        asked += 1
                        got = _answer(answer)
                        if role != "executor" and op["operationId"] in OWN_ANSWERS:
                            own.add(op["operationId"])
                            expected = got[0] < 500
                        elif declared:
                            expected = got == (503, "database_unavailable", "2")
                        else:
                            expected = got[0] < 500 or path == "/readyz"
                        if not expected:
                            wrong.append((method, template, role, got, answer.text[:200]))
            assert wrong == []
            assert own == set(OWN_ANSWERS)
            assert asked > 100
            health = raw.get("/healthz")
            assert (health.status_code, health.content) == (200, b'{"status": "ok"}')
            ready = raw.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["database"] is False
            assert raw.get("/problems/database_unavailable").status_code == 200
            assert raw.get("/openapi.json").json() == contract
        server.start()
        with daemon.orchestrator() as client:
            assert client.get("/v1/events").status_code == 200
