"""A full blob batch against the open-file limit a service manager leaves a daemon with.

A batch holds a descriptor per blob until it commits (up to 2000), and the default soft
``RLIMIT_NOFILE`` of many systems is 1024: ``promoter serve`` raises its soft limit to
the hard one, and says in its log when it cannot reach what a full batch needs.
"""

from __future__ import annotations

import errno
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from promoter.api import fd_limit
from promoter.domain.blob_frames import BATCH_MAX_BLOBS, frame_header
from tests.support.flows import init_repo, sha
from tests.support.process import DaemonProcess

URL = "/v1/blobs:batchUpdate"
BLOBS = [b"blob %d\n" % n for n in range(BATCH_MAX_BLOBS)]
BODY = b"".join(frame_header(sha(b), len(b)) + b for b in BLOBS)
_, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)


def _stored(state_dir: Path) -> set[str]:
    return {p.name for p in (state_dir / "audit" / "blobs").rglob("*") if p.is_file()}


@pytest.mark.skipif(
    HARD != resource.RLIM_INFINITY and HARD < fd_limit.NEEDED,
    reason=f"the hard open-file limit {HARD} is below what a full batch needs",
)
def test_a_full_batch_is_stored_by_a_daemon_started_with_a_soft_limit_of_1024(
    tmp_path: Path,
) -> None:
    daemon = DaemonProcess(
        tmp_path / "state", {"work": init_repo(tmp_path / "repo")}, open_files=(1024, HARD)
    )
    try:
        with daemon.executor("run_1") as ex:
            answer = ex.post(URL, content=BODY, timeout=300)
        assert answer.status_code == 200, answer.text
        assert [r["status"] for r in answer.json()["responses"]] == [201] * BATCH_MAX_BLOBS
        assert _stored(tmp_path / "state") == {sha(b) for b in BLOBS}
        assert not any("open-file limit" in line for line in daemon.log)
    finally:
        daemon.kill()


def test_a_daemon_held_below_the_need_says_so_and_refuses_a_full_batch_as_storage_error(
    tmp_path: Path,
) -> None:
    daemon = DaemonProcess(
        tmp_path / "state", {"work": init_repo(tmp_path / "repo")}, open_files=(1024, 1024)
    )
    try:
        warned = [line for line in daemon.log if "open-file limit 1024 is below" in line]
        assert len(warned) == 1 and json.loads(warned[0])["level"] == "warning", daemon.log
        with daemon.executor("run_1") as ex:
            answer = ex.post(URL, content=BODY, timeout=300)
        assert answer.status_code == 507, answer.text
        assert answer.json()["code"] == "storage_error"
        assert "Too many open files" in answer.json()["detail"]
        assert _stored(tmp_path / "state") == set()  # nothing of the refused batch
        assert not list((tmp_path / "state" / "audit" / "tmp").glob("*"))
    finally:
        daemon.kill()


def _in_child(soft: int, wanted: int) -> list[int]:
    """``raise_open_files(wanted)`` in a child started with the soft limit ``soft``:
    ``[answer, soft limit after, hard limit after]``."""
    code = (
        "import json, resource, sys\n"
        "from promoter.api.fd_limit import raise_open_files\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))\n"
        "answer = raise_open_files(int(sys.argv[2]))\n"
        "print(json.dumps([answer, *resource.getrlimit(resource.RLIMIT_NOFILE)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(soft), str(wanted)],
        check=True,
        capture_output=True,
        text=True,
    )
    return list(json.loads(out.stdout))


@pytest.mark.skipif(
    HARD != resource.RLIM_INFINITY and HARD < 4096, reason="the hard limit is below 4096"
)
def test_the_soft_limit_is_raised_up_to_what_is_wanted_and_never_lowered() -> None:
    assert _in_child(1024, 4096) == [4096, 4096, HARD]
    assert _in_child(2048, 1024) == [2048, 2048, HARD]  # already above: left as it was


def test_a_sandbox_refusing_setrlimit_leaves_the_limit_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    calls: list[tuple[int, int]] = []

    def refuse(which: int, limits: tuple[int, int]) -> None:
        calls.append(limits)
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, hard))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert fd_limit.raise_open_files(4096) == 256
    assert calls == [(4096 if hard == resource.RLIM_INFINITY else min(hard, 4096), hard)]
    monkeypatch.undo()
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)  # untouched
