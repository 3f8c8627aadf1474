"""Batched blob intake (``POST /v1/blobs:batchUpdate``) against a real daemon.

Per-blob answers match a single upload's codes; quotas, limits and framing errors;
the client's ``put_blobs`` (small blobs batched, big ones streamed); I/O errors inside
the batch leave nothing stored and no quota held.
"""

from __future__ import annotations

import errno
import json
import threading
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from promoter import faults
from promoter.api.deps import run_quota
from promoter.client.sync import PromoterClient
from promoter.domain.blob_frames import BATCH_BLOB_MAX, BATCH_MAX_BLOBS, frame_header
from promoter.errors import BlobHashMismatch
from promoter.fs import flush
from promoter.store import blob_batch
from promoter.store.tables import BlobRow
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import sha
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.pause import Pause

URL = "/v1/blobs:batchUpdate"


def body(*blobs: bytes) -> bytes:
    return b"".join(frame_header(sha(b), len(b)) + b for b in blobs)


def stored(state_dir: Path) -> set[str]:
    return {p.name for p in (state_dir / "audit" / "blobs").rglob("*") if p.is_file()}


def temps(state_dir: Path) -> list[Path]:
    tmp = state_dir / "audit" / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []


def recorded(daemon: Daemon) -> set[str]:
    with daemon.services.db.session() as session:
        return set(session.scalars(select(BlobRow.sha256)))


def code(answer: httpx.Response) -> tuple[int, str]:
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.text
    return answer.status_code, answer.json()["code"]


def _post_with_fault(
    ex: httpx.Client, monkeypatch: pytest.MonkeyPatch, spec: str, blobs: list[bytes]
) -> httpx.Response:
    """Post ``blobs`` as one batch with the fault ``spec`` injected, then clear it."""
    monkeypatch.setenv(faults.ENV, spec)
    faults.reset()
    try:
        return ex.post(URL, content=body(*blobs))
    finally:
        monkeypatch.delenv(faults.ENV)
        faults.reset()


def test_batch_stores_each_blob_and_answers_in_frame_order(daemon: Daemon) -> None:
    blobs = [b"alpha\n", b"", b"gamma" * 1000]
    with daemon.executor("run_1") as ex:
        answer = ex.post(URL, content=body(*blobs))
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "responses": [
                {
                    "sha256": sha(b),
                    "bytes": len(b),
                    "created": True,
                    "status": 201,
                    "code": None,
                    "detail": None,
                }
                for b in blobs
            ]
        }
        again = ex.post(URL, content=body(blobs[0]))
        assert again.json()["responses"][0]["status"] == 200
        assert again.json()["responses"][0]["created"] is False
    assert stored(daemon.state_dir) == {sha(b) for b in blobs}
    assert recorded(daemon) == {sha(b) for b in blobs}
    for b in blobs:
        path = daemon.state_dir / "audit" / "blobs" / "sha256" / sha(b)[:2] / sha(b)
        assert path.read_bytes() == b
        assert path.stat().st_mode & 0o777 == 0o444
    assert temps(daemon.state_dir) == []


def test_lying_digest_in_a_batch_refuses_that_blob_only(daemon: Daemon) -> None:
    honest, claimed, sent = b"honest\n", b"what was promised\n", b"what was sent!!!!\n"
    assert len(claimed) == len(sent)
    raw = body(honest) + frame_header(sha(claimed), len(sent)) + sent + body(b"after\n")
    with daemon.executor("run_1") as ex:
        answer = ex.post(URL, content=raw)
    items = answer.json()["responses"]
    assert [(i["status"], i["code"]) for i in items] == [
        (201, None),
        (422, "blob_hash_mismatch"),
        (201, None),
    ]
    assert stored(daemon.state_dir) == {sha(honest), sha(b"after\n")}
    assert sha(claimed) not in recorded(daemon) and sha(sent) not in recorded(daemon)
    assert temps(daemon.state_dir) == []


def test_batch_over_quota_refuses_the_blobs_past_it_and_charges_the_rest(
    tmp_path: Path, repo: Path
) -> None:
    first, second, third = b"a" * 600, b"b" * 600, b"c" * 300
    with running_daemon(tmp_path / "s", {"work": repo}, executor_quota_bytes=1000) as daemon:
        with daemon.executor("run_1") as ex:
            answer = ex.post(URL, content=body(first, second, third))
            items = answer.json()["responses"]
            assert [(i["status"], i["code"]) for i in items] == [
                (201, None),
                (507, "quota_exceeded"),
                (201, None),
            ]
            extra = b"d" * 200
            over = ex.put(f"/v1/blobs/sha256/{sha(extra)}", content=extra)
            assert code(over) == (507, "quota_exceeded")
            assert over.json()["stored"] == 900
        assert stored(daemon.state_dir) == {sha(first), sha(third)}
        assert temps(daemon.state_dir) == []


