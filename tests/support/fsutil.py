"""Shared helpers for the fs layer's tests (fixtures live in tests/integration/conftest.py)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from promoter.domain.paths import temp_name
from promoter.fs import group_sync
from promoter.fs.chain import ExpectedState
from promoter.fs.root import Root
from promoter.store import state_temps

MISSING = ExpectedState(False, None, None)

TMP = temp_name("op_test", 1, 0)


def state(data: bytes, mode: str = "100644") -> ExpectedState:
    return ExpectedState(True, hashlib.sha256(data).hexdigest(), mode)


def snapshot(directory: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry below ``directory`` with its kind, bytes (or link target) and mode."""
    found: dict[str, tuple[str, bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(directory))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.fsencode(os.readlink(path)), 0)
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", path.read_bytes(), st.st_mode)
            else:
                found[rel] = ("other", b"", st.st_mode)
    return found


def write(root: Root, rel: str, data: bytes, old: ExpectedState, *, create: bool = True) -> None:
    with root.open_parent(rel, create=create) as parent:
        temp = parent.write_temp(data, "100644", temp=TMP)
        parent.replace(temp, expected_old=old, new=state(data))
        parent.fsync()


def delete(root: Root, rel: str, old: ExpectedState) -> None:
    with root.open_parent(rel, create=False) as parent:
        parent.unlink_checked(old, aside=TMP)


def anonymous_temps_work(directory: Path) -> bool:
    """Whether ``directory``'s filesystem gives ``O_TMPFILE`` files and ``/proc/self/fd``
    is there to link them by (else promoter's temps there are named)."""
    try:
        os.close(os.open(directory, os.O_WRONLY | os.O_TMPFILE, 0o600))
    except OSError:
        return False
    return os.path.isdir("/proc/self/fd")


# ``group_sync_max_pending_bytes`` for a test that must take the group-sync path whatever
# else the machine is writing at the time (the default declines on a busy disk)
NEVER_BUSY = 1 << 62


def made(path: Path) -> Path:
    """``path`` made as a new, empty directory (its parent must exist)."""
    path.mkdir()
    return path


def groups_syncs(directory: Path) -> bool:
    """Whether the filesystem of ``directory`` takes one ``syncfs`` for a group of files."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return group_sync.GroupSync.unsupported(fd) is None
    finally:
        os.close(fd)


def skip_without_group_sync(directory: Path) -> None:
    """Skip, in one line, where the filesystem of ``directory`` takes an fsync per file."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        why = group_sync.GroupSync.unsupported(fd)
    finally:
        os.close(fd)
    if why is not None:
        pytest.skip(f"an fsync per file here, no group syncfs: {why}")


def free_start_tick() -> str:
    """A process start time (clock ticks since boot) no process of the machine has, before
    this one's, so none can have it later: a temp or metrics directory named with it is of
    a writer a shared state directory's sweep proves gone (promoter.store.state_temps)."""
    starts = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            starts.add(state_temps._start_at(entry))
        except OSError:  # ended meanwhile
            continue
    mine = int(state_temps._start_at("self"))
    return next(str(tick) for tick in range(mine - 1, 0, -1) if str(tick) not in starts)
