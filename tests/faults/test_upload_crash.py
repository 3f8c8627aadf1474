"""A daemon killed inside a single blob upload: the charge is named before the blob, always.

A daemon subprocess stores one blob for a run (its quota record then exists), then
uploads a second one with ``PROMOTER_FAULTS`` killing it (``os._exit``, like SIGKILL) at
one point of the commit: before the temp is made durable (``blob_commit``), right after
the one ``syncfs`` that makes the blob's temp and the quota record's temp durable
together (where the filesystem offers a group sync), after the record's rename, after
its directory's fsync (the blob not linked yet). Each point runs with group syncs and
with an fsync each (``group_sync = false``). Afterwards, on the same state directory:
exactly the expected blobs are visible (hashing to their names, read-only), the run's
charge is exactly the expected total (a kill after the record is named over-charges by
the blob that never appeared, never the other way), no temp is left in the store's
``tmp/`` or in ``quota/`` (anonymous where the filesystem has ``O_TMPFILE``), and the
same upload to a restarted daemon stores the blob, charged once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import running_daemon
from tests.support.flows import init_repo, sha
from tests.support.fsutil import NEVER_BUSY, anonymous_temps_work, skip_without_group_sync
from tests.support.process import DaemonProcess

FIRST = b"first blob\n"
SECOND = b"second blob, killed on its way in\n" * 3

# (point, with group syncs, whether the second blob's charge is on disk after the kill)
POINTS = [
    ("blob_write=kill@3", True, False),  # @1, @2: the first upload's body and its empty end
    ("blob_write=kill@3", False, False),
    ("blob_commit=kill@2", True, False),  # grouped: before the charge; nothing named
    ("blob_commit=kill@2", False, True),  # an fsync each: the run is charged first
    ("after_upload_group_sync=kill@2", True, False),  # @1 is the first upload's sync
    ("quota_after_rename=kill@2", True, True),  # @1 is the first upload's record
    ("quota_after_rename=kill@2", False, True),
    ("quota_after_dir_fsync=kill@2", True, True),
    ("quota_after_dir_fsync=kill@2", False, True),
]


def _store(state: Path) -> dict[str, Path]:
    return {p.name: p for p in (state / "audit" / "blobs").rglob("*") if p.is_file()}


def _charged(state: Path) -> list[int]:
    return [int(json.loads(f.read_bytes())["bytes"]) for f in (state / "quota").iterdir()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "grouped", "charged"),
    POINTS,
    ids=[f"{p}-{'group-sync' if g else 'fsync-each'}" for p, g, _ in POINTS],
)
def test_kill_inside_an_upload_leaves_the_charge_named_before_the_blob(
    tmp_path: Path, fault: str, grouped: bool, charged: bool
) -> None:
    repo = init_repo(tmp_path / "repo")
    state = tmp_path / "state"
    if grouped:
        state.mkdir()
        skip_without_group_sync(state)
    env = {"PROMOTER_GROUP_SYNC_MAX_PENDING_BYTES": str(NEVER_BUSY)}
    if not grouped:
        env["PROMOTER_GROUP_SYNC"] = "false"
    daemon = DaemonProcess(state, {"work": repo}, faults=fault, extra_env=env)
    try:
        with daemon.executor("run_1") as ex:
            stored = ex.put(f"/v1/blobs/sha256/{sha(FIRST)}", content=FIRST)
            assert stored.status_code == 201, stored.text
            with pytest.raises(httpx.TransportError):
                ex.put(f"/v1/blobs/sha256/{sha(SECOND)}", content=SECOND)
        assert daemon.wait_exit() == 137
    finally:
        daemon.kill()

    visible = _store(state)
    assert set(visible) == {sha(FIRST)}
    path = visible[sha(FIRST)]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha(FIRST)
    assert path.stat().st_mode & 0o777 == 0o444
    assert _charged(state) == [len(FIRST) + (len(SECOND) if charged else 0)]
    if anonymous_temps_work(tmp_path):
        assert os.listdir(state / "audit" / "tmp") == []
        assert len(os.listdir(state / "quota")) == 1  # the record, no temp beside it

    with running_daemon(state, {"work": repo}) as restarted:
        with restarted.executor("run_1") as ex:
            again = ex.put(f"/v1/blobs/sha256/{sha(SECOND)}", content=SECOND)
        assert again.status_code == 201, again.text
    assert set(_store(state)) == {sha(FIRST), sha(SECOND)}
    over = len(SECOND) if charged else 0  # the kill's charge is never given back
    assert _charged(state) == [len(FIRST) + len(SECOND) + over]
