"""A bundle diff of huge blobs cannot exhaust the daemon: bounded memory, a free event loop.

Before, ``GET /v1/bundles/{id}/diff`` decoded both sides whole and ran ``difflib`` on
them: two 32 MiB blobs took 2.6 GiB and stalled ``/healthz``. Here a real daemon process
serves three such requests at once over two 64 MiB many-line blobs (summarized: over
``review_diff_max_file_bytes``) and a file just under the cap (diffed by git, its output
kept up to the limit); its peak resident memory (``VmHWM``, reset to the current size
before the requests) must grow less than ``BOUND``, and ``/healthz`` answers while a diff
is paused half-way (fault point ``bundle_diff_file``).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gitutil import commit_all
from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion

MIB = 1024 * 1024
BOUND = 64 * MIB  # growth of the daemon's peak RSS over the three requests (measured: 14)
BIG_OLD = b"a\n" * (32 * MIB)  # 64 MiB, 32 Mi lines
BIG_NEW = b"a\n" * (16 * MIB) + b"b\n" + b"a\n" * (16 * MIB - 1)
MID = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.6 MiB: under the 4 MiB cap


def _vm(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {name} for {pid}")


@pytest.mark.slow
def test_three_diffs_of_64_mib_blobs_at_once_stay_in_bounded_memory(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"big.txt": BIG_OLD})
    commit_all(repo, "big")
    pause = Pause(tmp_path, "bundle_diff_file")
    daemon = DaemonProcess(tmp_path / "state", {"work": repo}, faults=pause.spec)
    try:
        request = prepare_promotion(
            daemon, repo, [("big.txt", BIG_OLD, BIG_NEW), ("mid.txt", None, MID)]
        )
        pid = daemon.proc.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _vm(pid, "VmHWM")
        answers: list[dict[str, Any]] = []

        def ask() -> None:
            with daemon.client("operator") as operator:
                answer = operator.get(f"/v1/bundles/{request['bundle_id']}/diff")
                assert answer.status_code == 200, "\n".join(daemon.log[-20:])
                answers.append(answer.json())

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for thread in threads:
            thread.start()
        pause.reached()  # one diff is half-way: the event loop still answers
        health = httpx.get(f"{daemon.url}/healthz", timeout=30)
        assert health.status_code == 200
        pause.release()
        for thread in threads:
            thread.join(600)
        growth = _vm(pid, "VmHWM") - before
    finally:
        daemon.stop()
    assert len(answers) == 3
    assert answers[0] == answers[1] == answers[2]
    big, mid = answers[0]["files"]
    assert (big["path"], big["summarized"], big["binary"]) == ("big.txt", True, False)
    assert (big["old_lines"], big["new_lines"]) == (32 * MIB, 32 * MIB)
    assert big["new_sha256"] == hashlib.sha256(BIG_NEW).hexdigest()
    assert (mid["path"], mid["summarized"], mid["added"], mid["removed"]) == (
        "mid.txt",
        False,
        300_000,
        0,
    )
    assert answers[0]["truncated"] is True
    assert len(answers[0]["unified_diff"].encode()) <= answers[0]["limit"]
    print(f"VmHWM growth over three 64 MiB diffs: {growth / MIB:.1f} MiB")
    assert growth < BOUND, f"peak RSS grew {growth / MIB:.1f} MiB"
