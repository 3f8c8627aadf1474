"""C1 at scale: SIGKILL at random instants of a 1000-file promotion, several rounds.

Each round uses a fresh repository of 1000 files and a bundle that modifies 800, creates
100 in new directories and deletes 100. The daemon process is killed either by a fault
point on a random (seeded) hit, or by a real SIGKILL from the test after a random delay.
At the instant of death every target must be exactly old or exactly new; after a
restart and recovery every target is new, no temp file is left, and there is exactly
one receipt. Crashing again during recovery (C4) must converge too.

The random delay of a real SIGKILL counts from an event, never from the request: the
daemon pauses at a fault point once the operation is journaled, and the delay starts
when the test releases it. Counted from the request, a loaded machine let the kill land
before the operation existed, and the round tested nothing.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import tree_bytes

N = 1000


def _repo_and_changes(root: Path) -> tuple[Path, list[tuple[str, bytes | None, bytes | None]]]:
    files = {f"d{i % 40:02d}/f{i:04d}.txt": f"old {i}\n".encode() * 8 for i in range(900)}
    repo = init_repo(root, files)
    paths = sorted(files)
    changes: list[tuple[str, bytes | None, bytes | None]] = []
    changes += [(p, files[p], files[p].replace(b"old", b"new")) for p in paths[:800]]
    changes += [(p, files[p], None) for p in paths[800:]]
    changes += [(f"new{i % 10}/sub/c{i:03d}.bin", None, bytes([i % 256]) * 64) for i in range(100)]
    return repo, changes


def _kill_after_release(daemon: DaemonProcess, gate: Pause, delay: float) -> threading.Thread:
    """Once ``daemon`` reaches ``gate``, release it and SIGKILL it ``delay`` seconds later
    (the random instant: any outcome is asserted, so the delay synchronizes nothing)."""

    def run() -> None:
        gate.reached()
        gate.release()
        time.sleep(delay)
        daemon.kill()

    thread = threading.Thread(target=run, name="random-kill", daemon=True)
    thread.start()
    return thread


def _assert_each_old_or_new(repo: Path, changes: list[Any], *, all_new: bool) -> None:
    now = tree_bytes(repo)
    for path, old, new in changes:
        found = now.get(path, (None, 0))[0]
        assert found == new if all_new else found in (old, new), path
    if all_new:
        assert not list(repo.rglob(".promoter-tmp-*"))


ROUNDS = [
    ("fault", "after_replace"),
    ("fault", "after_temp_write"),
    ("fault", "after_unlink"),
    ("signal", ""),
]


@pytest.mark.slow
@pytest.mark.parametrize(("how", "point"), ROUNDS)
def test_kill_at_a_random_instant_of_a_1000_file_promotion(
    how: str, point: str, tmp_path: Path
) -> None:
    rng = random.Random(f"{how}-{point}")
    repo, changes = _repo_and_changes(tmp_path / "work")
    state = tmp_path / "state"
    hits = {"after_replace": 900, "after_temp_write": 900, "after_unlink": 100}
    gate = Pause(tmp_path, "after_journal")
    faults = f"{point}=kill@{rng.randint(1, hits[point])}" if how == "fault" else gate.spec
    first = DaemonProcess(state, {"work": repo}, faults=faults)
    try:
        request = prepare_promotion(first, repo, changes)
        if how == "signal":
            killer = _kill_after_release(first, gate, rng.uniform(0.0, 0.5))
        with first.client() as orch, contextlib.suppress(httpx.HTTPError):
            orch.post("/v1/promotions", json=request)
        if how == "signal":
            killer.join()
        first.wait_exit()
    finally:
        first.kill()
    _assert_each_old_or_new(repo, changes, all_new=False)

    # C4: crash again during recovery, once, then recover for good
    second = DaemonProcess(state, {"work": repo}, faults="after_temps_settled=kill")
    try:
        with second.client("operator") as op:
            op_id = op.get("/v1/operations").json()["operations"][0]["operation_id"]
            status = op.get(f"/v1/operations/{op_id}").json()["status"]
        if status == "needs_recovery":
            died = False
            with second.client() as orch:
                try:
                    orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
                except httpx.HTTPError:
                    died = True
            # it dies at the point only when temp files may exist (the journal has steps)
            if died:
                assert second.wait_exit() == 137
        else:  # the kill came after the outcome was journaled
            assert status == "completed"
    finally:
        second.kill()
    _assert_each_old_or_new(repo, changes, all_new=False)

    third = DaemonProcess(state, {"work": repo})
    try:
        with third.client() as orch:
            status = orch.get(f"/v1/operations/{op_id}").json()["status"]
            if status != "completed":
                answer = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
                assert answer.json()["status"] == "completed", answer.text
            again = orch.post("/v1/promotions", json=request).json()
            assert (again["operation_id"], again["status"]) == (op_id, "completed")
            # a kill after the outcome's commit may leave the receipt's copy unwritten
            # (protocol: storage#receipt-in-outcome-commit): it is written from the row when the
            # receipt is read
            served = orch.get(f"/v1/operations/{op_id}/receipt").content
    finally:
        third.stop()
    _assert_each_old_or_new(repo, changes, all_new=True)
    folder = state / "audit" / "receipts" / "promotion"
    assert sorted(p.name for p in folder.iterdir()) == [f"{op_id}.json"]
    assert (folder / f"{op_id}.json").read_bytes() == served


ROLLBACK_ROUNDS = [
    ("fault", "rollback_after_step"),
    ("fault", "after_temp_write"),
    ("fault", "after_move_aside"),
    ("signal", ""),
]


@pytest.mark.slow
@pytest.mark.parametrize(("how", "point"), ROLLBACK_ROUNDS)
def test_kill_at_a_random_instant_of_a_1000_file_rollback(
    how: str, point: str, tmp_path: Path
) -> None:
    """A completed 1000-file promotion rolled back, killed at random, killed again while
    recovering, then recovered: every target is back to exactly old, nothing of
    promoter's is left behind (no temp file, no created directory)."""
    rng = random.Random(f"rollback-{how}-{point}")
    repo, changes = _repo_and_changes(tmp_path / "work")
    before = tree_bytes(repo)
    dirs_before = sorted(p for p in repo.rglob("*") if p.is_dir() and ".git" not in p.parts)
    state = tmp_path / "state"
    # the promotion writes 900 temps and moves 100 files aside; the rollback's hits follow
    hits = {
        "rollback_after_step": (0, N),
        "after_temp_write": (900, 900),
        "after_move_aside": (100, 100),
    }
    faults = ""
    if how == "fault":
        offset, count = hits[point]
        faults = f"{point}=kill@{offset + rng.randint(1, count)}"
    gate = Pause(tmp_path, "rollback_before_journal")
    first = DaemonProcess(state, {"work": repo}, faults=faults or gate.spec)
    try:
        request = prepare_promotion(first, repo, changes)
        with first.client() as orch:
            promoted = orch.post("/v1/promotions", json=request).json()
        assert promoted["status"] == "completed", promoted
        op_id = promoted["operation_id"]
        if how == "signal":
            killer = _kill_after_release(first, gate, rng.uniform(0.0, 0.5))
        with first.client("operator") as op, contextlib.suppress(httpx.HTTPError):
            op.post(f"/v1/operations/{op_id}/rollback")
        if how == "signal":
            killer.join()
        first.wait_exit()
    finally:
        first.kill()
    _assert_each_old_or_new(repo, changes, all_new=False)

    second = DaemonProcess(state, {"work": repo}, faults="rollback_after_step=kill@7")
    try:
        with second.client("operator") as op:
            listed = op.get("/v1/operations").json()["operations"]
            children = [o for o in listed if o["kind"] == "rollback"]
            if children and children[0]["status"] == "needs_recovery":
                with contextlib.suppress(httpx.HTTPError):
                    op.post(
                        f"/v1/operations/{children[0]['operation_id']}/recover", json={"fence": 0}
                    )
    finally:
        second.kill()
    _assert_each_old_or_new(repo, changes, all_new=False)

    third = DaemonProcess(state, {"work": repo})
    try:
        with third.client("operator") as op:
            listed = op.get("/v1/operations").json()["operations"]
            [child] = [o for o in listed if o["kind"] == "rollback"]
            if child["status"] == "needs_recovery":
                answer = op.post(
                    f"/v1/operations/{child['operation_id']}/recover", json={"fence": 0}
                )
                assert answer.status_code == 200, answer.text
            view = op.get(f"/v1/operations/{op_id}").json()
    finally:
        third.stop()
    assert view["status"] == "rolled_back", view["status"]
    assert tree_bytes(repo) == before
    assert sorted(p for p in repo.rglob("*") if p.is_dir() and ".git" not in p.parts) == (
        dirs_before
    )