def test_blob_larger_than_a_batch_carries_is_refused_alone(daemon: Daemon) -> None:
    big, small = b"x" * (BATCH_BLOB_MAX + 1), b"small\n"
    with daemon.executor("run_1") as ex:
        answer = ex.post(URL, content=body(big, small))
    items = answer.json()["responses"]
    assert [(i["status"], i["code"]) for i in items] == [(413, "payload_too_large"), (201, None)]
    assert stored(daemon.state_dir) == {sha(small)}


@pytest.mark.parametrize(
    "raw",
    [
        b"not a header\n",
        frame_header("A" * 64, 1) + b"x",
        ("0" * 64 + " 01\n").encode() + b"x",
        ("0" * 64 + " 5\n").encode() + b"abc",  # the stream ends inside the blob
        ("0" * 64).encode(),  # ... inside a header
        b"0" * 200,  # a header line longer than any header
    ],
)
def test_malformed_or_truncated_frames_refuse_the_whole_batch(daemon: Daemon, raw: bytes) -> None:
    with daemon.executor("run_1") as ex:
        answer = ex.post(URL, content=body(b"first\n") + raw)
    assert code(answer) == (400, "bad_request")
    assert stored(daemon.state_dir) == set()
    assert recorded(daemon) == set()
    assert temps(daemon.state_dir) == []


def test_more_blobs_than_a_batch_takes_is_payload_too_large(daemon: Daemon) -> None:
    blobs = [b"%d" % n for n in range(BATCH_MAX_BLOBS + 1)]
    with daemon.executor("run_1") as ex:
        answer = ex.post(URL, content=body(*blobs))
    assert code(answer) == (413, "payload_too_large")
    assert stored(daemon.state_dir) == set()


def test_batch_needs_an_executor_token(daemon: Daemon) -> None:
    with daemon.orchestrator() as orch:
        answer = orch.post(URL, content=body(b"x"))
    assert answer.status_code in (401, 403)
    assert stored(daemon.state_dir) == set()


def test_client_batches_small_blobs_and_streams_big_ones(daemon: Daemon, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"B" * (BATCH_BLOB_MAX + 10))
    small = [b"one\n", b"two\n", b"one\n"]
    with daemon.executor("run_1") as ex:
        client = PromoterClient(daemon.url, ex.headers["authorization"].split()[1])
        with client:
            answers = client.put_blobs(
                [(sha(s), len(s), s) for s in small]
                + [(sha(big.read_bytes()), big.stat().st_size, big)]
            )
            assert [a["created"] for a in answers] == [True, True, False, True]
            with pytest.raises(BlobHashMismatch):
                client.put_blobs([(sha(b"claimed"), 4, b"sent")])
    assert stored(daemon.state_dir) == {sha(b"one\n"), sha(b"two\n"), sha(big.read_bytes())}


@pytest.mark.parametrize(
    ("point", "error"),
    [
        ("blob_batch_write", "ENOSPC"),
        ("blob_batch_synced", "EIO"),
        ("blob_batch_charged", "ENOSPC"),
    ],
)
def test_io_error_inside_a_batch_stores_nothing_and_keeps_no_quota(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, point: str, error: str
) -> None:
    blobs = [b"a" * 400, b"b" * 400]
    daemon_cm = running_daemon(tmp_path / "s", {"work": repo}, executor_quota_bytes=1000)
    with daemon_cm as daemon, daemon.executor("run_1") as ex:
        answer = _post_with_fault(ex, monkeypatch, f"{point}={error}@1+", blobs)
        assert code(answer) == (507, "storage_error")
        assert stored(daemon.state_dir) == set()
        assert temps(daemon.state_dir) == []
        again = ex.post(URL, content=body(*blobs))
        assert [i["status"] for i in again.json()["responses"]] == [201, 201]


