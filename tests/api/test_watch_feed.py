"""The watch feed (``GET /v1/events``) and an operation's wait, through the real daemon.

A watcher long-polls the feed from a cursor and must see every ledger event of a
promotion, of an operator's rollback and of a recovery after SIGKILL exactly once and in
the ledger's order, also across a daemon restart with the saved cursor. Waits end
because an event arrived (the daemon wakes its long-polls on commit), never because a
test slept.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.daemon import Daemon
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import promote, submit

WAIT = 60


def _watch_until(
    client: httpx.Client, cursor: str | None, done: Callable[[list[dict[str, Any]]], bool]
) -> tuple[list[dict[str, Any]], str]:
    """Long-poll the feed from ``cursor`` until ``done(events so far)``."""
    seen: list[dict[str, Any]] = []
    while not done(seen):
        params: dict[str, Any] = {"wait": WAIT}
        if cursor is not None:
            params["after"] = cursor
        answer = client.get("/v1/events", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        seen += page["events"]
        cursor = page["cursor"]
    assert cursor is not None
    return seen, cursor


def _ledger(client: httpx.Client, operation_id: str) -> list[str]:
    return [e["event_id"] for e in client.get(f"/v1/operations/{operation_id}").json()["events"]]


def _events(seen: list[dict[str, Any]], operation_id: str) -> list[str]:
    """The ledger events among the feed's entries (status entries have no event id)."""
    return [e["event_id"] for e in seen if e["operation_id"] == operation_id and e["event_id"]]


