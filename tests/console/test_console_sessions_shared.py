"""Console sessions in the ledger: every serving process serves every logged-in browser
(protocol: api#console-sessions).

Two daemons on one ledger and one state directory, reached on their own addresses, stand
for two workers of ``serve --workers N`` (which one the kernel hands a connection to is
not the test's to choose); two with a state directory each on one ledger stand for two
hosts. A session opened through one is accepted by the other, its CSRF token is the
same there and still checked, and removing its credential ends it on both. The ledger holds only the id's sha256: a row read from it (a backup's copy) opens
nothing. Idle and lifetime ends are on an injected clock, shared by two tables over one
ledger: no sleep and no wall clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import typer
from sqlalchemy import text
from typer.testing import CliRunner

from promoter.api.ui.sessions import COOKIE, TOUCH_SECONDS, Sessions, csrf_of, id_sha256
from promoter.cli import credentials_cmd
from promoter.client.wire import tls_context
from promoter.config import RepositoryConfig
from promoter.store.db import Database
from tests.console.support import NEW, OLD, held, hidden, login
from tests.support.daemon import Daemon
from tests.support.databases import own_url
from tests.support.fixtures import Gated, Serve
from tests.support.promotion import tree_bytes


def _twin(serve: Serve, gated: Gated) -> Daemon:
    """A second daemon on the gated daemon's ledger and state directory."""
    config = RepositoryConfig(path=gated.repo, approval="required")
    return serve({"gated": config}, gated.daemon.state_dir.name)


def _browser(daemon: Daemon, session_id: str) -> httpx.Client:
    """A client of ``daemon`` presenting ``session_id`` as its console cookie."""
    return httpx.Client(
        base_url=daemon.url,
        timeout=60,
        verify=tls_context(daemon.url),
        cookies={COOKIE: session_id},
    )


def _credentials(daemon: Daemon, *argv: str) -> Any:
    app = typer.Typer()
    credentials_cmd.register(app)
    done = CliRunner().invoke(app, ["credentials", *argv, "--state-dir", str(daemon.state_dir)])
    assert done.exit_code == 0, done.output
    return done


