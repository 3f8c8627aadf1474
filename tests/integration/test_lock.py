"""The repository lock (TESTS.md L1-L5) on real files, threads and processes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from portalocker import LockFlags
from portalocker.portalocker import FlockLocker

from promoter.errors import LockUnavailable, PathUnsafe
from promoter.fs import lock as lock_module
from promoter.fs.lock import LOCK_NAME, RepoLock
from tests.support.fsutil import made

HOLDER = """
import sys
from promoter.fs.lock import RepoLock
with RepoLock(sys.argv[1], timeout=10):
    print("held", flush=True)
    sys.stdin.readline()
"""

SERIAL_WORKER = """
import os, sys
from promoter.fs.lock import RepoLock
common, log, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
for _ in range(rounds):
    with RepoLock(common, timeout=20):
        with open(log, "a") as out:
            out.write(f"start {os.getpid()}\\n")
            out.flush()
            os.fsync(out.fileno())
            out.write(f"end {os.getpid()}\\n")
"""

FLOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)
sys.exit(0)
"""


@pytest.fixture
def common(tmp_path: Path) -> Path:
    return made(tmp_path / "repo.git")


@pytest.fixture
def holder(common: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock until a line arrives on its stdin."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(common)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "held\n"
    yield proc
    if proc.poll() is None:
        proc.stdin.write("\n")
        proc.stdin.flush()
    proc.wait(timeout=10)


def test_lock_file_is_created_private_and_regular(common: Path) -> None:
    with RepoLock(common) as held:
        held.check_held()
        st = (common / LOCK_NAME).lstat()
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_nlink == 1
    assert not held.held
    assert sorted(os.listdir(common)) == [LOCK_NAME]


# -- L1 ------------------------------------------------------------------------------


def test_symlinked_lock_path_is_refused(common: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (common / LOCK_NAME).symlink_to(target)
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()
    assert target.read_bytes() == b"keep"


def test_dangling_symlink_lock_path_creates_nothing(common: Path, tmp_path: Path) -> None:
    (common / LOCK_NAME).symlink_to(tmp_path / "planted")
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()
    assert not (tmp_path / "planted").exists()


def test_hard_linked_lock_file_is_refused(common: Path, tmp_path: Path) -> None:
    (tmp_path / "other").write_bytes(b"")
    os.link(tmp_path / "other", common / LOCK_NAME)
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()


def test_fifo_lock_path_is_refused_without_hanging(common: Path) -> None:
    os.mkfifo(common / LOCK_NAME)
    raised: list[BaseException] = []

    def acquire() -> None:
        try:
            RepoLock(common, timeout=3600).acquire()  # a wait would outlast the join
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=acquire, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "opening the FIFO blocked or waited for the lock"
    assert [type(exc) for exc in raised] == [PathUnsafe]
    assert stat.S_ISFIFO((common / LOCK_NAME).lstat().st_mode)


def test_directory_lock_path_is_refused(common: Path) -> None:
    (common / LOCK_NAME).mkdir()
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()


def test_foreign_owned_lock_file_is_refused(common: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    (common / LOCK_NAME).write_bytes(b"")
    os.chown(common / LOCK_NAME, 4242, 4242)
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()


def test_refused_lock_releases_the_in_process_lock(common: Path) -> None:
    (common / LOCK_NAME).mkdir()
    with pytest.raises(PathUnsafe):
        RepoLock(common, timeout=1).acquire()
    (common / LOCK_NAME).rmdir()
    with RepoLock(common, timeout=1) as held:
        held.check_held()


# -- L2 ------------------------------------------------------------------------------


def test_lock_file_unlinked_and_recreated_while_held_is_detected(common: Path) -> None:
    with RepoLock(common) as held:
        (common / LOCK_NAME).unlink()
        (common / LOCK_NAME).write_bytes(b"")
        with pytest.raises(PathUnsafe):
            held.check_held()


def test_lock_file_unlinked_while_held_is_detected(common: Path) -> None:
    with RepoLock(common) as held:
        (common / LOCK_NAME).unlink()
        with pytest.raises(PathUnsafe):
            held.check_held()


def test_common_dir_renamed_while_held_is_detected(common: Path, tmp_path: Path) -> None:
    with RepoLock(common) as held:
        os.rename(common, tmp_path / "renamed.git")
        common.mkdir()
        with pytest.raises(PathUnsafe):
            held.check_held()


def test_waiter_takes_the_recreated_lock_file_not_the_unlinked_one(
    common: Path, holder: subprocess.Popen[str]
) -> None:
    old_inode = (common / LOCK_NAME).stat().st_ino
    (common / LOCK_NAME).unlink()
    with RepoLock(common, timeout=5) as held:
        held.check_held()
        assert (common / LOCK_NAME).stat().st_ino != old_inode


def test_lock_file_replaced_between_open_and_flock_is_retried(
    common: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replaced: list[int] = []

    class ReplacingLocker(FlockLocker):
        def lock(self, file_obj: int, flags: LockFlags) -> None:  # type: ignore[override]
            if not replaced:
                replaced.append(os.fstat(file_obj).st_ino)
                (common / LOCK_NAME).unlink()
                (common / LOCK_NAME).write_bytes(b"")
            super().lock(file_obj, flags)

    monkeypatch.setattr("promoter.fs.lock.FlockLocker", ReplacingLocker)
    with RepoLock(common, timeout=5) as held:
        held.check_held()
        assert os.fstat(held._fd).st_ino == (common / LOCK_NAME).stat().st_ino
        assert os.fstat(held._fd).st_ino != replaced[0]


# -- L3 ------------------------------------------------------------------------------


def test_closing_another_descriptor_of_the_lock_file_keeps_it_exclusive(common: Path) -> None:
    with RepoLock(common):
        other = os.open(common / LOCK_NAME, os.O_RDWR)
        os.close(other)
        with open(common / LOCK_NAME, "rb") as again:
            again.read()
        probe = subprocess.run(
            [sys.executable, "-c", FLOCK_PROBE, str(common / LOCK_NAME)], check=False
        )
        assert probe.returncode == 3
    probe = subprocess.run(
        [sys.executable, "-c", FLOCK_PROBE, str(common / LOCK_NAME)], check=False
    )
    assert probe.returncode == 0


# -- L4 ------------------------------------------------------------------------------


def test_second_thread_waits_for_the_first(common: Path) -> None:
    first_in = threading.Event()
    let_go = threading.Event()

    def first() -> None:
        with RepoLock(common):
            first_in.set()
            let_go.wait()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        first_in.wait()
        with pytest.raises(LockUnavailable) as info:
            RepoLock(common, timeout=0.1).acquire()
        assert info.value.context["reason"] == "held_in_process"
    finally:
        let_go.set()
        thread.join()
    with RepoLock(common, timeout=1) as held:
        held.check_held()


def test_linked_worktree_paths_to_one_common_dir_share_the_lock(
    common: Path, tmp_path: Path
) -> None:
    alias = tmp_path / "alias.git"
    alias.symlink_to(common)
    with RepoLock(common), pytest.raises(LockUnavailable):
        RepoLock(alias, timeout=0.1).acquire()


def test_threads_never_overlap_inside_the_lock(common: Path) -> None:
    barrier = threading.Barrier(4)
    inside = threading.Lock()
    overlaps: list[int] = []
    counter = [0]

    def worker() -> None:
        barrier.wait()
        for _ in range(25):
            with RepoLock(common, timeout=20):
                if not inside.acquire(blocking=False):
                    overlaps.append(1)
                    continue
                counter[0] += 1
                inside.release()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert counter[0] == 100


def test_another_process_holding_the_lock_blocks_until_released(
    common: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(LockUnavailable) as info:
        RepoLock(common, timeout=0.2).acquire()
    assert info.value.context["reason"] == "held_by_another_process"
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    with RepoLock(common, timeout=10) as held:
        held.check_held()


def test_processes_never_overlap_inside_the_lock(common: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    workers = [
        subprocess.Popen([sys.executable, "-c", SERIAL_WORKER, str(common), str(log), "30"])
        for _ in range(3)
    ]
    for proc in workers:
        assert proc.wait(timeout=60) == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 180
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.startswith("start ")
        assert end == "end " + start.removeprefix("start ")


# -- L5 ------------------------------------------------------------------------------


def test_git_index_lock_makes_the_wait_time_out_and_is_left_alone(common: Path) -> None:
    index_lock = common / "index.lock"
    index_lock.write_bytes(b"git's")
    before = index_lock.stat()
    started = time.monotonic()
    with pytest.raises(LockUnavailable) as info:
        RepoLock(common, timeout=0.3, index_lock_dirs=[str(common)]).acquire()
    elapsed = time.monotonic() - started
    assert elapsed >= 0.3  # it waited its timeout; returning at all shows it gave up
    assert info.value.context["reason"] == "index_lock_present"
    after = index_lock.stat()
    assert index_lock.read_bytes() == b"git's"
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    with RepoLock(common, timeout=0.1) as held:
        held.check_held()


def test_git_index_lock_removed_mid_wait_lets_the_lock_be_taken(
    common: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worktree_git = common / "worktrees" / "wt"
    worktree_git.mkdir(parents=True)
    (worktree_git / "index.lock").write_bytes(b"")
    seen = threading.Event()
    real = lock_module.RepoLock._index_lock_present

    def observed(self: RepoLock) -> bool:
        present = real(self)
        if present:
            seen.set()
        return present

    monkeypatch.setattr(lock_module.RepoLock, "_index_lock_present", observed)
    outcome: list[BaseException | None] = []

    def take() -> None:
        try:
            with RepoLock(common, timeout=10, index_lock_dirs=[str(common), str(worktree_git)]):
                outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=take)
    thread.start()
    assert seen.wait(10)
    (worktree_git / "index.lock").unlink()
    thread.join()
    assert outcome == [None]


NAMED_HOLDER = """
import sys
from promoter.fs.lock import RepoLock
with RepoLock(sys.argv[1], timeout=10, holder="host-a"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_waiter_is_told_which_process_holds_the_lock_and_that_it_is_stopped(
    common: Path,
) -> None:
    """The holder records its pid and host id in the lock file while it holds the lock: a
    waiter that times out names it, running or stopped (SIGSTOP), with what to do; the
    record is emptied when the lock is released."""
    proc = subprocess.Popen(
        [sys.executable, "-c", NAMED_HOLDER, str(common)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline() == "held\n"
        with pytest.raises(LockUnavailable) as running:
            RepoLock(common, timeout=0.05).acquire()
        assert running.value.context["holder"] == {
            "pid": proc.pid,
            "host": "host-a",
            "state": "running",
        }
        proc.send_signal(signal.SIGSTOP)
        stat_file = Path(f"/proc/{proc.pid}/stat")
        deadline = time.monotonic() + 60
        while stat_file.read_text().rpartition(")")[2].split()[0] not in "tT":
            assert time.monotonic() < deadline, "the holder never stopped"
            time.sleep(0.005)
        with pytest.raises(LockUnavailable) as stopped:
            RepoLock(common, timeout=0.05).acquire()
        assert stopped.value.context["holder"]["state"] == "stopped"
        assert f"kill -CONT {proc.pid}" in stopped.value.detail
        proc.send_signal(signal.SIGCONT)
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=10)
    assert (common / LOCK_NAME).read_bytes() == b""  # released: no stale holder
    with RepoLock(common, timeout=1):  # and free
        pass
