"""Hostile entries in a worktree (TESTS.md P4, P5, P7-P11): what is already there."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.fs.chain import ExpectedState
from promoter.fs.lock import RepoLock
from promoter.fs.root import Root
from tests.support.fsutil import delete, snapshot, state, write

MISSING = ExpectedState(False, None, None)
HANG_GUARD_SECONDS = 10


def run_guarded(call: Callable[[], None]) -> BaseException | None:
    """Run ``call`` in a daemon thread; fail the test if it blocks (a hang, not an error)."""
    done = threading.Event()
    caught: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:
            caught.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    assert done.wait(HANG_GUARD_SECONDS), "operation blocked"
    return caught[0] if caught else None


# -- P4 / P5 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rel",
    ["a/link/", "a/link/.", "a//b", "a/", "..", "a/../../x", "/etc/passwd", "a\x00b", ".GIT/x"],
)
def test_lexically_unsafe_paths_are_refused_before_any_syscall(
    root: Root, monkeypatch: pytest.MonkeyPatch, rel: str
) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("syscall before the lexical check")

    with monkeypatch.context() as patched:
        for name in ("open", "stat", "mkdir", "lstat", "rmdir", "listdir"):
            patched.setattr(os, name, forbidden)
        for call in (
            lambda: root.read_state(rel),
            lambda: root.open_parent(rel, create=True),
            lambda: root.remove_dir_if_empty(rel),
        ):
            with pytest.raises(PathUnsafe):
                call()


def test_trailing_slash_through_a_symlinked_dir_is_refused(
    root: Root, work: Path, outside: Path
) -> None:
    (work / "a").mkdir()
    (work / "a/link").symlink_to(outside)
    with pytest.raises(PathUnsafe):
        write(root, "a/link/f.txt", b"new", state(b"outside original"))
    assert (outside / "f.txt").read_bytes() == b"outside original"


# -- P7 ------------------------------------------------------------------------------


def test_hard_linked_target_is_not_deleted(root: Root, work: Path, outside: Path) -> None:
    os.link(outside / "f.txt", work / "f.txt")
    with pytest.raises(PathUnsafe):
        delete(root, "f.txt", state(b"outside original"))
    assert (work / "f.txt").read_bytes() == b"outside original"
    assert (outside / "f.txt").stat().st_nlink == 2


def test_replace_of_hard_linked_target_does_not_write_through(
    root: Root, work: Path, outside: Path
) -> None:
    os.link(outside / "f.txt", work / "f.txt")
    write(root, "f.txt", b"new", state(b"outside original"))
    assert (outside / "f.txt").read_bytes() == b"outside original"
    assert (outside / "f.txt").stat().st_nlink == 1
    assert (work / "f.txt").read_bytes() == b"new"


def test_foreign_owned_target_is_not_deleted(root: Root, work: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    (work / "f.txt").write_bytes(b"old")
    os.chown(work / "f.txt", 4242, 4242)
    with pytest.raises(PathUnsafe):
        delete(root, "f.txt", state(b"old"))
    assert (work / "f.txt").read_bytes() == b"old"


# -- P8 ------------------------------------------------------------------------------


def test_fifo_at_target_is_refused_without_blocking(root: Root, work: Path) -> None:
    os.mkfifo(work / "f.txt")
    leaf = []
    assert run_guarded(lambda: leaf.append(root.read_state("f.txt"))) is None
    assert leaf[0].kind == "special"
    assert isinstance(run_guarded(lambda: delete(root, "f.txt", state(b"old"))), PathUnsafe)
    exc = run_guarded(lambda: write(root, "f.txt", b"new", state(b"old")))
    assert isinstance(exc, PathUnsafe)
    assert stat.S_ISFIFO((work / "f.txt").lstat().st_mode)
    assert os.listdir(work) == ["f.txt"]


def test_socket_at_target_is_refused(root: Root, work: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(work / "s"))
        assert root.read_state("s").kind == "special"
        assert isinstance(run_guarded(lambda: delete(root, "s", state(b"x"))), PathUnsafe)
        assert stat.S_ISSOCK((work / "s").lstat().st_mode)
    finally:
        sock.close()


def test_device_at_target_is_refused(root: Root, work: Path) -> None:
    try:
        os.mknod(work / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    assert root.read_state("dev").kind == "special"
    assert isinstance(run_guarded(lambda: delete(root, "dev", state(b""))), PathUnsafe)
    assert isinstance(run_guarded(lambda: write(root, "dev", b"x", state(b""))), PathUnsafe)
    assert stat.S_ISCHR((work / "dev").lstat().st_mode)


# -- P9 ------------------------------------------------------------------------------


def test_mount_inside_worktree_is_refused(root: Root, work: Path) -> None:
    (work / "mnt").mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "promoter-test", str(work / "mnt")],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (work / "mnt/f.txt").write_bytes(b"old")
        with pytest.raises(PathUnsafe):
            root.read_state("mnt/f.txt")
        with pytest.raises(PathUnsafe):
            write(root, "mnt/f.txt", b"new", state(b"old"))
        with pytest.raises(PathUnsafe):
            write(root, "mnt/sub/new.txt", b"new", MISSING)
        assert sorted(os.listdir(work / "mnt")) == ["f.txt"]
        assert (work / "mnt/f.txt").read_bytes() == b"old"
    finally:
        subprocess.run(["umount", "-l", str(work / "mnt")], check=False)


def test_directory_on_another_device_is_refused(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "mnt").mkdir()
    (work / "mnt/f.txt").write_bytes(b"old")
    mount_ino = (work / "mnt").stat().st_ino
    real_fstat = os.fstat

    def fake_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if st.st_ino != mount_ino:
            return st
        fields = list(st)
        fields[stat.ST_DEV] = st.st_dev + 1
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fake_fstat)
    with pytest.raises(PathUnsafe):
        root.read_state("mnt/f.txt")
    with pytest.raises(PathUnsafe):
        root.open_parent("mnt/f.txt", create=False)


# -- P10 -----------------------------------------------------------------------------


def test_proc_self_root_symlink_is_never_followed(root: Root, work: Path, outside: Path) -> None:
    (work / "proc").symlink_to(f"/proc/self/root{outside}")
    (work / "leaf.txt").symlink_to(f"/proc/self/root{outside}/g.txt")
    before = snapshot(outside)
    with pytest.raises(PathUnsafe):
        root.read_state("proc/f.txt")
    with pytest.raises(PathUnsafe):
        write(root, "proc/f.txt", b"new", state(b"outside original"))
    assert root.read_state("leaf.txt").kind == "symlink"
    with pytest.raises(PathUnsafe):
        write(root, "leaf.txt", b"new", state(b"outside g"))
    with pytest.raises(PathUnsafe):
        delete(root, "leaf.txt", state(b"outside g"))
    assert snapshot(outside) == before


def test_proc_self_fd_symlink_is_never_followed(root: Root, work: Path, outside: Path) -> None:
    fd = os.open(outside / "f.txt", os.O_RDONLY)
    try:
        (work / "f.txt").symlink_to(f"/proc/self/fd/{fd}")
        before = snapshot(outside)
        with pytest.raises(PathUnsafe):
            write(root, "f.txt", b"new", state(b"outside original"))
        with pytest.raises(PathUnsafe):
            delete(root, "f.txt", state(b"outside original"))
        assert snapshot(outside) == before
    finally:
        os.close(fd)


# -- P11 -----------------------------------------------------------------------------


def test_child_processes_inherit_no_worktree_or_lock_descriptors(
    root: Root, work: Path, tmp_path: Path
) -> None:
    (work / "a").mkdir()
    common = tmp_path / "git"
    common.mkdir()
    with root.open_parent("a/f.txt", create=False) as parent, RepoLock(common) as lock:
        listing = subprocess.run(
            ["ls", "-l", "/proc/self/fd"], close_fds=False, capture_output=True, check=True
        ).stdout.decode()
        assert str(work) not in listing
        assert str(common) not in listing
        for fd in (root.fd, parent.fd, lock._fd, lock._dir_fd):
            assert os.get_inheritable(fd) is False
