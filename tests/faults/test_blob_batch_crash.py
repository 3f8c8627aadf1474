"""A daemon killed inside a batched blob upload: no half-blob visible, nothing unaccounted.

Each run posts one ``POST /v1/blobs:batchUpdate`` of several blobs to a daemon
subprocess whose ``PROMOTER_FAULTS`` kills it (``os._exit``, like SIGKILL) at one point
of the batch intake. Afterwards, on the same state directory: every file in the blob
store hashes to its name and is read-only, every one of them is recorded in the
database, no temp file is left in the store's ``tmp/`` (they are anonymous where the
filesystem has ``O_TMPFILE``), the run's quota charge covers every stored byte (it may over-charge, never
under-charge), and the same batch sent again to a restarted daemon stores every blob.
Each point runs with group syncs (the quota record's temp then joins the temps' one
``syncfs``) and with an fsync each (``group_sync = false``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from promoter.domain.blob_frames import frame_header
from promoter.store.tables import BlobRow
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo, sha
from tests.support.fsutil import NEVER_BUSY, anonymous_temps_work, skip_without_group_sync
from tests.support.process import DaemonProcess

BLOBS = [b"blob %d\n" % n * (n + 1) for n in range(5)]
BODY = b"".join(frame_header(sha(b), len(b)) + b for b in BLOBS)
POINTS = [
    "blob_batch_write=kill@3",
    "blob_batch_synced=kill",
    "quota_after_rename=kill",
    "quota_after_dir_fsync=kill",
    "blob_batch_charged=kill",
    "blob_batch_recorded=kill",
    "blob_batch_link=kill@3",
]


def _store(state_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in (state_dir / "audit" / "blobs").rglob("*") if p.is_file()}


def _temps(state_dir: Path) -> list[str]:
    tmp = state_dir / "audit" / "tmp"
    return sorted(os.listdir(tmp)) if tmp.exists() else []


def _charged(state_dir: Path) -> int:
    files = list((state_dir / "quota").glob("*.json")) if (state_dir / "quota").exists() else []
    return sum(int(json.loads(f.read_bytes())["bytes"]) for f in files)


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [True, False], ids=["group-sync", "fsync-each"])
@pytest.mark.parametrize("fault", POINTS)
def test_kill_mid_batch_leaves_no_half_blob_and_nothing_unaccounted(
    tmp_path: Path, fault: str, grouped: bool
) -> None:
    repo = init_repo(tmp_path / "repo")
    state = tmp_path / "state"
    env = {"PROMOTER_GROUP_SYNC_MAX_PENDING_BYTES": str(NEVER_BUSY)}
    if grouped:
        state.mkdir()
        skip_without_group_sync(state)
    else:
        env["PROMOTER_GROUP_SYNC"] = "false"
    daemon = DaemonProcess(state, {"work": repo}, faults=fault, extra_env=env)
    try:
        with daemon.executor("run_1") as ex, pytest.raises(httpx.TransportError):
            ex.post("/v1/blobs:batchUpdate", content=BODY)
        assert daemon.wait_exit() == 137
    finally:
        daemon.kill()
    visible = _store(state)
    for name, path in visible.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == name
        assert path.stat().st_mode & 0o777 == 0o444
    sizes = {sha(b): len(b) for b in BLOBS}
    assert set(visible) <= set(sizes)
    assert _charged(state) >= sum(sizes[name] for name in visible)
    if anonymous_temps_work(tmp_path):
        assert _temps(state) == []  # an anonymous temp died with the process
    with running_daemon(state, {"work": repo}) as restarted:
        with restarted.services.db.session() as session:
            rows = set(session.scalars(select(BlobRow.sha256)))
        assert set(visible) <= rows
        with restarted.executor("run_1") as ex:
            answer = ex.post("/v1/blobs:batchUpdate", content=BODY)
        assert answer.status_code == 200, answer.text
        assert all(i["status"] in (200, 201) for i in answer.json()["responses"])
    assert set(_store(state)) == set(sizes)
