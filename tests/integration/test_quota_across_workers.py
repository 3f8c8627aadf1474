"""One executor run's storage quota across ``promoter serve --workers 2``
(protocol: storage#storage-quota; TESTS.md F4: two processes on one state directory).

The run may store 1000 bytes. Blob A (600 bytes) is sent in a batch and paused in the
worker that takes it after its bytes are reserved and flushed, before it is charged
(``blob_batch_synced``, the first batch each worker sees). Blob B (600 bytes) is then sent
by ``PUT`` on fresh connections until one lands in the other worker, which stores it (a
``PUT`` that lands in the paused worker is refused at its reservation: that worker holds
A's 600 bytes in flight). When A goes on, the run has 600 bytes stored: A must be refused
with ``quota_exceeded`` and the run's record must hold exactly the bytes stored, 600. A
worker that charged from its own total in memory stored both (1200 bytes, the record
600: B's charge lost).
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from promoter.domain.blob_frames import frame_header
from tests.support.flows import init_repo, sha
from tests.support.pause import Pause
from tests.support.process import DaemonProcess

QUOTA = 1000
FIRST = b"a" * 600
SECOND = b"b" * 600
TRIES = 200  # fresh connections for B until the kernel hands one to the other worker


def _stored(state: Path) -> dict[str, int]:
    found = {p.name: p.stat().st_size for p in (state / "audit" / "blobs").rglob("*")}
    return {name: size for name, size in found.items() if len(name) == 64}


def test_a_run_spread_over_two_workers_stores_no_more_than_its_quota(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"README": b"hi\n"})
    charge = Pause(tmp_path, "blob_batch_synced")
    daemon = DaemonProcess(
        tmp_path / "state",
        {"work": repo},
        faults=charge.spec,
        extra_env={"PROMOTER_EXECUTOR_QUOTA_BYTES": str(QUOTA)},
        workers=2,
    )
    try:
        with daemon.executor("run_q") as ex, ThreadPoolExecutor(1) as pool:
            token = ex.headers["Authorization"]
            body = frame_header(sha(FIRST), len(FIRST)) + FIRST
            first = pool.submit(
                ex.post,
                "/v1/blobs:batchUpdate",
                content=body,
                headers={"Content-Type": "application/octet-stream"},
            )
            charge.reached()
            paused = Path(f"{charge.release_file}.paused").read_text()
            answers: list[tuple[int, str | None]] = []
            for _ in range(TRIES):
                with daemon.client() as fresh:  # a connection of its own: the kernel picks
                    fresh.headers["Authorization"] = token
                    answer = fresh.put(f"/v1/blobs/sha256/{sha(SECOND)}", content=SECOND)
                answers.append((answer.status_code, answer.json().get("code")))
                if answer.status_code != 507:
                    break
            # refused only by the paused worker (A in flight there), stored by the other
            assert set(answers[:-1]) <= {(507, "quota_exceeded")}, answers
            assert answers[-1] == (201, None), answers
            charge.release()
            answer = first.result()
        assert paused.isdigit()
        assert answer.status_code == 200, answer.text
        [item] = answer.json()["responses"]
        assert (item["status"], item["code"], item["created"]) == (507, "quota_exceeded", False)
        assert _stored(daemon.state_dir) == {sha(SECOND): len(SECOND)}
        record = daemon.state_dir / "quota" / f"{hashlib.sha256(b'run_q').hexdigest()[:32]}.json"
        assert json.loads(record.read_bytes()) == {"executor_run_id": "run_q", "bytes": 600}
    finally:
        assert daemon.stop() == 0
