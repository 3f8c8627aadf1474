"""Availability under hostile executors (protocol: api#hostile-input, TESTS W9), through the real
server.

Each attack runs while a second client polls ``/healthz`` from its own thread; every one
of those answers must come within 1 s (the spec's bound) and the attack must answer its
exact code with nothing stored. Memory is measured on a daemon in its own process (peak
RSS from ``/proc/<pid>/status``), so the test client's own buffers do not count.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, make_bundle, make_grant, seal_bundle, sha, state, upload
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.process import DaemonProcess

HEALTHZ_BOUND = 1.0  # seconds: protocol: api#hostile-input, TESTS W9
MiB = 1024 * 1024


class HealthzWatch:
    """Polls ``/healthz`` in a thread; records each answer's latency and status."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=30)
        self._stop = threading.Event()
        self.answered = threading.Event()
        self.samples: list[tuple[float, float, int]] = []  # (started, latency, status)
        self._thread = threading.Thread(target=self._run, name="healthz-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                status = self._client.get("/healthz").status_code
            except httpx.HTTPError:
                status = 0
            self.samples.append((started, time.monotonic() - started, status))
            self.answered.set()
            self._stop.wait(0.02)  # pacing between polls, not synchronization

    def during(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [s for s in self.samples if s[0] >= start and s[0] + s[1] <= end]

    @property
    def slowest(self) -> float:
        return max(latency for _, latency, _ in self.samples)

    def __enter__(self) -> HealthzWatch:
        self._thread.start()
        assert self.answered.wait(30), "healthz never answered"
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._client.close()
        if exc_type is not None:
            return  # the body's own failure is the one to report
        assert [s for s in self.samples if s[2] != 200] == []
        assert self.slowest < HEALTHZ_BOUND, f"healthz took {self.slowest:.3f} s"


def _peak_rss(pid: int) -> int:
    """Peak resident set size of ``pid`` in bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def _code(answer: httpx.Response) -> tuple[int, str]:
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.text
    return answer.status_code, answer.json()["code"]


def _stored_blobs(state_dir: Path) -> list[Path]:
    return [p for p in (state_dir / "audit" / "blobs").rglob("*") if p.is_file()]


def _temp_files(state_dir: Path) -> list[Path]:
    tmp = state_dir / "audit" / "tmp"
    return list(tmp.iterdir()) if tmp.exists() else []


# --- bounded JSON ---------------------------------------------------------------------


@pytest.mark.slow
def test_sixty_mib_of_empty_arrays_is_refused_before_parsing(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work")
    daemon = DaemonProcess(tmp_path / "state", {"work": repo})
    try:
        body = b"[" + b"[]," * (20 * MiB) + b"[]]"  # 60 MiB, 21 million values
        with daemon.executor("run_1") as ex:
            assert ex.post("/v1/blobs:missing", json={"sha256": []}).status_code == 200
            before = _peak_rss(daemon.proc.pid)
            with HealthzWatch(daemon.url):
                answer = ex.post(
                    "/v1/bundles", content=body, headers={"content-type": "application/json"}
                )
            assert _code(answer) == (413, "json_too_many_items")
            assert answer.json()["limit"] == 250_000
            grown = _peak_rss(daemon.proc.pid) - before
        assert grown < 200 * MiB, f"the daemon grew by {grown / MiB:.0f} MiB"
        print(f"peak RSS growth for 60 MiB of []: {grown / MiB:.1f} MiB")
    finally:
        daemon.stop()


def test_deeply_nested_json_is_refused(daemon: Daemon) -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    with daemon.executor("run_1") as ex, HealthzWatch(daemon.url):
        for path in ("/v1/bundles", "/v1/blobs:missing"):
            answer = ex.post(path, content=nested, headers={"content-type": "application/json"})
            assert _code(answer) == (422, "json_too_deep")
            assert answer.json()["limit"] == 64
        inside_a_string = b'{"sha256": ["' + b"[" * 100_000 + b'"]}'
        answer = ex.post("/v1/blobs:missing", content=inside_a_string)
        assert _code(answer) == (422, "validation_failed")  # brackets in a string are text
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/promotions", content=b'{"a":' * 65 + b"1" + b"}" * 65)
        assert _code(answer) == (422, "json_too_deep")


def test_a_string_of_escaped_quotes_is_scanned_in_linear_time(daemon: Daemon) -> None:
    body = b'{"sha256": ["' + b'\\"' * (4 * MiB) + b'"]}'  # 8 MiB, one string
    with daemon.executor("run_1") as ex, HealthzWatch(daemon.url) as watch:
        started = time.monotonic()
        answer = ex.post("/v1/blobs:missing", content=body)
        elapsed = time.monotonic() - started
    assert _code(answer) == (422, "validation_failed")
    assert elapsed < 30  # generous: about 0.6 s; the quadratic scan did not end in 300 s
    print(f"8 MiB of escaped quotes: {elapsed:.2f} s, slowest healthz {watch.slowest:.3f} s")


def test_small_request_bodies_are_capped_at_64_kib(daemon: Daemon) -> None:
    padded = b'{"bundle_id": "' + b"x" * (64 * 1024) + b'"}'
    with daemon.orchestrator() as orch:
        for path in ("/v1/promotions", "/v1/operations/op_1/recover", "/v1/leases/wf/st"):
            method = "PUT" if "leases" in path else "POST"
            answer = orch.request(method, path, content=padded)
            assert _code(answer) == (413, "payload_too_large")


# --- blocking work off the event loop ---------------------------------------------------


def test_hundred_thousand_digest_query_does_not_stall_healthz(daemon: Daemon) -> None:
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(100_000)]
    with daemon.executor("run_1") as ex:
        upload(ex, b"0")  # sha256("0") is digests[0]: present, so not missing
        body = json.dumps({"sha256": digests}).encode()  # encoded before polling begins
        with HealthzWatch(daemon.url) as watch:
            started = time.monotonic()
            answer = ex.post("/v1/blobs:missing", content=body)
            ended = time.monotonic()
        assert answer.status_code == 200, answer.text
        assert answer.json()["missing"] == digests[1:]
        print(f"100k digests: {ended - started:.2f} s, slowest healthz {watch.slowest:.3f} s")
        too_many = [*digests, sha(b"one more")]
        assert _code(ex.post("/v1/blobs:missing", json={"sha256": too_many})) == (
            413,
            "payload_too_large",
        )


def _generated(
    repo: Path, identity: str, count: int
) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """A grant admitting ``count`` creates, and a sealed bundle of them (one shared blob)."""
    content = b"generated\n"
    grant = make_grant(
        repo, identity, limits={"max_changes": count, "max_total_bytes": count * len(content)}
    )
    new = state(content)
    changes = [
        {"path": f"gen/f{i:06d}.txt", "operation": "create", "old": state(None), "new": new}
        for i in range(count)
    ]
    return grant, make_bundle(grant, changes), content


def _generated_bundle(
    daemon: Daemon, repo: Path, identity: str, count: int
) -> tuple[dict[str, Any], bytes]:
    grant, bundle, content = _generated(repo, identity, count)
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    return bundle, content


@pytest.mark.slow
def test_hundred_thousand_change_bundle_is_refused_before_parsing(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle, content = _generated_bundle(daemon, repo, identity, 100_000)
    with daemon.executor("run_1") as ex:
        upload(ex, content)
        body = json.dumps(bundle).encode()  # encoded before polling begins
        with HealthzWatch(daemon.url):
            answer = ex.post("/v1/bundles", content=body)
    assert _code(answer) == (413, "json_too_many_items")
    assert list((daemon.state_dir / "audit").glob("bundles/*")) == []


def test_ten_thousand_change_bundle_verifies_off_the_event_loop(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    bundle, content = _generated_bundle(daemon, repo, identity, 10_000)
    with daemon.executor("run_1") as ex:
        upload(ex, content)
        body = json.dumps(bundle).encode()  # encoded before polling begins
        with HealthzWatch(daemon.url) as watch:
            started = time.monotonic()
            answer = ex.post("/v1/bundles", content=body)
            ended = time.monotonic()
    assert answer.status_code == 201, answer.text[:500]
    assert answer.json()["verification_receipt"]["status"] == "passed"
    assert len(watch.during(started, ended)) >= 1
    print(
        f"10k-change bundle: verified in {ended - started:.2f} s, "
        f"{len(watch.during(started, ended))} healthz answers meanwhile, "
        f"slowest {watch.slowest:.3f} s"
    )


@contextmanager
def _paused_at(point: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Arm ``point=pause:<release>``; yields a function that waits until it is reached.

    The fault announces the pause by opening ``<release>.paused`` for writing; that name
    is a FIFO here, so the test's open for reading meets it exactly then (no polling).
    Leaving the block releases the pause.
    """
    release = tmp / f"release-{point}"
    os.mkfifo(f"{release}.paused")
    monkeypatch.setenv(faults.ENV, f"{point}=pause:{release}")
    faults.reset()

    def reached() -> None:
        announced: list[str] = []
        meet = threading.Thread(
            target=lambda: announced.append(Path(f"{release}.paused").read_text()), daemon=True
        )
        meet.start()
        meet.join(60)  # a bound for a broken test only: the open returns at the pause
        assert announced == [str(os.getpid())], f"{point} was never reached"
        monkeypatch.delenv(faults.ENV)  # later writes of this request go on unpaused

    try:
        yield reached
    finally:
        release.touch()


def test_upload_paused_inside_a_blob_write_does_not_stall_healthz(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"held inside os.write\n"
    answers: list[httpx.Response] = []
    with daemon.executor("run_1") as ex:
        worker = threading.Thread(
            target=lambda: answers.append(ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data))
        )
        with _paused_at("blob_write", tmp_path, monkeypatch) as reached:
            worker.start()
            reached()  # a worker thread now sits inside the blob write
            with HealthzWatch(daemon.url) as watch:
                assert watch.answered.is_set()
            assert answers == []
        worker.join(60)
    assert (answers[0].status_code, answers[0].json()["created"]) == (201, True)


def test_bundle_paused_inside_its_audit_write_does_not_stall_healthz(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grant = make_grant(repo, identity)
    old, new = b"print('v1')\n", b"print('v2')\n"
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    bundle = make_bundle(grant, [("src/app.py", old, new)])
    answers: list[httpx.Response] = []
    with daemon.executor("run_1") as ex:
        upload(ex, old, new)
        worker = threading.Thread(
            target=lambda: answers.append(ex.post("/v1/bundles", json=bundle))
        )
        with _paused_at("state_write", tmp_path, monkeypatch) as reached:
            worker.start()
            reached()  # verified, and now held writing the bundle's audit file
            with HealthzWatch(daemon.url), daemon.orchestrator() as orch:
                assert orch.get("/v1/repositories").status_code == 200
            assert answers == []
        worker.join(60)
    assert answers[0].status_code == 201, answers[0].text


_LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


@contextmanager
def _foreign_write_lock(database: Path) -> Iterator[None]:
    """Another process holds the SQLite write lock (BEGIN IMMEDIATE) until released."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)


@pytest.mark.sqlite_only
def test_healthz_answers_while_a_foreign_process_holds_the_sqlite_write_lock(
    tmp_path: Path, repo: Path
) -> None:
    busy = 2.0
    with running_daemon(tmp_path / "s", {"work": repo}, database_busy_timeout=busy) as daemon:
        data = b"written while the database is locked\n"
        with daemon.executor("run_1") as ex:
            with (
                _foreign_write_lock(daemon.state_dir / "promoter.db"),
                HealthzWatch(daemon.url) as watch,
            ):
                started = time.monotonic()
                answer = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
                ended = time.monotonic()
                with daemon.orchestrator() as orch:  # reads go on under the write lock
                    assert orch.get("/v1/repositories").status_code == 200
            assert _code(answer) == (503, "database_busy")
            assert ended - started >= busy
            assert len(watch.during(started, ended)) >= 3
            assert _stored_blobs(daemon.state_dir) == []
            assert _temp_files(daemon.state_dir) == []
            again = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
        assert (again.status_code, again.json()["created"]) == (201, True)
        print(
            f"blocked write answered after {ended - started:.2f} s; "
            f"{len(watch.during(started, ended))} healthz answers, slowest {watch.slowest:.3f} s"
        )


# --- storage quota and a full state directory ---------------------------------------------


def test_executor_over_storage_quota_is_refused(tmp_path: Path, repo: Path) -> None:
    first, second, third = b"a" * 600, b"b" * 600, b"c" * 300
    with running_daemon(tmp_path / "s", {"work": repo}, executor_quota_bytes=1000) as daemon:
        with daemon.executor("run_1") as ex:
            assert ex.put(f"/v1/blobs/sha256/{sha(first)}", content=first).status_code == 201
            declared = ex.put(f"/v1/blobs/sha256/{sha(second)}", content=second)
            assert _code(declared) == (507, "quota_exceeded")
            streamed = ex.put(
                f"/v1/blobs/sha256/{sha(second)}", content=iter([second[:300], second[300:]])
            )
            assert _code(streamed) == (507, "quota_exceeded")
            assert ex.put(f"/v1/blobs/sha256/{sha(first)}", content=first).status_code == 200
            assert ex.put(f"/v1/blobs/sha256/{sha(third)}", content=third).status_code == 201
        stored = {p.name for p in _stored_blobs(daemon.state_dir)}
        assert stored == {sha(first), sha(third)}
        assert _temp_files(daemon.state_dir) == []
        with daemon.executor("run_2") as other:
            assert other.put(f"/v1/blobs/sha256/{sha(second)}", content=second).status_code == 201
    restarted = running_daemon(tmp_path / "s", {"work": repo}, executor_quota_bytes=1000)
    with restarted as daemon, daemon.executor("run_1") as ex:  # the charge survives a restart
        extra = b"d" * 200
        answer = ex.put(f"/v1/blobs/sha256/{sha(extra)}", content=extra)
        assert _code(answer) == (507, "quota_exceeded")
        assert answer.json()["stored"] == 900


@pytest.mark.parametrize(
    ("point", "error"),
    [("blob_write", "ENOSPC"), ("blob_commit", "EDQUOT"), ("state_write", "ENOSPC")],
)
def test_full_state_dir_answers_storage_error_507(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, point: str, error: str
) -> None:
    data = b"x" * (3 * MiB)
    with daemon.executor("run_1") as ex:
        monkeypatch.setenv(faults.ENV, f"{point}={error}@1+")
        faults.reset()
        answer = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
        monkeypatch.delenv(faults.ENV)
        assert _code(answer) == (507, "storage_error")
        assert _stored_blobs(daemon.state_dir) == []
        assert _temp_files(daemon.state_dir) == []
        assert ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data).status_code == 201


def test_failed_group_sync_of_an_upload_refuses_it_and_gives_the_charge_back(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = tmp_path / "s"
    state_dir.mkdir()
    skip_without_group_sync(state_dir)
    first, data = b"stored first\n", b"y" * 5000
    settings = {"group_sync_max_pending_bytes": NEVER_BUSY}
    with running_daemon(state_dir, {"work": repo}, **settings) as daemon:
        record = daemon.state_dir / "quota"
        with daemon.executor("run_1") as ex:
            assert ex.put(f"/v1/blobs/sha256/{sha(first)}", content=first).status_code == 201
            (written,) = record.iterdir()
            before = written.read_bytes()
            monkeypatch.setenv(faults.ENV, "after_upload_group_sync=EIO@1")
            faults.reset()
            answer = ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data)
            monkeypatch.delenv(faults.ENV)
            assert _code(answer) == (507, "storage_error")
            assert [p.name for p in _stored_blobs(daemon.state_dir)] == [sha(first)]
            assert _temp_files(daemon.state_dir) == []
            assert [p.read_bytes() for p in record.iterdir()] == [before]
            assert json.loads(before)["bytes"] == len(first)
            assert ex.put(f"/v1/blobs/sha256/{sha(data)}", content=data).status_code == 201
        assert json.loads(written.read_bytes())["bytes"] == len(first) + len(data)


def test_full_state_dir_refuses_a_bundle_with_storage_error_507(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    grant = make_grant(repo, identity)
    old, new = b"print('v1')\n", b"print('v2')\n"
    with daemon.orchestrator() as orch:
        assert orch.post("/v1/grants", json=grant).status_code == 201
    bundle = make_bundle(grant, [("src/app.py", old, new)])
    with daemon.executor("run_1") as ex:
        upload(ex, old, new)
        monkeypatch.setenv(faults.ENV, "state_write=ENOSPC@1+")
        faults.reset()
        answer = ex.post("/v1/bundles", json=bundle)
        monkeypatch.delenv(faults.ENV)
        assert _code(answer) == (507, "storage_error")
        assert list((daemon.state_dir / "audit").glob("bundles/*")) == []
        assert ex.post("/v1/bundles", json=bundle).status_code == 201


@contextmanager
def _small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.sqlite_only  # the database must be on the full filesystem
def test_really_full_tmpfs_state_dir_answers_storage_error_507(tmp_path: Path, repo: Path) -> None:
    with (
        _small_tmpfs(tmp_path / "tiny", "8m") as state_dir,
        running_daemon(state_dir / "state", {"work": repo}) as daemon,
        daemon.executor("run_1") as ex,
    ):
        big = os.urandom(12 * MiB)
        answer = ex.put(f"/v1/blobs/sha256/{sha(big)}", content=big)
        assert _code(answer) == (507, "storage_error")
        assert _stored_blobs(daemon.state_dir) == []
        assert _temp_files(daemon.state_dir) == []
        filler = state_dir / "filler"
        with filler.open("wb", buffering=0) as handle, pytest.raises(OSError):
            while True:
                handle.write(b"\0" * MiB)
        with daemon.orchestrator() as orch:
            answer = orch.post(
                "/v1/executor-tokens", json={"executor_run_id": "run_2", "ttl_seconds": 60}
            )
        assert _code(answer) == (507, "storage_error")
        small = b"tiny\n"
        assert _code(ex.put(f"/v1/blobs/sha256/{sha(small)}", content=small)) == (
            507,
            "storage_error",
        )
        filler.unlink()
        assert ex.put(f"/v1/blobs/sha256/{sha(small)}", content=small).status_code == 201


@pytest.mark.slow
def test_concurrent_large_bundles_do_not_stall_healthz(tmp_path: Path, repo: Path) -> None:
    """Four 10 000-change bundles at once, against a daemon in its own process."""
    daemon = DaemonProcess(tmp_path / "state", {"work": repo})
    try:
        with daemon.client() as orch:
            identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
            grant, bundle, content = _generated(repo, identity, 10_000)
            assert orch.post("/v1/grants", json=grant).status_code == 201
        bundles = [
            seal_bundle({**bundle, "created_at": f"2026-01-01T00:00:0{n}Z"}) for n in range(4)
        ]
        bodies = [json.dumps(b).encode() for b in bundles]
        answers: list[int] = []
        with daemon.executor("run_1") as ex:
            upload(ex, content)

            def submit(body: bytes) -> None:
                answers.append(ex.post("/v1/bundles", content=body).status_code)

            with HealthzWatch(daemon.url) as watch:
                started = time.monotonic()
                workers = [threading.Thread(target=submit, args=(b,)) for b in bodies]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join(300)
                ended = time.monotonic()
        assert sorted(answers) == [201] * 4
        print(
            f"4 concurrent 10k-change bundles: {ended - started:.2f} s, "
            f"{len(watch.during(started, ended))} healthz answers, slowest {watch.slowest:.3f} s"
        )
    finally:
        daemon.stop()
