"""A database outage answers 503 ``database_unavailable`` with ``Retry-After``; both clients
retry it and succeed once the database is back; every operation of the served contract
that lists that answer gives it; every page and form of the console (``/ui``, not in the
contract) says so on a 503 page, records nothing, and accepts no session, a revoked one
included.

The daemon runs on a PostgreSQL cluster this test makes and starts itself
(``tests.support.own_postgres``), never the machine's server. The clients' injected sleep
starts the database again on the first retry, so the retry meets a database that answers:
no sleep synchronizes anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from typer.testing import CliRunner

from promoter.api.ui.actions import ACTIONS
from promoter.api.ui.pages import RECEIPTS
from promoter.api.ui.web import CSP
from promoter.cli import credentials_cmd
from promoter.client.sync import AsyncPromoterClient, Backoff, PromoterClient
from promoter.config import RepositoryConfig
from promoter.errors import DatabaseUnavailable
from promoter.store import hosts
from promoter.store.db import Database
from tests.console.support import NEW, OLD, held, hidden, login
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import head, init_repo
from tests.support.own_postgres import OwnPostgres, binaries, own_postgres
from tests.support.promotion import tree_bytes

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


# What an outage tells any caller, in the API's problem and on the console's page: that
# the database does not answer, never where it is or why the driver says it failed.
DETAIL = "the database does not answer; try again in a few seconds"
SAID = f'<p class="message" id="problem"><code>database_unavailable</code>: {DETAIL}</p>'
UNAVAILABLE = "<h1>Unavailable for now</h1>"
SECRET = "pw-never-shown"  # a password in the daemon's URL (the test's cluster trusts it)


@pytest.mark.slow
def test_an_outage_tells_no_caller_where_the_database_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's ledger on its own cluster, reached by a URL with a password; the
    cluster stopped. A stranger's made-up token, the host's own token, a console page and
    form of a logged-in session, and a stranger's login all hear only that the database
    does not answer (``DETAIL``, exactly), never its address, port or password nor the
    driver's words; a console page is headed "Unavailable for now", not "Refused". The
    daemon's log names the driver's reason (refused, at the cluster's port) on
    ``promoter.store``, and nowhere the password."""
    assert BIN is not None
    repo = init_repo(tmp_path / "w", {"a.txt": b"1\n"})
    with own_postgres(BIN) as server:
        url = server.url.replace("postgres@", f"postgres:{SECRET}@", 1)
        assert SECRET in url
        with (
            running_daemon(tmp_path / "s", {"work": repo}, database_url=url) as daemon,
            login(daemon) as browser,
        ):
            csrf = hidden(browser.get("/ui/operations").text)
            server.stop()
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                with httpx.Client(base_url=daemon.url) as stranger:
                    made_up = stranger.get(
                        "/v1/events", headers={"Authorization": "Bearer made-up"}
                    )
                    form = stranger.get("/ui/login")
                    named = stranger.post(
                        "/ui/login", data={"csrf": hidden(form.text), "token": "made-up"}
                    )
                with daemon.orchestrator() as orchestrator:
                    own = orchestrator.get("/v1/events")
                page = browser.get("/ui/operations")
                posted = browser.post("/ui/repositories/work/snapshots", data={"csrf": csrf})
            server.start()
        answers = {"made_up": made_up, "own": own, "named": named, "page": page}
        answers["posted"] = posted
        for name in ("made_up", "own"):
            problem = answers[name]
            assert (problem.status_code, problem.headers["Retry-After"]) == (503, "2"), name
            assert problem.json()["code"] == "database_unavailable", name
            assert problem.json()["detail"] == DETAIL, name
        for name in ("named", "page", "posted"):
            assert _says_the_database_does_not_answer(answers[name]), answers[name].text
        assert UNAVAILABLE in page.text and UNAVAILABLE in posted.text
        assert "<h1>Log in</h1>" in named.text
        for name, answer in answers.items():
            for secret in (SECRET, f"{server.port}", "127.0.0.1", "refused", "server at"):
                assert secret not in answer.text, (name, secret)
        reasons = [
            r.getMessage()
            for r in caplog.records
            if r.name == "promoter.store" and r.levelno == logging.WARNING
        ]
        refused = f'connection to server at "127.0.0.1", port {server.port} failed: Connection'
        assert any(
            line.startswith("the database cannot be reached: ") and refused in line
            for line in reasons
        ), reasons
        assert SECRET not in caplog.text


# The console (``/ui``): its pages and forms are not in the served contract. Each route
# is asked with every value its path parameters take here (every action, every download).
NOTE = "during the outage"


