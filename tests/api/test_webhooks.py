"""Webhooks through the real daemon to a real receiver on loopback.

The receiver records each POST and wakes the test on a condition; retries are driven by
the dispatcher's ``clock``, which the test replaces and moves, and ``kick`` (never by
sleeping). Deliveries must be signed (verified here with the subscriber's secret), in
feed order, retried with the same delivery id while the receiver is down, kept in the
database across a daemon restart, never sent to a redirect's target, and a subscriber
that keeps failing is paused and shown in the metrics.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from promoter import faults
from promoter.adapters.webhooks.dispatcher import Dispatcher
from promoter.config import WebhookConfig
from promoter.engine.webhooks import signature, verify
from promoter.store import feed
from tests.support.daemon import Daemon, running_daemon
from tests.support.pause import Pause
from tests.support.promotion import promote, submit

SECRET = "whsec_" + "k" * 32
BOUND = 60.0
LOOPBACK = ["127.0.0.1"]  # the receivers' address, allowed by name (the policy refuses it)
CHANGE = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Receiver:
    """A loopback HTTP server: answers ``status`` (and ``location``), records each POST."""

    def __init__(self) -> None:
        self.status = 200
        self.location: str | None = None
        self.posts: list[tuple[dict[str, str], bytes, int]] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status = receiver.status
                self.send_response(status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.changed:
                    receiver.posts.append((dict(self.headers.items()), data, status))
                    receiver.changed.notify_all()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, count: int) -> list[tuple[dict[str, str], bytes, int]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.posts) >= count, BOUND), self.posts
            return list(self.posts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    try:
        yield running
    finally:
        running.close()


@contextmanager
def _daemon(
    tmp_path: Path, repo: Path, receiver: Receiver, **config: Any
) -> Iterator[tuple[Daemon, Dispatcher, Clock]]:
    hook = WebhookConfig(url=receiver.url, secret=SECRET, **config)
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        webhooks={"orch": hook},
        webhook_allowed_targets=LOOPBACK,
    ) as daemon:
        clock = Clock()
        dispatcher: Dispatcher = daemon.services.webhooks
        dispatcher.clock = clock
        yield daemon, dispatcher, clock


def _feed(daemon: Daemon) -> list[dict[str, Any]]:
    with daemon.orchestrator() as orch:
        return list(orch.get("/v1/events").json()["events"])


def _queued(daemon: Daemon, dispatcher: Dispatcher) -> int:
    """Wait until the dispatcher has queued every feed entry for "orch" (a round after the
    one that paused it may still be queueing the last ones); how many the feed holds."""
    entries = _feed(daemon)
    assert dispatcher.wait_queued("orch", feed.position(entries[-1]["cursor"]), BOUND)
    return len(entries)


def _checked(post: tuple[dict[str, str], bytes, int], now: float) -> dict[str, Any]:
    headers, data, _ = post
    assert headers["Content-Type"] == "application/json"
    assert verify(SECRET, headers["Promoter-Signature"], data, now)
    assert headers["Promoter-Timestamp"] == headers["Promoter-Signature"][2:].split(",")[0]
    body: dict[str, Any] = json.loads(data)
    assert body["delivery_id"] == headers["Promoter-Delivery"]
    assert body["subscriber"] == "orch"
    return body


def test_a_receiver_gets_every_feed_entry_signed_in_order(
    tmp_path: Path, repo: Path, identity: str, receiver: Receiver
) -> None:
    with _daemon(tmp_path, repo, receiver) as (daemon, _, clock):
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        entries = _feed(daemon)
        posts = receiver.wait_for(len(entries))
        bodies = [_checked(post, clock.now) for post in posts]
        assert [b["entry"] for b in bodies] == entries
        assert len({b["delivery_id"] for b in bodies}) == len(entries)


def test_deliveries_survive_the_receivers_downtime_with_the_same_delivery_id(
    tmp_path: Path, repo: Path, identity: str, receiver: Receiver
) -> None:
    receiver.status = 503
    with _daemon(tmp_path, repo, receiver) as (daemon, dispatcher, clock):
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        entries = _feed(daemon)
        first = receiver.wait_for(1)[0]
        assert first[2] == 503
        assert dispatcher.wait_recorded(1, BOUND)
        # the clock has not moved: no retry is due (the next attempt is a second later)
        receiver.status = 200
        clock.now += 1.0
        dispatcher.kick()
        posts = receiver.wait_for(1 + len(entries))
        delivered = [_checked(p, clock.now) for p in posts if p[2] == 200]
        assert [b["entry"] for b in delivered] == entries
        assert delivered[0]["delivery_id"] == _checked(first, clock.now)["delivery_id"]
        assert len(posts) == 1 + len(entries)


def test_the_queue_is_kept_across_a_daemon_restart(
    tmp_path: Path, repo: Path, identity: str, receiver: Receiver
) -> None:
    receiver.status = 500
    with _daemon(tmp_path, repo, receiver) as (daemon, _, _):
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        entries = _feed(daemon)
        receiver.wait_for(1)  # one failed attempt; the rest wait in the database
    receiver.status = 200
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        webhooks={"orch": WebhookConfig(url=receiver.url, secret=SECRET)},
        webhook_allowed_targets=LOOPBACK,
    ) as again:
        posts = receiver.wait_for(1 + len(entries))
        delivered = [json.loads(p[1]) for p in posts if p[2] == 200]
        assert [b["entry"] for b in delivered] == entries
        assert _feed(again) == entries


def test_a_redirect_is_not_followed_to_another_address(
    tmp_path: Path, repo: Path, identity: str, receiver: Receiver
) -> None:
    elsewhere = Receiver()
    try:
        receiver.status, receiver.location = 307, elsewhere.url
        with _daemon(tmp_path, repo, receiver, max_failures=1) as (daemon, dispatcher, _):
            _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
            assert promote(daemon, bundle, receipt).json()["status"] == "completed"
            assert receiver.wait_for(1)[0][2] == 307
            assert dispatcher.wait_recorded(1, BOUND)
            with daemon.client() as anyone:
                text = anyone.get("/metrics").text
            assert 'promoter_webhook_paused{subscriber="orch"} 1.0' in text
        assert elsewhere.posts == []
    finally:
        elsewhere.close()


def test_a_subscriber_that_keeps_failing_is_paused_and_shown_in_metrics(
    tmp_path: Path, repo: Path, identity: str, receiver: Receiver
) -> None:
    receiver.status = 500
    with _daemon(tmp_path, repo, receiver, max_failures=2) as (daemon, dispatcher, clock):
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"
        receiver.wait_for(1)
        assert dispatcher.wait_recorded(1, BOUND)
        clock.now += 1.0
        dispatcher.kick()
        receiver.wait_for(2)
        assert dispatcher.wait_recorded(2, BOUND)
        entries = _queued(daemon, dispatcher)
        with daemon.client() as anyone:
            text = anyone.get("/metrics").text
        assert 'promoter_webhook_paused{subscriber="orch"} 1.0' in text
        assert f'promoter_webhook_pending{{subscriber="orch"}} {entries}.0' in text


class _Held:
    """Holds one call of a dispatcher method, in its worker thread, until released: the
    first call made once ``attempts`` attempts are recorded."""

    def __init__(self, dispatcher: Dispatcher, method: str, attempts: int) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.dispatcher = dispatcher
        self.attempts = attempts
        self.original = getattr(dispatcher, method)
        setattr(dispatcher, method, self)

    def __call__(self, *args: Any) -> Any:
        if self.dispatcher.attempts >= self.attempts and not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(BOUND)
        return self.original(*args)


def _metric(daemon: Daemon, name: str) -> str:
    with daemon.client() as anyone:
        text = anyone.get("/metrics").text
    return next(
        line for line in text.splitlines() if line.startswith(f'{name}{{subscriber="orch"}}')
    )


def test_the_round_that_pauses_a_subscriber_may_queue_before_the_outcome_the_next_one_does(
    tmp_path: Path,
    repo: Path,
    identity: str,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interleaving behind a pending gauge one short: the round after the first
    failure queues before the outcome is committed and sends once the clock has moved,
    so the subscriber is paused with the outcome not yet queued; the round after it
    queues the outcome (a paused subscriber still gets its rows, no later event needed)."""
    receiver.status = 500
    with _daemon(tmp_path, repo, receiver, max_failures=2) as (daemon, dispatcher, clock):
        before_outcome = Pause(tmp_path, "before_receipt")
        monkeypatch.setenv(faults.ENV, before_outcome.spec)
        faults.reset()
        first_failure = _Held(dispatcher, "record", attempts=0)
        second_send = _Held(dispatcher, "head", attempts=1)  # its enqueue has run
        after_pause = _Held(dispatcher, "enqueue", attempts=2)
        try:
            _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
            answers: list[str] = []
            promoting = threading.Thread(
                target=lambda: answers.append(promote(daemon, bundle, receipt).json()["status"])
            )
            promoting.start()
            try:
                before_outcome.reached()  # the plan's events are in the feed, not the outcome
                assert first_failure.entered.wait(BOUND)
                first_failure.go.set()  # the next round queues now: without the outcome
                assert second_send.entered.wait(BOUND)
            finally:
                before_outcome.release()
                promoting.join(BOUND)
            assert answers == ["completed"]
            clock.now += 1.0
            dispatcher.kick()
            second_send.go.set()
            receiver.wait_for(2)
            assert dispatcher.wait_recorded(2, BOUND)
            assert after_pause.entered.wait(BOUND)
            entries = _feed(daemon)
            assert [entry["kind"] for entry in entries][-1] == "outcome"
            # read now, as the test above once did: the outcome is not a delivery row yet
            assert _metric(daemon, "promoter_webhook_paused").endswith(" 1.0")
            assert _metric(daemon, "promoter_webhook_pending").endswith(f" {len(entries) - 1}.0")
            after_pause.go.set()
            assert _queued(daemon, dispatcher) == len(entries)
            assert _metric(daemon, "promoter_webhook_pending").endswith(f" {len(entries)}.0")
        finally:  # a failed assertion must not leave a worker thread held
            first_failure.go.set()
            second_send.go.set()
            after_pause.go.set()


