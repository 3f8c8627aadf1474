"""A recovery makes durable the names an earlier pass wrote before it says ``completed``:
a promotion's and a snapshot restore's.

A daemon killed after every replace of a promotion but before its directories were
synced leaves every target new on disk, its names possibly only in the page cache. The
recovery confirms those targets without writing them again; before it answers
``completed`` (and signs a receipt saying so) it must sync each of their directories,
or a power failure soon after could undo what the receipt claims. Checked with the fs
layer's own flushes, each mapped to the directory it synced.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import httpx
import pytest

from promoter.fs import flush
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, crash_in_promotion, prepare_promotion

FILES = {"README.md": b"# project\n", "src/a.py": b"a = 1\n", "gone.txt": b"bye\n"}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/a.py", b"a = 1\n", b"a = 2\n"),
    ("src/new/b.txt", None, b"b\n"),
    ("gone.txt", b"bye\n", None),
]


def _recording_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync of the fs layer from now on, as the path of what it synced."""
    synced: list[str] = []
    fsync = flush.fsync

    def recorded(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(flush, "fsync", recorded)
    return synced


def _in_worktree(synced: list[str], repo: Path) -> list[str]:
    """What was synced inside the worktree, in order of path, a folder as often as it was:
    the recovery writes nothing there, so each is a folder of a confirmed target."""
    return sorted(p for p in synced if p == str(repo) or p.startswith(f"{repo}/"))


@pytest.mark.slow
def test_a_recovery_syncs_the_directories_of_the_targets_it_confirms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults="after_replaces=kill")
    try:
        crash_in_promotion(first, prepare_promotion(first, repo, CHANGES, batched=False))
    finally:
        first.kill()
    assert (repo / "src" / "a.py").read_bytes() == b"a = 2\n"  # every replace was made

    synced = _recording_fsyncs(monkeypatch)
    with (
        running_daemon(state, {"work": repo}, group_sync=False) as daemon,
        daemon.operator() as op,
    ):
        [listed] = op.get("/v1/operations").json()["operations"]
        assert listed["status"] == "needs_recovery"
        synced.clear()
        answer = op.post(f"/v1/operations/{listed['operation_id']}/recover", json={"fence": 7})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
    assert _in_worktree(synced, repo) == [str(repo), str(repo / "src"), str(repo / "src" / "new")]


@pytest.mark.slow
def test_a_restore_recovery_syncs_the_directories_of_the_targets_it_confirms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a snapshot restore: killed right after its last replace, before its
    one sync of every directory; recovered, it syncs them before ``completed``."""
    repo = init_repo(tmp_path / "work", FILES)
    state = tmp_path / "state"
    snapshots = "/v1/repositories/work/snapshots"
    first = DaemonProcess(state, {"work": repo}, faults="after_replace=kill@2")
    try:
        with first.client("operator") as op:
            base = op.post(snapshots, json={"label": "base"}).json()["tree"]
            (repo / "src" / "a.py").write_bytes(b"a = 2\n")
            (repo / "README.md").write_bytes(b"# edited\n")
            edited = op.post(snapshots, json={"label": "edited"}).json()["tree"]
            with contextlib.suppress(httpx.HTTPError):  # the daemon dies mid-request
                op.post(f"{snapshots}/{base}/restore", json={"expected_current_tree": edited})
        assert first.wait_exit() == 137
    finally:
        first.kill()
    assert (repo / "src" / "a.py").read_bytes() == FILES["src/a.py"]  # both replaces made
    assert (repo / "README.md").read_bytes() == FILES["README.md"]

    synced = _recording_fsyncs(monkeypatch)
    with (
        running_daemon(state, {"work": repo}, group_sync=False) as daemon,
        daemon.operator() as op,
    ):
        [listed] = op.get("/v1/operations").json()["operations"]
        assert (listed["kind"], listed["status"]) == ("restore", "needs_recovery")
        synced.clear()
        answer = op.post(f"/v1/operations/{listed['operation_id']}/recover", json={"fence": 0})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
    assert _in_worktree(synced, repo) == [str(repo), str(repo / "src")]