def _status(daemon: Daemon, operation_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The operation's status and the operator's decisions on it (those with a note)."""
    with daemon.operator() as operator:
        view = operator.get(f"/v1/operations/{operation_id}").json()
    decided = [e["payload"] for e in view["events"] if e["kind"] == "decision"]
    return view["status"], [d for d in decided if "note" in d]


def test_a_session_opened_on_one_worker_is_served_by_another_and_ended_on_both(
    gated: Gated, serve: Serve
) -> None:
    first, repo, identity = gated
    second = _twin(serve, gated)
    operation_id = held(first, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    token = _credentials(first, "add", "dana").stdout.strip()

    with login(first, token) as browser:
        session_id = browser.cookies[COOKIE]
        csrf = hidden(browser.get(f"/ui/operations/{operation_id}").text)
    assert csrf == csrf_of(session_id)
    with _browser(second, session_id) as other:
        page = other.get(f"/ui/operations/{operation_id}")
        assert page.status_code == 200
        assert hidden(page.text) == csrf
        # the CSRF token is still checked on the worker that did not log the browser in
        missing = other.post(f"/ui/operations/{operation_id}/approve", data={"note": "n"})
        forged = other.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": csrf[:-1] + "x"}
        )
        assert (missing.status_code, forged.status_code) == (403, 403)
        assert _status(first, operation_id) == ("awaiting_approval", [])
        listed = json.loads(_credentials(first, "list", "--json").stdout)
        assert [len(listed["sessions"][n]) for n in ("operator", "dana")] == [0, 1]

        _credentials(second, "remove", "dana")
        late = other.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
        assert late.status_code == 401
        assert other.get("/ui/operations").status_code == 303
    with _browser(first, session_id) as again:
        assert again.get("/ui/operations").status_code == 303
        late = again.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
        assert late.status_code == 401
    assert _status(first, operation_id) == ("awaiting_approval", [])
    assert tree_bytes(repo) == before
    listed = json.loads(_credentials(second, "list", "--json").stdout)
    assert listed == {"operators": ["operator"], "sessions": {"operator": []}}


def test_an_approval_made_on_another_worker_is_the_sessions_and_logout_ends_it_on_both(
    gated: Gated, serve: Serve
) -> None:
    first, repo, identity = gated
    second = _twin(serve, gated)
    operation_id = held(first, repo, identity, [("src/app.py", OLD, NEW)])
    with login(first) as browser:
        session_id = browser.cookies[COOKIE]
        csrf = hidden(browser.get(f"/ui/operations/{operation_id}").text)
        with _browser(second, session_id) as other:
            approved = other.post(
                f"/ui/operations/{operation_id}/approve", data={"csrf": csrf, "note": "ok"}
            )
            assert approved.status_code == 303, approved.text
            assert (repo / "src" / "app.py").read_bytes() == NEW
            status, (decision,) = _status(first, operation_id)
            assert (status, decision["note"]) == ("completed", "ok")
            assert decision["by"] == {"name": "operator", "role": "operator"}
            logout = other.post("/ui/logout", data={"csrf": csrf})
            assert logout.status_code == 303
        assert browser.get("/ui/operations").status_code == 303


def test_a_session_row_read_from_the_ledger_opens_nothing(gated: Gated) -> None:
    daemon = gated.daemon
    with login(daemon) as browser:
        session_id = browser.cookies[COOKIE]
        assert browser.get("/ui/operations").status_code == 200
    with daemon.services.db.session() as session:
        rows = [dict(r._mapping) for r in session.execute(text("SELECT * FROM console_sessions"))]
    (row,) = rows
    assert row["session_sha256"] == id_sha256(session_id)
    assert row["name"] == "operator"
    stored = json.dumps(rows, default=str)
    assert session_id not in stored
    assert csrf_of(session_id) not in stored
    if daemon.services.db.engine.dialect.name == "sqlite":  # nor anywhere in its files
        files = sorted(daemon.state_dir.rglob("*.db*"))
        assert files
        assert all(session_id.encode() not in path.read_bytes() for path in files)
    for stolen in (row["session_sha256"], row["credential_sha256"]):
        with _browser(daemon, stolen) as thief:
            assert thief.get("/ui/operations").status_code == 303
            refused = thief.post("/ui/logout", data={"csrf": csrf_of(stolen)})
            assert refused.status_code == 401


def test_idle_and_lifetime_ends_hold_across_workers_on_one_clock(ledger: Database) -> None:
    now = [10_000.0]
    one, other = (
        Sessions(ledger, clock=lambda: now[0], idle_seconds=300.0, lifetime_seconds=900.0)
        for _ in range(2)
    )
    idle, busy = one.open("operator", "ivy", "d1"), one.open("operator", "jo", "d2")
    assert other.get(idle.session_id) == idle
    # used on one worker, then the other: each use older than TOUCH_SECONDS is written
    for step in range(1, 15):
        now[0] = 10_000.0 + step * TOUCH_SECONDS
        table = one if step % 2 else other
        assert table.get(busy.session_id) is not None, step
    assert one.get(idle.session_id) is None  # unused for 300 s: ended, whoever asks
    assert [s["name"] for s in other.listing()] == ["jo"]
    now[0] = 10_899.0
    assert other.get(busy.session_id) is not None
    now[0] = 10_900.0  # the lifetime's end, however much it is used
    assert one.get(busy.session_id) is None
    assert other.get(busy.session_id) is None
    assert other.listing() == []


def test_a_use_is_written_at_most_once_a_minute(ledger: Database) -> None:
    now = [5_000.0]
    one, other = (Sessions(ledger, clock=lambda: now[0], idle_seconds=100.0) for _ in range(2))
    opened = one.open("operator")
    now[0] = 5_000.0 + TOUCH_SECONDS - 1  # a use not written: the idle end stays at 5100
    assert one.get(opened.session_id) is not None
    now[0] = 5_099.0
    seen = other.get(opened.session_id)
    assert seen is not None
    assert seen.last_used == 5_000.0
    now[0] = 5_100.0 + TOUCH_SECONDS  # the use at 5099 was written: idle until 5199
    assert other.get(opened.session_id) is not None


def test_a_session_opened_on_one_host_is_served_by_another_host_of_the_ledger(
    serve: Serve, tmp_path: Path
) -> None:
    url = own_url(tmp_path, "shared.db")
    one = serve({}, "one", host_id="host-one", database_url=url)
    other = serve({}, "other", host_id="host-two", database_url=url)
    assert one.operator_token != other.operator_token
    with login(one) as browser:
        session_id = browser.cookies[COOKIE]
    with _browser(other, session_id) as elsewhere:
        assert elsewhere.get("/ui/operations").status_code == 200
        logout = elsewhere.post("/ui/logout", data={"csrf": csrf_of(session_id)})
        assert logout.status_code == 303
    with _browser(one, session_id) as again:
        assert again.get("/ui/operations").status_code == 303