def test_a_worker_without_the_dispatcher_still_exports_the_queue_s_gauges(
    tmp_path: Path, repo: Path, receiver: Receiver
) -> None:
    config: dict[str, Any] = {
        "webhooks": {"orch": WebhookConfig(url=receiver.url, secret=SECRET)},
        "webhook_allowed_targets": LOOPBACK,
    }
    with running_daemon(tmp_path / "state", {"work": repo}, **config):
        pass  # worker 0: its dispatcher gives the subscriber its place in the queue
    with running_daemon(tmp_path / "state", {"work": repo}, primary=False, **config) as daemon:
        assert daemon.services.webhooks is None  # worker 0 delivers, not this one
        with daemon.client() as anyone:
            text = anyone.get("/metrics").text.splitlines()
    assert 'promoter_webhook_paused{subscriber="orch"} 0.0' in text
    assert 'promoter_webhook_pending{subscriber="orch"} 0.0' in text


def test_a_tampered_body_a_wrong_secret_or_a_replayed_timestamp_fails_verification() -> None:
    body = b'{"delivery_id":"whd_1"}'
    header = signature(SECRET, 1000, body)
    assert verify(SECRET, header, body, 1000)
    assert not verify(SECRET, header, body + b" ", 1000)
    assert not verify("another secret of length", header, body, 1000)
    assert not verify(SECRET, header, body, 1000 + 301)
    assert not verify(SECRET, "t=1000,v1=" + "0" * 64, body, 1000)
    assert not verify(SECRET, "v1=" + header.split("v1=")[1], body, 1000)
    expected = hmac.new(SECRET.encode(), b"1000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1000,v1={expected}"