def test_a_failed_fan_out_directory_fsync_refuses_the_batch_and_is_never_trusted(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = [bytes([i]) * 300 for i in range(40)]  # over many fan-out directories
    fan_out = {sha(b)[:2] for b in blobs}
    tried: list[str] = []
    real = blob_batch.fsync_dir

    def failing_once(path: Path) -> None:
        tried.append(path.name)
        if len(tried) == 1:
            raise OSError(errno.EIO, "injected")
        real(path)

    with (
        running_daemon(tmp_path / "s", {"work": repo}, group_sync=False) as daemon,
        daemon.executor("r") as ex,
    ):
        monkeypatch.setattr(blob_batch, "fsync_dir", failing_once)
        answer = ex.post(URL, content=body(*blobs))
        assert code(answer) == (507, "storage_error")
        assert set(tried) <= fan_out and len(tried) == len(set(tried))  # each once at most
        monkeypatch.setattr(blob_batch, "fsync_dir", real)
        tried.clear()
        again = ex.post(URL, content=body(*blobs))
        assert again.status_code == 200, again.text
        assert all(r["status"] in (200, 201) for r in again.json()["responses"])
        assert stored(daemon.state_dir) == {sha(b) for b in blobs}
        assert temps(daemon.state_dir) == []


def test_same_blobs_stored_by_another_batch_while_one_is_held_are_charged_once(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = [b"x" * 300, b"y" * 300]
    pause = Pause(tmp_path, "blob_batch_charged")
    answers: list[httpx.Response] = []
    with running_daemon(tmp_path / "s", {"work": repo}, executor_quota_bytes=10_000) as daemon:
        with daemon.executor("run_1") as held, daemon.executor("run_1") as other:
            monkeypatch.setenv(faults.ENV, pause.spec)
            faults.reset()
            worker = threading.Thread(
                target=lambda: answers.append(held.post(URL, content=body(*blobs)))
            )
            worker.start()
            pause.reached()  # charged for both blobs, nothing recorded or linked yet
            monkeypatch.delenv(faults.ENV)
            faults.reset()
            first = other.post(URL, content=body(*blobs, b"z" * 300))
            assert [i["status"] for i in first.json()["responses"]] == [201, 201, 201]
            pause.release()
            worker.join(60)
        late = answers[0].json()["responses"]
        assert [(i["status"], i["created"]) for i in late] == [(200, False), (200, False)]
        assert stored(daemon.state_dir) == {sha(b) for b in blobs} | {sha(b"z" * 300)}
        assert recorded(daemon) == stored(daemon.state_dir)
        assert run_quota(daemon.services).used("run_1") == 900  # paid once; held one refunded
        assert temps(daemon.state_dir) == []


@pytest.mark.parametrize(
    ("nth", "linked"), [(1, False), (2, True)], ids=["temps_sync", "links_sync"]
)
def test_a_failed_group_sync_refuses_the_batch_and_is_never_trusted(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, nth: int, linked: bool
) -> None:
    """One ``syncfs`` stands for every temp's fsync, another for every fan-out directory's:
    either failing refuses the whole batch (507), leaves no temp and is not retried; the
    same batch again stores every blob."""
    blobs = [bytes([i]) * 300 for i in range(40)]
    settings = {"group_sync_max_pending_bytes": NEVER_BUSY}
    with (
        running_daemon(tmp_path / "s", {"work": repo}, **settings) as daemon,
        daemon.executor("r") as ex,
    ):
        skip_without_group_sync(daemon.state_dir)
        answer = _post_with_fault(ex, monkeypatch, f"after_group_sync=EIO@{nth}", blobs)
        assert code(answer) == (507, "storage_error")
        assert answer.json()["detail"] == (
            "cannot store blob: [Errno 5] injected fault at after_group_sync: Input/output error"
        )
        # the temps' sync failed: nothing recorded or linked; the links' sync failed:
        # recorded and linked, and made durable only by a later sync
        every = {sha(b) for b in blobs}
        assert stored(daemon.state_dir) == recorded(daemon) == (every if linked else set())
        assert temps(daemon.state_dir) == []
        again = ex.post(URL, content=body(*blobs))
        assert again.status_code == 200, again.text
        statuses = [(r["status"], r["created"]) for r in again.json()["responses"]]
        assert statuses == [(200, False) if linked else (201, True)] * len(blobs)
        assert stored(daemon.state_dir) == recorded(daemon) == every


def test_a_grouped_batch_makes_its_charge_durable_with_its_temps(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quota record's temp joins the temps' ``syncfs``: a batch of new blobs costs that
    sync, an fsync of the record's folder and one ``syncfs`` for the links; a failed first
    sync charges nothing, on disk or in memory."""
    first = [bytes([i]) * 300 for i in range(3)]
    blobs = [bytes([i]) * 200 for i in range(3, 8)]
    settings = {"group_sync_max_pending_bytes": NEVER_BUSY}
    with (
        running_daemon(tmp_path / "s", {"work": repo}, **settings) as daemon,
        daemon.executor("r") as ex,
    ):
        skip_without_group_sync(daemon.state_dir)
        assert ex.post(URL, content=body(*first)).status_code == 200
        (record,) = (daemon.state_dir / "quota").iterdir()
        written = record.read_bytes()
        assert json.loads(written)["bytes"] == 900
        answer = _post_with_fault(ex, monkeypatch, "after_group_sync=EIO@1", blobs)
        assert code(answer) == (507, "storage_error")
        assert run_quota(daemon.services).used("r") == 900
        assert [p.read_bytes() for p in (daemon.state_dir / "quota").iterdir()] == [written]
        before = flush.flushes()
        answer = ex.post(URL, content=body(*blobs))
        counted = flush.flushes() - before
        assert answer.status_code == 200, answer.text
        assert [r["status"] for r in answer.json()["responses"]] == [201] * len(blobs)
        assert counted == {"syncfs": 2, "fsync": 1}
        assert json.loads(record.read_bytes())["bytes"] == 900 + 200 * len(blobs)
