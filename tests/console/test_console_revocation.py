"""Removing a credential ends what it holds open (TESTS E4, protocol: api#work-bounded-per-caller,
hosts#one-set-of-credentials).

``promoter credentials remove NAME`` used to refuse the token on its next API request
while the console session made with it lived on: it approved a held promotion after the
removal, and the promotion completed. Here a named credential logs in to the console and
opens a long-poll of the watch feed (held at the fault point ``long_poll_probe`` of its
second read, so it is provably waiting when the credential goes); the credential is
removed; its sessions leave the ledger with it; the session's next request (an approval,
with a valid CSRF token) is refused, no decision is recorded and nothing is written; the
long-poll ends ``401``. A login paused at ``console_session_open`` while the credential is
removed stores its session after the removal: that session's first use is refused. A
session also ends at its absolute lifetime however much it is used (an injected clock: no
sleep).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from promoter import faults
from promoter.api.ui.sessions import COOKIE, Sessions, csrf_of
from promoter.cli import credentials_cmd
from promoter.client.wire import tls_context
from promoter.store.db import Database
from promoter.store.tables import ConsoleSessionRow
from tests.console.support import NEW, OLD, held, hidden, login
from tests.support.daemon import Daemon
from tests.support.pause import Pause
from tests.support.promotion import tree_bytes

Gated = tuple[Daemon, Path, str]
BOUND = 60.0  # for a broken test only


def _credentials(daemon: Daemon, *argv: str) -> Any:
    app = typer.Typer()
    credentials_cmd.register(app)
    done = CliRunner().invoke(app, ["credentials", *argv, "--state-dir", str(daemon.state_dir)])
    assert done.exit_code == 0, done.output
    return done


def _decisions(daemon: Daemon, operation_id: str) -> tuple[str, list[dict[str, Any]]]:
    with daemon.operator() as operator:
        view = operator.get(f"/v1/operations/{operation_id}").json()
    return view["status"], [e for e in view["events"] if e["kind"] == "decision"]


def _session_rows(daemon: Daemon, name: str) -> int:
    """How many console sessions of the credential ``name`` the ledger holds."""
    with daemon.services.db.session() as session:
        return sum(1 for row in session.query(ConsoleSessionRow) if row.name == name)


def test_a_removed_credential_ends_its_console_session_and_its_long_poll(
    gated: Gated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    token = _credentials(daemon, "add", "dana").stdout.strip()

    with login(daemon, token) as browser, daemon.client(token) as api:
        review = browser.get(f"/ui/operations/{operation_id}")
        assert review.status_code == 200
        csrf = hidden(review.text)
        listed = json.loads(_credentials(daemon, "list", "--json").stdout)
        assert [len(listed["sessions"][n]) for n in ("operator", "dana")] == [0, 1]

        cursor = api.get("/v1/events").json()["cursor"]
        pause = Pause(tmp_path, "long_poll_probe", nth=2)
        monkeypatch.setenv(faults.ENV, pause.spec)
        faults.reset()
        polled: list[httpx.Response] = []
        poller = threading.Thread(
            target=lambda: polled.append(api.get(f"/v1/events?after={cursor}&wait=120"))
        )
        poller.start()
        try:
            pause.reached()  # read once, waited, and about to read again
            assert _session_rows(daemon, "dana") == 1
            _credentials(daemon, "remove", "dana")
            assert _session_rows(daemon, "dana") == 0  # gone with it, before any use
        finally:
            pause.release()
            poller.join(BOUND)
        assert not poller.is_alive()
        (ended,) = polled
        assert ended.status_code == 401, ended.text
        assert ended.json()["code"] == "unauthenticated"

        approve = browser.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": csrf, "note": "late"}
        )
        assert approve.status_code == 401
        assert "unauthenticated" in approve.text
        assert browser.get("/ui/operations").status_code == 303  # back to the login form
        assert api.get("/v1/operations").status_code == 401

    assert _decisions(daemon, operation_id) == ("awaiting_approval", [])
    assert tree_bytes(repo) == before
    listed = json.loads(_credentials(daemon, "list", "--json").stdout)
    assert listed == {"operators": ["operator"], "sessions": {"operator": []}}


def test_a_login_racing_the_removal_stores_a_session_its_first_use_refuses(
    gated: Gated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    token = _credentials(daemon, "add", "hal").stdout.strip()
    pause = Pause(tmp_path, "console_session_open")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()
    with httpx.Client(base_url=daemon.url, timeout=60, verify=tls_context(daemon.url)) as browser:
        form = browser.get("/ui/login")
        answers: list[httpx.Response] = []
        login_thread = threading.Thread(
            target=lambda: answers.append(
                browser.post("/ui/login", data={"csrf": hidden(form.text), "token": token})
            )
        )
        login_thread.start()
        try:
            pause.reached()  # the token authenticated, its session not stored yet
            _credentials(daemon, "remove", "hal")
        finally:
            pause.release()
            login_thread.join(BOUND)
        assert not login_thread.is_alive()
        (answer,) = answers
        assert answer.status_code == 303, answer.text
        assert _session_rows(daemon, "hal") == 1  # stored after the removal ended the others

        session_id = browser.cookies[COOKIE]
        approve = browser.post(
            f"/ui/operations/{operation_id}/approve",
            data={"csrf": csrf_of(session_id), "note": "raced"},
        )
        assert approve.status_code == 401, approve.text
        assert "unauthenticated" in approve.text
        assert _session_rows(daemon, "hal") == 0
        assert browser.get("/ui/operations").status_code == 303

    assert _decisions(daemon, operation_id) == ("awaiting_approval", [])
    assert tree_bytes(repo) == before


def test_a_credential_removed_and_added_again_does_not_revive_the_old_session(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    first = _credentials(daemon, "add", "eli").stdout.strip()
    with login(daemon, first) as old, login(daemon) as trusted:
        csrf = hidden(old.get(f"/ui/operations/{operation_id}").text)
        _credentials(daemon, "remove", "eli")
        second = _credentials(daemon, "add", "eli").stdout.strip()
        assert second != first
        refused = old.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
        assert refused.status_code == 401
        assert _decisions(daemon, operation_id) == ("awaiting_approval", [])
        # the trusted operator's session is not the removed credential's: it goes on
        page = trusted.get(f"/ui/operations/{operation_id}")
        assert page.status_code == 200
    with login(daemon, second) as renewed:
        page = renewed.get(f"/ui/operations/{operation_id}")
        assert page.status_code == 200


ENDED = "Your session ended because its credential was revoked. Log in again."


def test_the_login_page_says_a_revoked_session_ended_to_that_browser_only(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    token = _credentials(daemon, "add", "ivy").stdout.strip()
    other = _credentials(daemon, "add", "joe").stdout.strip()
    with (
        login(daemon, token) as revoked,
        login(daemon, other) as closed,
        login(daemon) as trusted,
        httpx.Client(base_url=daemon.url, timeout=60, verify=tls_context(daemon.url)) as stranger,
    ):
        csrf = hidden(revoked.get(f"/ui/operations/{operation_id}").text)
        stolen = revoked.cookies[COOKIE]
        closed.post("/ui/logout", data={"csrf": hidden(closed.get("/ui/operations").text)})
        assert ENDED not in revoked.get("/ui/login").text  # live: nothing to say
        _credentials(daemon, "remove", "ivy")

        bounced = revoked.get("/ui/operations")
        assert (bounced.status_code, bounced.headers["location"]) == (303, "/ui/login")
        page = revoked.get("/ui/login")
        assert page.status_code == 200
        assert f'<p class="message" id="message">{ENDED}</p>' in page.text
        approve = revoked.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": csrf, "note": "late"}
        )
        assert approve.status_code == 401
        assert "your session ended because its credential was revoked; log in again" in (
            approve.text
        )
        # nobody else learns anything: no cookie, another's cookie, a closed session's
        assert 'id="message"' not in stranger.get("/ui/login").text
        stranger.cookies.set(COOKIE, stolen[:-2] + ("AA" if stolen[-2:] != "AA" else "BB"))
        assert 'id="message"' not in stranger.get("/ui/login").text
        assert 'id="message"' not in closed.get("/ui/login").text
        assert 'id="message"' not in trusted.get("/ui/login").text
        assert trusted.get("/ui/operations").status_code == 200

        relogged = revoked.post(
            "/ui/login", data={"csrf": hidden(page.text), "token": daemon.operator_token}
        )
        assert relogged.status_code == 303
        assert 'id="message"' not in revoked.get("/ui/login").text  # a new, live session
    assert _decisions(daemon, operation_id) == ("awaiting_approval", [])


def test_a_session_ends_at_its_absolute_lifetime_however_much_it_is_used(
    ledger: Database,
) -> None:
    now = [1000.0]
    table = Sessions(ledger, clock=lambda: now[0], idle_seconds=100.0, lifetime_seconds=300.0)
    busy = table.open("operator", "fay", "digest")
    assert table.listing() == [
        {"name": "fay", "role": "operator", "opened_at": 1000.0, "expires_at": 1300.0}
    ]
    for second in range(60, 300, 60):  # used every minute: never idle
        now[0] = 1000.0 + second
        assert table.get(busy.session_id) is not None, second
    now[0] = 1299.0
    assert table.get(busy.session_id) is not None
    now[0] = 1300.0
    assert table.get(busy.session_id) is None
    assert table.listing() == []


def test_ending_a_credential_ends_only_its_sessions(ledger: Database) -> None:
    table = Sessions(ledger)
    mine = [table.open("operator", "gus"), table.open("operator", "gus")]
    other = table.open("operator", "operator")
    assert table.end_credential("gus") == 2
    assert all(table.get(s.session_id) is None for s in mine)
    assert table.get(other.session_id) is not None
