"""A daemon killed inside one request's blobs, bundle and promotion, then asked again.

Each run sends one ``POST /v1/promotions:withEvidence`` to a daemon subprocess whose
``PROMOTER_FAULTS`` kills it (``os._exit``, like SIGKILL) at one step of the evidence's
storing (protocol: storage#evidence-of-one-request: every temp written, after the first
flush, after the quota record's rename and its folder's fsync, after each link, after the
names' flush), with every piece of evidence durable but no operation (``evidence_stored``),
before and after the plan's journal; with group syncs and with an fsync each. Right after
the kill: every blob, the bundle and the receipt are either absent or exactly their
bytes, a document is never named before every blob, and the charge on disk covers every
blob of the request that is named. A fresh daemon on the same state directory leaves no
temp of promoter's (anonymous temps died with the process; named ones are swept), then
either has no operation (the same request again stores nothing twice and promotes once)
or a ``needs_recovery`` one (recovery completes it exactly; asking again answers it).
Either way: exact target bytes, the same verification receipt, one promotion receipt, no
temp in the worktree, the run charged once for each blob.
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
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.process import DaemonProcess, granted
from tests.support.promotion import git_dir_digest, tree_bytes

URL = "/v1/promotions:withEvidence"
FILES = {"README.md": b"# project\n", "src/app.py": b"v1\n"}
NEW = {"src/app.py": b"v2\r\n", "src/new/data.bin": b"\x00\x01\xff"}
POINTS = {  # point: whether the operation exists when the daemon comes back
    "evidence_temps_written=kill": False,
    "evidence_synced=kill": False,
    "quota_after_rename=kill": False,
    "quota_after_dir_fsync=kill": False,
    "evidence_linked=kill@1": False,  # a blob
    "evidence_linked=kill@2": False,  # two blobs
    "evidence_linked=kill@3": False,  # every blob
    "evidence_linked=kill@4": False,  # the bundle
    "evidence_linked=kill@5": False,  # the receipt
    "evidence_names_synced=kill": False,
    "evidence_stored=kill": False,
    "before_journal=kill": True,
    "after_journal=kill": True,
}
BLOBS = [FILES["src/app.py"], *NEW.values()]


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
    frames = b"".join(frame_header(sha(b), len(b)) + b for b in BLOBS)
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


def _files(state: Path) -> dict[str, bytes]:
    """Every file of the audit store and the quota records, by path, with its bytes."""
    return {
        str(p.relative_to(state)): p.read_bytes()
        for folder in ("audit", "quota")
        for p in sorted((state / folder).rglob("*"))
        if p.is_file()
    }


def _own_temps(state: Path) -> list[str]:
    return sorted(str(p) for p in state.rglob(".promoter-*"))


def _after_the_kill(state: Path) -> dict[str, bytes]:
    """What the killed daemon left: checked, and kept to compare with the final bytes."""
    left = _files(state)
    blobs = {Path(p).name for p in left if p.startswith("audit/blobs/")}
    for path, data in left.items():
        if path.startswith("audit/blobs/"):
            assert sha(data) == Path(path).name  # never a torn blob
    charged = _charged(state)
    assert charged in (0, sum(len(b) for b in BLOBS))  # the request's whole charge or none
    if blobs:
        assert charged  # no blob named before its charge
    documents = [p for p in left if p.startswith(("audit/bundles/", "audit/receipts/"))]
    if documents:
        assert blobs >= {sha(b) for b in BLOBS}  # the documents are named after the blobs
    return left


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [True, False], ids=["group-sync", "fsync-each"])
@pytest.mark.parametrize("point", sorted(POINTS))
def test_kill_at_each_step_then_ask_again_or_recover_promotes_exactly_once(
    tmp_path: Path, point: str, grouped: bool
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    env = {"PROMOTER_GROUP_SYNC_MAX_PENDING_BYTES": str(NEVER_BUSY)}
    if grouped:
        state.mkdir()
        skip_without_group_sync(state)
    else:
        env["PROMOTER_GROUP_SYNC"] = "false"
    first = DaemonProcess(state, {"work": repo}, faults=point, extra_env=env)
    try:
        content, token = _prepare(first, repo)
        git_before = git_dir_digest(repo)
        with contextlib.suppress(httpx.HTTPError):
            _ask(first, content, token)  # the daemon dies mid-request
        assert first.wait_exit() == 137
    finally:
        first.kill()
    left = _after_the_kill(state)

    second = DaemonProcess(state, {"work": repo}, extra_env=env)
    try:
        assert _own_temps(state) == []  # none left, or swept as promoter's own
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
    final = _files(state)
    for path, data in left.items():  # what the kill left named is what stays
        if not path.startswith("quota/"):
            assert final[path] == data, path
    assert answer.json()["verification_receipt"] == json.loads(
        final[f"audit/receipts/verification/{answer.json()['bundle_id']}.json"]
    )
    # each blob charged once at least (a kill may over-charge, never under-charge)
    assert _charged(state) >= sum(len(b) for b in set(BLOBS))
