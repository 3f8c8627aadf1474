"""Durable file primitives for promoter's own state directory.

Temp file + write + fsync + rename + directory fsync. These write only under the state
directory, whose paths promoter chose itself; worktree writes never come here (they go
through ``promoter.fs`` descriptor chains). A failed write (``ENOSPC``, ``EDQUOT``, ``EIO``)
removes its temp file and raises the ``OSError``; callers translate it.

``start_writeback`` (``promoter.fs.syscalls``, re-exported here) asks the kernel to
begin writing a file's dirty pages now (``sync_file_range(SYNC_FILE_RANGE_WRITE)``,
where there is one). It is a hint and makes nothing durable: the file is still fsynced,
and that fsync reports any error. Many files written one after another and then fsynced
together wait far less when each one's writeback started as soon as its last byte was
written.

Fault point: ``state_write`` (before a temp file's bytes are written).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from promoter.faults import point
from promoter.fs.syscalls import start_writeback

__all__ = ["start_writeback"]  # re-exported: the state directory's writers use it too


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_written(path: Path, expected: bytes) -> bool:
    """Unlink ``path`` only while it holds exactly ``expected`` (bytes promoter wrote).

    The file is first renamed to a fresh aside name, then read there through a
    descriptor: the same bytes with one link are removed; anything else is linked back
    under its own name (never over a file that took the name meanwhile: then it stays
    under the aside name) and False is returned.
    """
    aside = path.with_name(f".{path.name}.removing-{secrets.token_hex(8)}")
    os.rename(path, aside)
    fd = os.open(aside, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        with os.fdopen(os.dup(fd), "rb") as handle:
            found = handle.read(len(expected) + 1)
    finally:
        os.close(fd)
    if found == expected and info.st_nlink == 1:
        os.unlink(aside)
        return True
    try:
        os.link(aside, path)  # back under its name, never over another file
        os.unlink(aside)
    except FileExistsError:
        pass  # the name was taken meanwhile: the bytes stay under the aside name
    return False


def make_dirs(path: Path, mode: int = 0o755) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=mode)


def temp_path(directory: Path) -> Path:
    return directory / f".tmp-{secrets.token_hex(8)}"


def write_new(path: Path, data: bytes, *, mode: int = 0o444) -> bool:
    """Write ``data`` at ``path`` durably unless a file is already there.

    Returns True when this call created the file, False when something already stood
    at ``path`` (the caller compares contents).
    """
    tmp = _write_temp(path.parent, data, mode)
    try:
        os.link(tmp, path)  # never replaces an existing file
        created = True
    except FileExistsError:
        created = False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return created


def write_replace(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` at ``path`` durably, atomically replacing what was there."""
    tmp = _write_temp(path.parent, data, mode)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _write_temp(directory: Path, data: bytes, mode: int) -> Path:
    """A new fsynced temp file in ``directory`` holding ``data``; removed on failure."""
    make_dirs(directory)
    tmp = temp_path(directory)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        point("state_write")
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def write_private(path: Path, data: bytes) -> None:
    """Write a 0600 file (credentials) durably, replacing nothing that exists."""
    write_new(path, data, mode=0o600)
