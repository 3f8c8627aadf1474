"""C1/C2/C4: a real daemon killed at every fault point, restarted and recovered.

Each run promotes a multi-file bundle in a daemon subprocess with ``PROMOTER_FAULTS``
set to kill it (``os._exit``) at one named point. A fresh daemon on the same state
directory marks the operation ``needs_recovery``; recovery must end with exact target
bytes, exactly one receipt and no temp files — or, for points before any write, a
plain retry must.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.flows import init_repo
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.process import DaemonProcess, crash_in_promotion, prepare_promotion
from tests.support.promotion import git_dir_digest, tree_bytes

FILES = {f"src/m{i}.py": f"v1 {i}\n".encode() for i in range(6)}
FILES["README.md"] = b"# project\n"
FILES["gone.txt"] = b"to delete\n"
NEW = {f"src/m{i}.py": f"v2 {i}\r\n".encode() for i in range(6)}
CREATED = {"src/new/deep/a.bin": b"\x00\x01\x02", "src/new/b.txt": b""}

POINTS = [
    "before_journal",
    "after_journal",
    "after_dir_intent",
    "after_mkdir",
    "after_temp_fsync",  # an fsync of the group's, a few at once (no group sync: below)
    "before_temp_named",
    "after_temp_write",
    "after_temps_journaled",
    "before_replace",
    "after_exchange",
    "after_replace",
    "before_unlink",
    "after_move_aside",
    "after_unlink",
    "after_replaces",
    "after_parent_fsync",
    "after_group_sync=kill@1",  # the one syncfs for the temps (where the filesystem allows)
    "after_group_sync=kill@2",  # the one for every touched directory
    "after_readback",
    "before_receipt",  # the outcome's one commit not made (after it: test_receipt_copy.py)
]


def _changes() -> list[tuple[str, bytes | None, bytes | None]]:
    changes: list[tuple[str, bytes | None, bytes | None]] = [
        (p, FILES[p], d) for p, d in NEW.items()
    ]
    changes += [(p, None, d) for p, d in CREATED.items()]
    changes.append(("gone.txt", FILES["gone.txt"], None))
    return changes


def _expected_after(repo_before: dict[str, tuple[bytes, int]]) -> dict[str, bytes]:
    expected = {k: v[0] for k, v in repo_before.items()}
    expected.update(NEW)
    expected.update(CREATED)
    del expected["gone.txt"]
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_kill_at_fault_point_then_recover_gives_exact_bytes_and_one_receipt(
    point: str, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    if point.startswith("after_group_sync"):
        skip_without_group_sync(repo)
    state = tmp_path / "state"
    spec = point if "=" in point else f"{point}=kill"
    env = {"PROMOTER_GROUP_SYNC_MAX_PENDING_BYTES": str(NEVER_BUSY)}
    if point == "after_temp_fsync":  # only where no group sync stands for the fsyncs
        env["PROMOTER_GROUP_SYNC"] = "false"
    first = DaemonProcess(state, {"work": repo}, faults=spec, extra_env=env)
    try:
        request = prepare_promotion(first, repo, _changes(), batched=False)
        before, git_before = tree_bytes(repo), git_dir_digest(repo)
        crash_in_promotion(first, request)
    finally:
        first.kill()

    # every target is exactly old or exactly new at this instant
    now = tree_bytes(repo)
    for path, _old, _new in _changes():
        assert now.get(path, (None, 0))[0] in (
            dict(before).get(path, (None, 0))[0],
            {**NEW, **CREATED}.get(path),
        ), path

    second = DaemonProcess(state, {"work": repo})
    try:
        with second.client() as orch:
            op_id = second.first_operation()
            status = orch.get(f"/v1/operations/{op_id}").json()["status"]
            # before_receipt: the outcome, the receipt and ``completed`` are one commit, not
            # made; recovery reads the targets back and makes it, with one receipt
            assert status == "needs_recovery"
            recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert recovered.status_code == 200, recovered.text
            view = recovered.json()
            assert view["status"] == "completed", view
            again = orch.post("/v1/promotions", json=request).json()
            assert (again["operation_id"], again["status"]) == (op_id, "completed")
            receipt_bytes = orch.get(f"/v1/operations/{op_id}/receipt").content
    finally:
        second.stop()
    after = tree_bytes(repo)
    assert {k: v[0] for k, v in after.items()} == _expected_after(before)
    assert not list(repo.rglob(".promoter-tmp-*"))
    assert git_dir_digest(repo) == git_before
    receipts = list((state / "audit" / "receipts" / "promotion").iterdir())
    assert [p.name for p in receipts] == [f"{op_id}.json"]
    assert receipts[0].read_bytes() == receipt_bytes
    assert json.loads(receipt_bytes)["operation_id"] == op_id
