"""A daemon killed inside one request's blobs, bundle and promotion, then asked again.

Each run sends one ``POST /v1/promotions:withEvidence`` to a daemon subprocess whose
``PROMOTER_FAULTS`` kills it (``os._exit``, like SIGKILL) at one step: inside the blobs'
commit, with every piece of evidence durable but no operation (``evidence_stored``),
before and after the plan's journal. A fresh daemon on the same state directory then
either has no operation (the same request again stores nothing twice and promotes once)
or a ``needs_recovery`` one (recovery completes it exactly; asking again answers it).
Either way: exact target bytes, one receipt, no temp in the worktree, the run charged
once for each blob.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter.domain.blob_frames import frame_header
from promoter.domain.evidence_frames import bundle_header
from tests.support.flows import init_repo, make_bundle, sha
from tests.support.process import DaemonProcess, granted
from tests.support.promotion import git_dir_digest, tree_bytes

URL = "/v1/promotions:withEvidence"
FILES = {"README.md": b"# project\n", "src/app.py": b"v1\n"}
NEW = {"src/app.py": b"v2\r\n", "src/new/data.bin": b"\x00\x01\xff"}
POINTS = {  # point: whether the operation exists when the daemon comes back
    "blob_batch_recorded=kill": False,
    "blob_batch_link=kill@2": False,
    "evidence_stored=kill": False,
    "before_journal=kill": True,
    "after_journal=kill": True,
}


def _prepare(daemon: DaemonProcess, repo: Path) -> tuple[bytes, str]:
    """Grant and lease registered; the one request's body and the run's token."""
    with daemon.client() as orch:
        grant = granted(orch, repo, lease_as_grant=True)
        token = orch.post(
            "/v1/executor-tokens", json={"executor_run_id": "run_1", "ttl_seconds": 3600}
        ).json()["token"]
    changes: list[tuple[str, bytes | None, bytes | None]] = [
        (p, FILES.get(p), data) for p, data in NEW.items()
    ]
    document = json.dumps(make_bundle(grant, changes)).encode()
    blobs = [FILES["src/app.py"], *NEW.values()]
    frames = b"".join(frame_header(sha(b), len(b)) + b for b in blobs)
    return bundle_header(len(document)) + document + frames, str(token)


def _ask(daemon: DaemonProcess, content: bytes, token: str) -> httpx.Response:
    with daemon.client() as orch:
        return orch.post(
            URL,
            content=content,
            params={"fence": "7", "wait": "true"},
            headers={"Promoter-Executor-Token": token},
        )


def _operations(daemon: DaemonProcess) -> list[dict[str, Any]]:
    with daemon.client("operator") as op:
        return list(op.get("/v1/operations").json()["operations"])


def _charged(state: Path) -> int:
    return sum(int(json.loads(f.read_bytes())["bytes"]) for f in (state / "quota").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(POINTS))
def test_kill_at_each_step_then_ask_again_or_recover_promotes_exactly_once(
    tmp_path: Path, point: str
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults=point)
    try:
        content, token = _prepare(first, repo)
        git_before = git_dir_digest(repo)
        with contextlib.suppress(httpx.HTTPError):
            _ask(first, content, token)  # the daemon dies mid-request
        assert first.wait_exit() == 137
    finally:
        first.kill()

    second = DaemonProcess(state, {"work": repo})
    try:
        operations = _operations(second)
        if POINTS[point]:
            [row] = operations
            op_id = row["operation_id"]
            with second.client() as orch:
                assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "needs_recovery"
                recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert recovered.status_code == 200, recovered.text
            assert recovered.json()["status"] == "completed"
        else:
            assert operations == []  # evidence perhaps, but no operation
            assert tree_bytes(repo)["src/app.py"][0] == FILES["src/app.py"]
        answer = _ask(second, content, token)
        assert answer.status_code == 200, answer.text
        view = answer.json()["operation"]
        assert view["status"] == "completed", view
        assert view["attempt"] == 1
        if POINTS[point]:
            assert view["operation_id"] == op_id
        again = _ask(second, content, token)
        assert again.json()["operation"]["operation_id"] == view["operation_id"]
        assert [o["operation_id"] for o in _operations(second)] == [view["operation_id"]]
    finally:
        second.stop()
    after = tree_bytes(repo)
    assert {k: v[0] for k, v in after.items()} == {**FILES, **NEW}
    assert not list(repo.rglob(".promoter-tmp-*"))
    assert git_dir_digest(repo) == git_before
    receipts = sorted(p.name for p in (state / "audit" / "receipts" / "promotion").iterdir())
    assert receipts == [f"{view['operation_id']}.json"]
    # each blob charged once at least (a kill may over-charge, never under-charge)
    assert _charged(state) >= sum(len(b) for b in {FILES["src/app.py"], *NEW.values()})