def _console_requests(app: FastAPI, fill: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Every console route of ``app`` as (method, concrete path): read from its routes, so
    a new page or form is asked too."""
    asked: list[tuple[str, str]] = []
    for route in iter_route_contexts(app.routes):
        template = route.path or ""
        if not isinstance(route.original_route, APIRoute) or not template.startswith("/ui"):
            continue  # the API's operations, and /ui/static's files (no ledger)
        paths = [template]
        for name in route.param_convertors:
            paths = [p.replace("{" + name + "}", value) for p in paths for value in fill[name]]
        asked += [(method, path) for method in sorted(route.methods or ()) for path in paths]
    return asked


def _says_the_database_does_not_answer(answer: httpx.Response) -> bool:
    """A console page, 503 with ``Retry-After``, that names ``database_unavailable`` with
    the outage's one detail (never the driver's words) and is not headed "Refused"."""
    return (
        answer.status_code == 503
        and answer.headers.get("Retry-After") == "2"
        and answer.headers.get("content-type", "").startswith("text/html")
        and answer.headers.get("Content-Security-Policy") == CSP
        and SAID in answer.text
        and "<h1>Refused</h1>" not in answer.text
    )


def _ledger_view(daemon: Daemon, repo: Path, operation_id: str) -> dict[str, Any]:
    """What a console form could change: the operation and its events, the snapshots,
    the hosts' epochs and states, the worktree's bytes and HEAD."""
    with daemon.operator() as api:
        operation = api.get(f"/v1/operations/{operation_id}").json()
        snapshots = api.get("/v1/repositories/work/snapshots").json()
        hosts = api.get("/v1/hosts").json()["hosts"]
    return {
        "operation": (operation["status"], [e["kind"] for e in operation["events"]]),
        "operations": _operation_ids(daemon),
        "snapshots": [s["tree"] for s in snapshots["snapshots"]],
        "hosts": {h["host_id"]: (h["status"], h["epoch"]) for h in hosts},
        "worktree": tree_bytes(repo),
        "head": head(repo),
    }


def _operation_ids(daemon: Daemon) -> list[str]:
    with daemon.operator() as api:
        return sorted(o["operation_id"] for o in api.get("/v1/operations").json()["operations"])


def _credentials(daemon: Daemon, *argv: str) -> str:
    """``promoter credentials ...`` on the daemon's state and ledger; its output."""
    app = typer.Typer()
    credentials_cmd.register(app)
    state = ["--state-dir", str(daemon.state_dir)]
    done = CliRunner().invoke(app, ["credentials", *argv, *state])
    assert done.exit_code == 0, done.output
    return done.stdout


@contextmanager
def _gated_on_own_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[OwnPostgres, Daemon, Path, str]]:
    """A daemon on a cluster of the test's own whose repository ``work`` awaits approval,
    and one promotion held in it (its operation id); the CLI is pointed at that ledger."""
    assert BIN is not None
    repo = init_repo(tmp_path / "w", {"src/app.py": OLD})
    config = RepositoryConfig(path=repo, approval="required")
    with (
        own_postgres(BIN) as server,
        running_daemon(tmp_path / "s", {"work": config}, database_url=server.url) as daemon,
    ):
        monkeypatch.setenv("PROMOTER_DATABASE_URL", server.url)
        identity = daemon.services.registry.by_name("work").identity
        operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
        try:
            yield server, daemon, repo, operation_id
        finally:
            server.start_if_stopped()


