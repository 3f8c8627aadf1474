"""A crash mid-rollback (and SIGTERM mid-promotion) recovers to one consistent receipt."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import tree_bytes

FILES = {f"src/f{i}.txt": f"old {i}\n".encode() for i in range(5)}
CHANGES = [(p, d, d.replace(b"old", b"new")) for p, d in FILES.items()]
CHANGES.append(("src/made/x.txt", None, b"x\n"))


def _promote(daemon: DaemonProcess, repo: Path, wait: bool = True) -> tuple[str, dict[str, object]]:
    request = {**prepare_promotion(daemon, repo, CHANGES), "wait": wait}
    with daemon.client() as orch:
        answer = orch.post("/v1/promotions", json=request).json()
    return answer["operation_id"], request


def _killed_mid_rollback(state: Path, repo: Path, faults: str) -> str:
    """A promotion made and its rollback asked for by a daemon that ``faults`` kills
    mid-rollback; the promotion's id."""
    first = DaemonProcess(state, {"work": repo}, faults=faults)
    try:
        op_id, _ = _promote(first, repo)
        with first.client("operator") as op, contextlib.suppress(httpx.HTTPError):
            op.post(f"/v1/operations/{op_id}/rollback")
        assert first.wait_exit() == 137
    finally:
        first.kill()
    return op_id


@pytest.mark.slow
def test_crash_mid_rollback_recovers_to_a_consistent_receipt(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    before = tree_bytes(repo)
    state = tmp_path / "state"
    op_id = _killed_mid_rollback(state, repo, "rollback_after_step=kill@3")
    now = tree_bytes(repo)
    for path, old, new in CHANGES:
        assert now.get(path, (None, 0))[0] in (old, new), path
    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client("operator") as op:
            listed = op.get("/v1/operations", params={"status": "needs_recovery"}).json()
            [child] = listed["operations"]
            assert child["kind"] == "rollback"
            op.post(f"/v1/operations/{child['operation_id']}/recover", json={"fence": 0})
            assert op.get(f"/v1/operations/{op_id}").json()["status"] == "rolled_back"
            receipt = op.post(f"/v1/operations/{op_id}/rollback")
    finally:
        second.stop()
    document = json.loads(receipt.content)
    assert document["status"] == "rolled_back"
    assert [t["result"] for t in document["targets"]] == ["restored"] * len(CHANGES)
    assert document["removed_directories"] == ["src/made"]
    assert tree_bytes(repo) == before
    stored = state / "audit" / "receipts" / "rollback" / f"{op_id}.json"
    assert stored.read_bytes() == receipt.content


@pytest.mark.slow
def test_sigterm_mid_promotion_finishes_or_leaves_it_recoverable(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo})
    try:
        op_id, request = _promote(first, repo, wait=False)
        first.proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it captured
        assert first.wait_exit(120) in (0, -signal.SIGTERM)
        assert any("Application shutdown complete" in line for line in first.log)
    finally:
        first.kill()
    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client() as orch:
            view = orch.get(f"/v1/operations/{op_id}").json()
            status = view["status"]
            # stopped before writing (refused: ask again), mid-way (recover) or after
            assert status in ("completed", "needs_recovery", "refused"), view
            if status == "refused":
                assert view["code"] == "stopped"
            if status == "needs_recovery":
                orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert (
                orch.post("/v1/promotions", json={**request, "wait": True}).json()["status"]
                == "completed"
            )
    finally:
        second.stop()
    for path, _old, new in CHANGES:
        assert tree_bytes(repo)[path][0] == new


@pytest.mark.slow
def test_a_rollback_killed_after_removing_folders_still_names_them_in_its_receipt(
    tmp_path: Path,
) -> None:
    """Killed after the created folder was removed but before the receipt was recorded:
    the resumed rollback finds the folder gone and still says it removed it, since the
    folder was there when the stopped pass journaled its outcomes."""
    repo = init_repo(tmp_path / "work", FILES)
    before = tree_bytes(repo)
    state = tmp_path / "state"
    op_id = _killed_mid_rollback(state, repo, "rollback_before_receipt=kill")
    assert not (repo / "src" / "made").exists()  # removed before the kill
    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client("operator") as op:
            receipt = op.post(f"/v1/operations/{op_id}/rollback")
    finally:
        second.stop()
    assert receipt.status_code == 200, receipt.text
    document = json.loads(receipt.content)
    assert document["status"] == "rolled_back"
    assert [t["result"] for t in document["targets"]] == ["restored"] * len(CHANGES)
    assert document["removed_directories"] == ["src/made"]
    assert tree_bytes(repo) == before
