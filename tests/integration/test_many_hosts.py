"""Three daemons, three hosts, one PostgreSQL ledger (the PostgreSQL pass of the suite).

Each daemon is its own process with its own host id, state directory and repositories;
they share the test's database (``PROMOTER_DATABASE_URL``). Checked: concurrent lease
updates from all three never leave a lower fence behind; a run whose lease loses to
another host's leaves its grant registered nowhere; a promotion on host A is
readable, with its receipt, from B and C; a promotion killed on A is never claimed by B,
also across B's restart, and A recovers it when it comes back.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.flows import init_repo, make_grant, make_lease
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion

pytestmark = pytest.mark.postgresql_only

V1, V2 = b"one\n", b"two\n"


def _host(tmp_path: Path, name: str, repos: dict[str, Path], faults: str = "") -> DaemonProcess:
    return DaemonProcess(
        tmp_path / f"state-{name}",
        repos,
        faults=faults,
        extra_env={"PROMOTER_HOST_ID": f"host-{name}"},
    )


@contextlib.contextmanager
def _hosts(tmp_path: Path, **repos: dict[str, Path]) -> Iterator[dict[str, DaemonProcess]]:
    started: dict[str, DaemonProcess] = {}
    try:
        for name, repositories in repos.items():
            started[name] = _host(tmp_path, name, repositories)
        yield started
    finally:
        for daemon in started.values():
            daemon.kill()


def _lease(fence: int) -> dict[str, object]:
    return make_lease(fence=fence)


def test_concurrent_lease_updates_from_three_hosts_never_regress_a_fence(
    tmp_path: Path,
) -> None:
    fences = list(range(1, 241))
    random.Random(7).shuffle(fences)  # a fixed order of requests, raced by six threads
    answers: dict[int, int] = {}
    with _hosts(tmp_path, a={}, b={}, c={}) as hosts:
        daemons = list(hosts.values())

        def worker(index: int) -> None:
            daemon = daemons[index % 3]
            with daemon.client() as orch:
                for fence in fences[index::6]:
                    answer = orch.put("/v1/leases/wf_race/stage", json=_lease(fence))
                    answers[fence] = answer.status_code
                    if answer.status_code != 200:
                        assert answer.json()["code"] == "lease_fence_regression", answer.text

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(answers) == sorted(fences)
    assert set(answers.values()) <= {200, 409}
    assert answers[max(fences)] == 200
    engine = create_engine(os.environ["PROMOTER_DATABASE_URL"])
    with engine.connect() as connection:
        final = connection.execute(
            text("SELECT fence FROM leases WHERE workflow_id = 'wf_race' AND stage = 'stage'")
        ).scalar_one()
    engine.dispose()
    assert final == max(fences)  # the last write was the highest fence, whoever made it


def test_a_lease_write_held_between_its_read_and_its_write_cannot_be_overtaken(
    tmp_path: Path,
) -> None:
    """A pauses after reading the lease (fence 5) to write 10; B then writes 20.

    With the row lock B waits for A's commit and then writes over it; without it B would
    commit first and A's 10 would land on top of 20 (a fence regression).
    """
    pause = Pause(tmp_path, "lease_compared", nth=2)
    a = _host(tmp_path, "a", {}, faults=pause.spec)
    b = _host(tmp_path, "b", {})
    answers: dict[str, int] = {}
    try:
        with a.client() as orch:
            assert orch.put("/v1/leases/wf_held/stage", json=_lease(5)).status_code == 200

        def put(daemon: DaemonProcess, name: str, fence: int) -> None:
            with daemon.client() as orch:
                answers[name] = orch.put("/v1/leases/wf_held/stage", json=_lease(fence)).status_code

        first = threading.Thread(target=put, args=(a, "a", 10))
        first.start()
        pause.reached()  # A has read fence 5 and holds the row
        second = threading.Thread(target=put, args=(b, "b", 20))
        second.start()
        _until_b_waits_or_answers(second)
        pause.release()
        first.join()
        second.join()
    finally:
        a.kill()
        b.kill()
    assert answers == {"a": 200, "b": 200}
    assert _fence("wf_held") == 20


def test_a_run_whose_lease_loses_to_another_host_registers_its_grant_nowhere(
    tmp_path: Path,
) -> None:
    """A holds the stage's lease row (fence 5) between its read and its write of 20; B's
    ``POST /v1/runs`` (fence 10) adds its grant row, then waits for the lease row, reads
    20 and is refused: the grant row it added is rolled back with it, no token is left,
    and B writes no grant document."""
    repo = init_repo(tmp_path / "work", {"src/app.txt": V1})
    pause = Pause(tmp_path, "lease_compared", nth=2)
    a = _host(tmp_path, "a", {}, faults=pause.spec)
    b = _host(tmp_path, "b", {"work": repo})
    answers: dict[str, httpx.Response] = {}
    try:
        with a.client() as orch:
            assert orch.put("/v1/leases/wf_1/implement", json=_lease(5)).status_code == 200
        with b.client() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]
        grant = make_grant(repo, identity["repository_identity"], grant_id="grt_raced", fence=10)
        body = {
            "grant": grant,
            "lease": {"workflow_id": "wf_1", "stage": "implement", **_lease(10)},
            "token_ttl_seconds": 600,
        }

        def put_on_a() -> None:
            with a.client() as orch:
                answers["a"] = orch.put("/v1/leases/wf_1/implement", json=_lease(20))

        def run_on_b() -> None:
            with b.client() as orch:
                answers["b"] = orch.post("/v1/runs", json=body)

        first = threading.Thread(target=put_on_a)
        first.start()
        pause.reached()  # A has read fence 5 and holds the stage's row
        second = threading.Thread(target=run_on_b)
        second.start()
        _until_b_waits_or_answers(second)
        pause.release()
        first.join()
        second.join()
        assert not (b.state_dir / "audit" / "grants" / "grt_raced.json").exists()
        with b.client() as orch:
            assert orch.get("/v1/grants/grt_raced").json()["code"] == "grant_unknown"
    finally:
        a.kill()
        b.kill()
    assert answers["a"].status_code == 200
    refused = answers["b"]
    assert (refused.status_code, refused.json()["code"]) == (409, "lease_fence_regression")
    assert _fence("wf_1") == 20
    engine = create_engine(os.environ["PROMOTER_DATABASE_URL"])
    with engine.connect() as connection:
        grants = connection.execute(text("SELECT count(*) FROM grants")).scalar_one()
        tokens = connection.execute(text("SELECT count(*) FROM executor_tokens")).scalar_one()
    engine.dispose()
    assert (grants, tokens) == (0, 0)


def _fence(workflow_id: str) -> int:
    engine = create_engine(os.environ["PROMOTER_DATABASE_URL"])
    with engine.connect() as connection:
        fence = connection.execute(
            text("SELECT fence FROM leases WHERE workflow_id = :w"), {"w": workflow_id}
        ).scalar_one()
    engine.dispose()
    return int(fence)


def _until_b_waits_or_answers(thread: threading.Thread) -> None:
    """Until B's request waits for a row lock in PostgreSQL, or has been answered."""
    engine = create_engine(os.environ["PROMOTER_DATABASE_URL"])
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 60
    try:
        with engine.connect() as connection:
            while thread.is_alive() and not connection.execute(query).scalar_one():
                assert time.monotonic() < deadline, "B neither waited nor answered"
                connection.rollback()
                time.sleep(0.005)
    finally:
        engine.dispose()