@pytest.mark.slow
def test_every_console_page_and_form_says_the_database_does_not_answer_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A logged-in console, its database stopped: every page and every form of it (read
    from the app's routes; each form with the session's CSRF token and the fields its
    page sends) answers a 503 page naming ``database_unavailable`` with ``Retry-After``,
    never a 500 and never a traceback in the log; the login page still shows its form,
    and saying so to a browser that holds a session; logging in, with the host's own
    token or a named credential, says the database does not answer (not that the token
    is wrong). Started again: nothing any form posted was recorded (the approval, the
    snapshot, the fence, the logout), the worktree is as it was, and the same session
    approves the held promotion, which completes."""
    with _gated_on_own_postgres(tmp_path, monkeypatch) as (server, daemon, repo, operation_id):
        me = daemon.services.owner.host
        with daemon.services.db.session() as session:
            identity = daemon.services.registry.by_name("work").identity
            hosts.register(session, "host-dead", [identity], "2000-01-01T00:00:00Z")
        with daemon.operator() as api:
            tree = api.post("/v1/repositories/work/snapshots", json={}).json()["tree"]
        erin = _credentials(daemon, "add", "erin").strip()
        fill = {
            "operation_id": [operation_id],
            "action": sorted(ACTIONS),
            "which": list(RECEIPTS),
            "name": ["work"],
            "tree": [tree],
            "host": ["host-dead"],
        }
        form = {
            "note": NOTE,
            "fence": "1",
            "decision": "accept_current",
            "to": me,
            "label": NOTE,
            "expected_current_tree": tree,
            "all_seen": "on",
        }
        before = _ledger_view(daemon, repo, operation_id)
        asked = _console_requests(daemon.app, fill)
        assert ("POST", f"/ui/operations/{operation_id}/approve") in asked
        assert ("POST", "/ui/hosts/host-dead/fence") in asked
        assert ("POST", f"/ui/operations/{operation_id}/merge") in asked
        with login(daemon) as browser:
            csrf = hidden(browser.get("/ui/review").text)
            server.stop()
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                wrong = []
                for method, path in asked:
                    if method == "GET":
                        answer = browser.get(path, params={"path": "src/app.py"})
                        if path == "/ui" and answer.is_redirect:  # to the operations
                            answer = browser.get(answer.headers["location"])
                    elif path == "/ui/login":
                        nonce = hidden(browser.get("/ui/login").text)
                        token = daemon.operator_token
                        answer = browser.post(path, data={"csrf": nonce, "token": token})
                    else:
                        answer = browser.request(method, path, data={"csrf": csrf, **form})
                    if not _says_the_database_does_not_answer(answer):
                        wrong.append((method, path, answer.status_code, answer.text[-300:]))
                assert wrong == []
                style = browser.get("/ui/static/console.css")  # the pages' one stylesheet
                assert style.status_code == 200 and style.content

                with httpx.Client(base_url=daemon.url) as stranger:
                    page = stranger.get("/ui/login")  # no session: the form, nothing read
                    assert page.status_code == 200 and 'name="token"' in page.text
                    named = stranger.post(
                        "/ui/login", data={"csrf": hidden(page.text), "token": erin}
                    )
                assert _says_the_database_does_not_answer(named), named.text
                assert "That token is not valid" not in named.text
            logged = [  # a 503's access line is logged at ERROR: any other line is not
                r.getMessage()
                for r in caplog.records
                if r.exc_info or (r.levelno >= logging.ERROR and r.name != "promoter.access")
            ]
            assert logged == []
            failed = [r.getMessage() for r in caplog.records if r.name == "promoter.access"]
            assert failed and all(line.endswith(" 503") for line in failed)  # never a 500
            assert "Traceback" not in caplog.text

            server.start()
            assert _ledger_view(daemon, repo, operation_id) == before
            still = browser.get("/ui/review")  # the logout posted in the outage did nothing
            assert still.status_code == 200 and hidden(still.text) == csrf
            approved = browser.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
            assert approved.status_code == 303, approved.text
        assert (repo / "src/app.py").read_bytes() == NEW
        with daemon.operator() as api:
            view = api.get(f"/v1/operations/{operation_id}").json()
        assert view["status"] == "completed"
        decided = [e["payload"] for e in view["events"] if e["kind"] == "decision"]
        approvals = [(d["approval"], d["by"]) for d in decided if "approval" in d]
        assert approvals == [("approved", {"role": "operator", "name": "operator"})]


@pytest.mark.slow
def test_a_console_session_revoked_before_an_outage_is_not_accepted_during_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named credential logs in to the console and is removed; then the database stops.
    Its session's cookie and CSRF token, presented during the outage, open no page (a
    503 page naming ``database_unavailable``, without the session's navigation or form
    token) and record no approval: the check fails closed. Started again, the session is
    still ended: its pages send it to the login and its approval is 401."""
    with _gated_on_own_postgres(tmp_path, monkeypatch) as (server, daemon, repo, operation_id):
        dana = _credentials(daemon, "add", "dana").strip()
        before = _ledger_view(daemon, repo, operation_id)
        with login(daemon, dana) as browser:
            csrf = hidden(browser.get("/ui/review").text)
            _credentials(daemon, "remove", "dana")
            server.stop()
            refused = [
                browser.get("/ui/review"),
                browser.get(f"/ui/operations/{operation_id}"),
                browser.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf}),
            ]
            for answer in refused:
                assert _says_the_database_does_not_answer(answer), answer.text
                assert csrf not in answer.text and "/ui/logout" not in answer.text
                assert "src/app.py" not in answer.text
            server.start()
            assert _ledger_view(daemon, repo, operation_id) == before
            page = browser.get("/ui/review")
            assert (page.status_code, page.headers["location"]) == (303, "/ui/login")
            post = browser.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
            assert post.status_code == 401
        assert _ledger_view(daemon, repo, operation_id) == before