RESTORE_ROUNDS = [("fault", "after_temp_write"), ("fault", "after_move_aside"), ("signal", "")]


@pytest.mark.slow
@pytest.mark.parametrize(("how", "point"), RESTORE_ROUNDS)
def test_kill_at_a_random_instant_of_a_snapshot_restore(
    how: str, point: str, tmp_path: Path
) -> None:
    """A 400-file restore killed at random, killed again while recovering, then
    recovered: the worktree is exactly the snapshot, with nothing of promoter's left."""
    rng = random.Random(f"restore-{how}-{point}")
    files = {f"d{i % 20:02d}/f{i:04d}.txt": f"base {i}\n".encode() * 8 for i in range(400)}
    repo = init_repo(tmp_path / "work", files)
    state = tmp_path / "state"
    base = "/v1/repositories/work/snapshots"
    hits = {"after_temp_write": 250, "after_move_aside": 50}
    gate = Pause(tmp_path, "after_temp_write")  # the restore's first temp: journaled
    faults = f"{point}=kill@{rng.randint(1, hits[point])}" if how == "fault" else gate.spec
    first = DaemonProcess(state, {"work": repo}, faults=faults)
    try:
        with first.client("operator") as op:
            before = op.post(base, json={"label": "before"}).json()["tree"]
            wanted = tree_bytes(repo)
            paths = sorted(files)
            for path in paths[:200]:
                (repo / path).write_bytes(b"edited\n")
            for path in paths[200:250]:
                (repo / path).unlink()
            for i in range(50):
                (repo / f"extra{i % 5}" / f"x{i}.txt").parent.mkdir(exist_ok=True)
                (repo / f"extra{i % 5}" / f"x{i}.txt").write_bytes(b"extra\n")
            after = op.post(base, json={"label": "after"}).json()["tree"]
            if how == "signal":
                killer = _kill_after_release(first, gate, rng.uniform(0.0, 0.3))
            with contextlib.suppress(httpx.HTTPError):
                op.post(f"{base}/{before}/restore", json={"expected_current_tree": after})
        if how == "signal":
            killer.join()
        first.wait_exit()
    finally:
        first.kill()

    second = DaemonProcess(state, {"work": repo}, faults="after_temp_write=kill@5")
    try:
        with second.client("operator") as op:
            listed = op.get("/v1/operations").json()["operations"]
            [restore] = [o for o in listed if o["kind"] == "restore"]
            if restore["status"] == "needs_recovery":
                with contextlib.suppress(httpx.HTTPError):
                    op.post(f"/v1/operations/{restore['operation_id']}/recover", json={"fence": 0})
    finally:
        second.kill()

    third = DaemonProcess(state, {"work": repo})
    try:
        with third.client("operator") as op:
            view = op.get(f"/v1/operations/{restore['operation_id']}").json()
            if view["status"] == "needs_recovery":
                answer = op.post(
                    f"/v1/operations/{restore['operation_id']}/recover", json={"fence": 0}
                )
                assert answer.status_code == 200, answer.text
                view = op.get(f"/v1/operations/{restore['operation_id']}").json()
    finally:
        third.stop()
    assert view["status"] == "completed", (view["report"], view["events"][-3:])
    assert tree_bytes(repo) == wanted
    assert not [p for p in repo.rglob("*") if p.name.startswith("extra")]
