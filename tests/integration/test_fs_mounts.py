"""Mounts inside a worktree that share the root's filesystem (TESTS.md W8,
protocol: promotion#mount-crossings).

A bind mount keeps the device id of its source, so a device comparison alone lets a
write land in the bind source. Each guard is shown to refuse on its own: ``statx``
mount ids, ``/proc/self/fdinfo`` mount ids, and ``openat2(RESOLVE_NO_XDEV)``. The
mounts are real (``mount --bind``, as root); the test skips when mounting is refused.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe, WriteFailed
from promoter.fs import chain, syscalls
from promoter.fs.root import Root
from tests.support.fsutil import MISSING, snapshot, state, write
from tests.support.mounts import bind_mount, is_mount_point

GUARDS = ["statx", "fdinfo", "openat2"]


def _plain_open(dir_fd: int, name: str, flags: int) -> int:
    return os.open(name, flags, dir_fd=dir_fd)


def _statx_has_mount_ids() -> bool:
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        return syscalls.statx_mount_id(fd) is not None
    finally:
        os.close(fd)


def _only_guard(monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    """Leave exactly one mount guard active (the others switched off)."""
    if which == "openat2":
        if syscalls._openat2_impl() is None:
            pytest.skip("this kernel has no openat2")
        monkeypatch.setattr(syscalls, "mount_id_source", lambda: "none")
        return
    if which == "statx" and not _statx_has_mount_ids():
        pytest.skip("this kernel's statx has no STATX_MNT_ID")
    monkeypatch.setattr(chain, "open_dir_component", _plain_open)
    monkeypatch.setattr(syscalls, "mount_id_source", lambda: which)


@pytest.fixture(params=GUARDS)
def guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    which: str = request.param
    _only_guard(monkeypatch, which)
    return which


@pytest.fixture
def guarded_root(work: Path, guard: str) -> Iterator[Root]:
    with Root.open(work) as opened:
        yield opened


def _refused(call: Callable[[], object]) -> PathUnsafe:
    with pytest.raises(PathUnsafe) as refused:
        call()
    assert refused.value.code == "path_unsafe"
    return refused.value


def test_same_filesystem_bind_mount_directory_inside_worktree_is_refused(
    guarded_root: Root, work: Path, outside: Path
) -> None:
    (work / "sub").mkdir()
    (work / "sub/own.txt").write_bytes(b"under the mount")
    before = snapshot(outside)
    with bind_mount(outside, work / "sub"):
        assert (work / "sub").stat().st_dev == work.stat().st_dev  # the attack: same device
        assert (work / "sub/f.txt").read_bytes() == b"outside original"
        root = guarded_root
        _refused(lambda: root.read_state("sub/f.txt"))
        _refused(lambda: root.open_parent("sub/f.txt", create=False))
        _refused(lambda: write(root, "sub/f.txt", b"new", state(b"outside original")))
        _refused(lambda: write(root, "sub/created.txt", b"new", MISSING))
        _refused(lambda: write(root, "sub/deeper/created.txt", b"new", MISSING))
        _refused(lambda: root.remove_dir_if_empty("sub"))
        assert snapshot(outside) == before
        assert is_mount_point(work / "sub")
    assert snapshot(outside) == before
    assert sorted(os.listdir(work / "sub")) == ["own.txt"]
    assert (work / "sub/own.txt").read_bytes() == b"under the mount"


@pytest.mark.parametrize("source", ["statx", "fdinfo"])
def test_bind_mounted_file_at_target_is_refused(
    work: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    _only_guard(monkeypatch, source)
    (work / "f.txt").write_bytes(b"under the mount")
    before = snapshot(outside)
    with Root.open(work) as root, bind_mount(outside / "f.txt", work / "f.txt"):
        assert (work / "f.txt").stat().st_dev == work.stat().st_dev  # the attack: same device
        assert _refused(lambda: root.read_state("f.txt")).context["path"] == "f.txt"
        with root.open_parent("f.txt", create=False) as parent:
            _refused(parent.leaf_state)
        _refused(lambda: write(root, "f.txt", b"new", state(b"outside original"), create=False))
        assert snapshot(outside) == before
        assert sorted(os.listdir(work)) == ["f.txt"]  # no temp left beside it
    assert (work / "f.txt").read_bytes() == b"under the mount"
    assert snapshot(outside) == before


def test_statx_and_proc_fdinfo_agree_on_mount_ids(work: Path, outside: Path) -> None:
    if syscalls.mount_id_source() != "statx":
        pytest.skip("this kernel's statx has no STATX_MNT_ID")
    (work / "sub").mkdir()
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with bind_mount(outside, work / "sub"):
            for name in ("", "sub"):
                via_statx = syscalls.statx_mount_id(fd, name)
                via_fdinfo = syscalls._fdinfo_mount_id_at(fd, name)
                assert via_statx is not None
                assert via_statx == via_fdinfo
            assert syscalls.mount_id(fd, "sub") != syscalls.mount_id(fd)
    finally:
        os.close(fd)


def test_worktree_root_that_is_itself_a_bind_mount_is_served(tmp_path: Path) -> None:
    real, work = tmp_path / "real", tmp_path / "work"
    real.mkdir()
    work.mkdir()
    (real / "f.txt").write_bytes(b"old")
    with bind_mount(real, work), Root.open(work) as root:
        write(root, "f.txt", b"new", state(b"old"))
        write(root, "a/b/created.txt", b"created", MISSING)
        assert root.read_state("a/b/created.txt").sha256 == state(b"created").sha256
    assert (real / "f.txt").read_bytes() == b"new"
    assert (real / "a/b/created.txt").read_bytes() == b"created"


def test_openat2_component_open_refuses_to_enter_a_bind_mount(work: Path, outside: Path) -> None:
    if syscalls._openat2_impl() is None:
        pytest.skip("this kernel has no openat2")
    (work / "sub").mkdir()
    (work / "plain").mkdir()
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with bind_mount(outside, work / "sub"):
            with pytest.raises(OSError) as crossed:
                syscalls.open_dir_component(fd, "sub", os.O_RDONLY | os.O_DIRECTORY)
            assert crossed.value.errno == errno.EXDEV
            os.close(syscalls.open_dir_component(fd, "plain", os.O_RDONLY | os.O_DIRECTORY))
    finally:
        os.close(fd)


def test_mount_id_source_that_stops_answering_fails_closed(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syscalls, "mount_id_source", lambda: "statx")
    monkeypatch.setattr(syscalls, "statx_mount_id", lambda dir_fd, name="": None)
    with pytest.raises(WriteFailed) as failed:
        Root.open(work)
    assert (failed.value.code, failed.value.context["errno"]) == ("write_failed", errno.ENODATA)