def _reaches(operation_id: str | None, status: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda seen: any(
        operation_id in (None, e["operation_id"]) and e["status"] == status for e in seen
    )


def test_a_watcher_sees_every_event_of_a_promotion_and_a_rollback_once_in_order(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    with daemon.orchestrator() as orch:
        empty = orch.get("/v1/events").json()
        assert empty == {"events": [], "cursor": "evc_0000000000000000"}
        result: dict[str, Any] = {}

        def watch() -> None:
            with daemon.orchestrator() as watcher:
                result["seen"], result["cursor"] = _watch_until(
                    watcher, empty["cursor"], _reaches(None, "completed")
                )

        watcher = threading.Thread(target=watch)
        watcher.start()  # waits on the feed before anything happened
        _, bundle, receipt = submit(
            daemon, repo, identity, [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
        )
        view = promote(daemon, bundle, receipt).json()
        watcher.join(WAIT * 2)
        op_id = view["operation_id"]
        assert view["status"] == "completed"
        seen = result["seen"]
        assert _events(seen, op_id) == _ledger(orch, op_id)
        assert [e["kind"] for e in seen if e["event_id"]] == ["decision", "action", "outcome"]
        assert {(e["operation_id"], e["operation_kind"], e["repository"]) for e in seen} == {
            (op_id, "promotion", "work")
        }
        assert [(e["kind"], e["status"]) for e in seen] == [
            ("status", "in_progress"),  # requested and started in one transaction
            ("decision", "in_progress"),
            ("action", "in_progress"),
            # the outcome, its receipt and `completed` are one commit (the feed's one row)
            ("outcome", "completed"),
        ]
        assert (seen[-1]["kind"], seen[-1]["status"], seen[-1]["code"]) == (
            "outcome",
            "completed",
            None,
        )
        assert [e["cursor"] for e in seen] == sorted(e["cursor"] for e in seen)
        assert seen[-1]["cursor"] == result["cursor"]

        with daemon.operator() as op:
            assert op.post(f"/v1/operations/{op_id}/rollback").status_code == 200
        after, cursor = _watch_until(orch, result["cursor"], _reaches(op_id, "rolled_back"))
        rollback_id = next(e["operation_id"] for e in after if e["operation_id"] != op_id)
        assert _events(after, rollback_id) == _ledger(orch, rollback_id)
        assert _events(after, op_id) == _ledger(orch, op_id)[3:]
        assert _events(seen + after, op_id) == _ledger(orch, op_id)
        assert [e["status"] for e in after if e["operation_id"] == op_id][-1] == "rolled_back"
        # nothing new: an empty page once the (short) wait ends, the cursor unchanged
        quiet = orch.get("/v1/events", params={"after": cursor, "wait": 0}).json()
        assert quiet == {"events": [], "cursor": cursor}
        # from the start again: the same events in the same order, exactly once
        again = orch.get("/v1/events").json()
        assert [e["event_id"] for e in again["events"]] == [e["event_id"] for e in [*seen, *after]]


def test_the_feed_filters_by_repository_and_status_and_moves_the_cursor_past_the_rest(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(
        daemon, repo, identity, [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
    )
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"
    with daemon.orchestrator() as orch:
        other = orch.get("/v1/events", params={"repository": "elsewhere"}).json()
        everything = orch.get("/v1/events").json()
        assert other == {"events": [], "cursor": everything["cursor"]}
        done = orch.get("/v1/events", params={"status": "completed"}).json()["events"]
        assert [(e["kind"], e["status"]) for e in done] == [("outcome", "completed")]
        paged = orch.get("/v1/events", params={"limit": 1}).json()
        assert [e["event_id"] for e in paged["events"]] == [everything["events"][0]["event_id"]]
        assert paged["cursor"] == everything["events"][0]["cursor"]


@pytest.mark.parametrize(
    "cursor",
    [
        "evc_00000000000000zz",
        "evc_0000000000000001/../",
        "1",
        "evc_-000000000000001",
        "evc_" + "f" * 17,
        "EVC_0000000000000001",
    ],
)
def test_a_forged_cursor_is_refused_as_bad_request(daemon: Daemon, cursor: str) -> None:
    with daemon.orchestrator() as orch:
        answer = orch.get("/v1/events", params={"after": cursor})
    assert answer.status_code == 400
    assert answer.json()["code"] == "bad_request"


def test_an_executor_token_cannot_watch_the_feed(daemon: Daemon) -> None:
    with daemon.executor("run_watch") as ex:
        answer = ex.get("/v1/events")
    assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")


def test_an_operation_wait_returns_when_its_status_changes(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(
        daemon, repo, identity, [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
    )
    op_id = promote(daemon, bundle, receipt).json()["operation_id"]
    result: dict[str, Any] = {}

    def wait() -> None:
        with daemon.orchestrator() as orch:
            result["view"] = orch.get(
                f"/v1/operations/{op_id}", params={"wait": WAIT, "status": "completed"}
            ).json()

    waiter = threading.Thread(target=wait)
    waiter.start()
    with daemon.operator() as op:
        assert op.post(f"/v1/operations/{op_id}/rollback").status_code == 200
    waiter.join(WAIT * 2)
    assert result["view"]["status"] == "rolled_back"
    with daemon.orchestrator() as orch:  # a status already different answers at once
        view = orch.get(f"/v1/operations/{op_id}", params={"wait": WAIT, "status": "completed"})
        assert view.json()["status"] == "rolled_back"


FILES = {"src/a.py": b"a1\n", "src/b.py": b"b1\n"}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/a.py", b"a1\n", b"a2\n"),
    ("src/b.py", b"b1\n", b"b2\n"),
]


@pytest.mark.slow
def test_a_watcher_sees_a_recovery_after_sigkill_once_across_a_restart_with_its_cursor(
    tmp_path: Path,
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults="after_replace=kill")
    try:
        request = prepare_promotion(first, repo, CHANGES)
        with first.client() as orch:
            saved = orch.get("/v1/events").json()["cursor"]  # the watcher's saved cursor
            with contextlib.suppress(httpx.HTTPError):
                orch.post("/v1/promotions", json=request)  # the daemon dies mid-request
        assert first.wait_exit() == 137
    finally:
        first.kill()

    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client() as orch:
            before, cursor = _watch_until(orch, saved, _reaches(None, "needs_recovery"))
            op_id = before[0]["operation_id"]
            assert [e["kind"] for e in before if e["event_id"]] == ["decision", "action"]
            recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert recovered.status_code == 200, recovered.text
            after, cursor = _watch_until(orch, cursor, _reaches(op_id, "completed"))
            everything = [e["cursor"] for e in [*before, *after]]
            assert _events(before + after, op_id) == _ledger(orch, op_id)
            assert len(set(everything)) == len(everything)
    finally:
        second.stop()
    third = DaemonProcess(state, {"work": repo})  # a restart: the cursor still resumes
    try:
        with third.client() as orch:
            assert orch.get("/v1/events", params={"after": cursor}).json() == {
                "events": [],
                "cursor": cursor,
            }
            replay = orch.get("/v1/events", params={"after": saved}).json()["events"]
            assert [e["cursor"] for e in replay] == everything
    finally:
        third.stop()
