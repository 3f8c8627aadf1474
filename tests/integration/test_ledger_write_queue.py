"""The ledger's write queue on SQLite (``promoter.store.write_queue``): writers one at a
time, woken the moment the one before them is done, the wait bounded by the busy timeout.

The test itself holds the queue's lock (``<database>.write-lock``) where a worker would
hold it inside a write transaction: the writers of both workers of ``promoter serve
--workers 2`` queue behind it (each watches the state directory for the lock's release,
seen in its ``fdinfo``), and once it is
dropped every promotion completes exactly once, into one repository and another, with no
deadlock and no ``database_busy``. A writer whose busy timeout passes in the queue fails
busy and writes nothing (waiting on inotify, or without it in a thread, whose late
lock is dropped at once). A
symlink planted at the lock's path is never followed: its target is not touched, and the
writers go to SQLite's own lock. PostgreSQL has no such queue (SQLite only).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from promoter.errors import DatabaseBusy
from promoter.store import write_queue
from promoter.store.db import Database
from promoter.store.write_queue import SUFFIX
from tests.support.flows import init_repo, make_bundle, make_grant
from tests.support.process import DaemonProcess, upload_blobs

pytestmark = [pytest.mark.sqlite_only]

_BOUND = 60.0  # seconds a condition the test waits for may take before it fails
REPOS = ("left", "right")
CLIENTS = 8


@contextmanager
def _held(path: Path) -> Iterator[int]:
    """The queue's lock of ``path`` held by this test, as a writer inside its transaction."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield descriptor
    finally:
        os.close(descriptor)


def _waiters(path: Path, pids: set[int]) -> list[int]:
    """For each writer of ``pids`` waiting in the queue of the lock file ``path``, its
    process id: one blocked on its ``flock`` (``/proc/locks``' ``->`` lines), or one
    watching the lock's folder for closes (an inotify watch in its ``fdinfo``)."""
    lock_inode, folder_inode = os.stat(path).st_ino, os.stat(path.parent).st_ino
    waiting: list[int] = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        blocked = len(fields) > 6 and fields[1] == "->" and fields[2] == "FLOCK"
        if blocked and int(fields[6].rsplit(":", 1)[1]) == lock_inode and int(fields[5]) in pids:
            waiting.append(int(fields[5]))
    for pid in pids:
        for info in Path(f"/proc/{pid}/fdinfo").iterdir():
            try:
                text = info.read_text()
            except FileNotFoundError:  # closed meanwhile
                continue
            for line in text.splitlines():
                if not line.startswith("inotify wd:"):
                    continue
                fields = dict(f.split(":", 1) for f in line.split()[1:] if ":" in f)
                closes = int(fields["mask"], 16) & 0x8  # IN_CLOSE_WRITE
                if closes and int(fields["ino"], 16) == folder_inode:
                    waiting.append(pid)
    return waiting


def _free(path: Path) -> bool:
    descriptor = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + _BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.01)  # polls a condition; the order of events is the locks'


def _workers(pid: int) -> set[int]:
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children |= {int(c) for c in (task / "children").read_text().split()}
    return children


def test_both_workers_queue_behind_a_held_write_and_every_promotion_completes(
    tmp_path: Path,
) -> None:
    repos = {name: init_repo(tmp_path / name, {"README": b"hi\n"}) for name in REPOS}
    daemon = DaemonProcess(tmp_path / "state", repos, workers=2)
    lock = tmp_path / "state" / f"promoter.db{SUFFIX}"
    try:
        with daemon.client() as orch:
            listed = orch.get("/v1/repositories").json()["repositories"]
            identities = {r["name"]: r["repository_identity"] for r in listed}
            grants: dict[str, dict[str, Any]] = {}
            for name, repo in repos.items():
                grant = make_grant(repo, identities[name], grant_id=f"grt_{name}")
                assert orch.post("/v1/grants", json=grant).status_code == 201
                grants[name] = grant
            lease = {
                "run_id": "run_1",
                "attempt": 1,
                "generation": 1,
                "resume_epoch": 0,
                "fence": 7,
                "expires_at": "2099-01-01T00:00:00Z",
            }
            assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
        with daemon.executor("run_1") as ex:
            token = ex.headers["Authorization"]
        assert lock.stat().st_mode & 0o777 == 0o600
        workers = _workers(daemon.proc.pid)
        assert len(workers) == 2
        done: dict[str, tuple[Path, bytes]] = {}
        seen = threading.Lock()

        def promote(batch: int, client_no: int) -> None:
            name = REPOS[client_no % 2]
            data = b"batch %d client %d\n" % (batch, client_no)
            path = f"b{batch}-c{client_no}.txt"
            bundle = make_bundle(grants[name], [(path, None, data)])
            with (
                httpx.Client(
                    base_url=daemon.url, timeout=120, headers={"Authorization": token}
                ) as ex,
                daemon.client() as orch,
            ):
                upload_blobs(ex, [data])
                answer = ex.post("/v1/bundles", json=bundle)
                assert answer.status_code == 201, answer.text
                receipt = answer.json()["verification_receipt"]["receipt_sha256"]
                answer = orch.post(
                    "/v1/promotions",
                    json={
                        "bundle_id": bundle["bundle_id"],
                        "fence": 7,
                        "wait": True,
                        "verification_receipt_sha256": receipt,
                    },
                )
                assert answer.status_code in (200, 201, 202), answer.text
                assert answer.json()["status"] == "completed", answer.json()
            with seen:
                done[bundle["bundle_id"]] = (repos[name] / path, data)

        queued: set[int] = set()
        for batch in range(5):  # until both workers had writers in the queue at once
            with ThreadPoolExecutor(CLIENTS) as pool:
                with _held(lock):
                    futures = [pool.submit(promote, batch, c) for c in range(CLIENTS)]
                    _until(
                        lambda: len(_waiters(lock, workers)) >= CLIENTS,
                        "every client's writer queued behind the held lock",
                    )
                    queued = set(_waiters(lock, workers))
                for future in futures:
                    future.result()  # no deadlock, no database_busy: each one completed
            if queued == workers:
                break
        assert queued == workers  # both workers' writers waited in the queue together
        for path, data in done.values():
            assert path.read_bytes() == data
        with daemon.client("operator") as op:
            listed = op.get("/v1/operations").json()["operations"]
        by_bundle: dict[str, list[str]] = {}
        for operation in listed:
            by_bundle.setdefault(operation["bundle_id"], []).append(operation["status"])
        assert by_bundle == {bundle_id: ["completed"] for bundle_id in done}
        assert _free(lock)
    finally:
        assert daemon.stop() == 0