def test_a_promotion_on_host_a_is_readable_with_its_receipt_from_b_and_c(
    tmp_path: Path,
) -> None:
    repo_a = init_repo(tmp_path / "work-a", {"src/app.txt": V1})
    repo_b = init_repo(tmp_path / "work-b", {"src/app.txt": V1})
    with _hosts(tmp_path, a={"work": repo_a}, b={"other": repo_b}, c={}) as hosts:
        request = prepare_promotion(hosts["a"], repo_a, [("src/app.txt", V1, V2)])
        with hosts["a"].client() as orch:
            view = orch.post("/v1/promotions", json=request).json()
            assert view["status"] == "completed", view
            receipt = orch.get(f"/v1/operations/{view['operation_id']}/receipt").content
        assert view["owner"]["host"] == "host-a"
        for name in ("b", "c"):
            with hosts[name].client() as orch:
                seen = orch.get(f"/v1/operations/{view['operation_id']}").json()
                assert (seen["status"], seen["owner"]["host"]) == ("completed", "host-a")
                assert seen["events"] == view["events"] and seen["events_verified"]
                assert orch.get(f"/v1/operations/{view['operation_id']}/receipt").content == receipt
        assert (repo_a / "src/app.txt").read_bytes() == V2
        assert (repo_b / "src/app.txt").read_bytes() == V1  # B's worktree is never touched


def test_a_promotion_killed_on_host_a_is_never_claimed_by_b_and_a_recovers_it(
    tmp_path: Path,
) -> None:
    repo_a = init_repo(tmp_path / "work-a", {"src/app.txt": V1})
    repo_b = init_repo(tmp_path / "work-b", {"src/app.txt": V1})
    a = _host(tmp_path, "a", {"work": repo_a}, faults="after_replaces=kill")
    b = _host(tmp_path, "b", {"other": repo_b})
    try:
        request = prepare_promotion(a, repo_a, [("src/app.txt", V1, V2)])
        with a.client() as orch, contextlib.suppress(httpx.HTTPError):
            orch.post("/v1/promotions", json=request)  # A dies after its replaces
        assert a.wait_exit() == 137
        with b.client("operator") as operator:
            listed = operator.get("/v1/operations").json()["operations"]
        (op_id,) = [o["operation_id"] for o in listed]
        b.stop()
        b = _host(tmp_path, "b", {"other": repo_b})  # B's start-up scan runs again
        with b.client() as orch:
            seen = orch.get(f"/v1/operations/{op_id}").json()
            assert (seen["status"], seen["owner"]["host"]) == ("in_progress", "host-a")
            refused = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert (refused.status_code, refused.json()["code"]) == (409, "not_recoverable")
        a = _host(tmp_path, "a", {"work": repo_a})  # A comes back: its scan finds it
        with a.client() as orch:
            assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "needs_recovery"
            done = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7}).json()
            assert (done["status"], done["owner"]["host"]) == ("completed", "host-a")
        assert (repo_a / "src/app.txt").read_bytes() == V2
        with b.client() as orch:
            assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "completed"
    finally:
        a.kill()
        b.kill()