def _ledger(tmp_path: Path, busy_timeout: float) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'promoter.db'}", busy_timeout)
    with database.engine.connect() as connection:
        connection.exec_driver_sql("CREATE TABLE IF NOT EXISTS marks (name TEXT)")
        connection.commit()
    return database


def _marks(database: Database) -> list[str]:
    with database.session() as session:
        return [str(r[0]) for r in session.execute(sa.text("SELECT name FROM marks"))]


def _no_inotify() -> None:
    raise OSError(errno.ENOSYS, "inotify is not available on this system")


@pytest.mark.parametrize("watching", [True, False], ids=["inotify", "thread"])
def test_a_writer_past_its_busy_timeout_in_the_queue_fails_busy_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watching: bool
) -> None:
    if not watching:  # the wait without inotify: a thread of its own
        monkeypatch.setattr(write_queue.inotify, "Inotify", _no_inotify)
    database = _ledger(tmp_path, busy_timeout=0.2)
    lock = tmp_path / f"promoter.db{SUFFIX}"
    try:
        before = set(threading.enumerate())
        with _held(lock):
            with pytest.raises(DatabaseBusy), database.session() as session:
                session.execute(sa.text("INSERT INTO marks VALUES ('queued')"))
            assert _marks(database) == []
        # the lock the given-up writer's thread gets once this one is dropped is let go:
        # the thread ends once it has taken and dropped it (its take may come after the
        # next writer's, so a free lock alone does not prove it done)
        for thread in set(threading.enumerate()) - before:
            if thread.name == write_queue.WAITER_THREAD:
                thread.join(_BOUND)
                assert not thread.is_alive(), "the given-up writer's thread never ended"
        _until(lambda: _free(lock), "the late lock dropped")
        with database.session() as session:
            session.execute(sa.text("INSERT INTO marks VALUES ('after')"))
        assert _marks(database) == ["after"]
        assert _free(lock)  # dropped at the commit
    finally:
        database.dispose()


def test_a_rehearsal_waits_in_the_queue_no_longer_than_its_own_lock_wait(
    tmp_path: Path,
) -> None:
    database = _ledger(tmp_path, busy_timeout=600)
    lock = tmp_path / f"promoter.db{SUFFIX}"
    try:
        with _held(lock):
            started = time.monotonic()
            with pytest.raises(DatabaseBusy), database.rolled_back(lock_wait_ms=100) as session:
                session.execute(sa.text("INSERT INTO marks VALUES ('rehearsed')"))
            assert time.monotonic() - started < 60  # not the connection's 600 s
        assert _marks(database) == []
    finally:
        database.dispose()


def test_a_symlink_at_the_queue_s_path_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not promoter's\n")
    outside.chmod(0o644)
    lock = tmp_path / f"promoter.db{SUFFIX}"
    lock.symlink_to(outside)
    database = _ledger(tmp_path, busy_timeout=5)
    try:
        # were the link followed, the writer would wait for this lock and fail busy
        with _held(outside), database.session() as session:
            session.execute(sa.text("INSERT INTO marks VALUES ('written')"))
        assert _marks(database) == ["written"]
        assert lock.is_symlink() and os.readlink(lock) == str(outside)
        assert outside.read_bytes() == b"not promoter's\n"
        assert outside.stat().st_mode & 0o777 == 0o644
    finally:
        database.dispose()
