"""Durable file primitives for promoter's own state directory: the one way to write there.

``write_new`` (never over an existing file) and ``write_replace`` write a temp, flush it,
give it its name and flush the directory (protocol: storage#durable-order); the temp is an
anonymous ``O_TMPFILE`` where the filesystem allows, else named by
``promoter.store.state_temps`` (protocol: storage#state-dir-temps). ``write_copy`` and
``set_aside`` serve copies without a flush (protocol: storage#copies-without-flush);
``write_new_together``, ``StagedNew`` and ``StagedReplace`` flush a group at once;
``make_dirs`` flushes each level it creates; ``start_writeback`` is a hint, never a flush.
A failed write removes its temp and raises the ``OSError`` for the caller to translate.
Fault points:
``state_write``, ``state_tmpfile`` and ``<fault>_after_<syscall>`` after each step of a
write (``fault`` defaults to ``state``; the audit store passes ``audit_<kind>``).

Not here: worktree writes (``promoter.fs``), which names documents get
(``promoter.store.audit``), blobs (``promoter.store.blobs``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from promoter.faults import point
from promoter.fs import flush
from promoter.fs.syscalls import start_writeback
from promoter.store.state_temps import temp_name

if TYPE_CHECKING:
    from promoter.fs.group_sync import GroupSync

__all__ = ["start_writeback"]  # re-exported: the state directory's writers use it too

# errnos that mean "this filesystem has no O_TMPFILE", not "this write failed"
NO_TMPFILE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EISDIR)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NAMED_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_no_tmpfile: set[int] = set()  # devices that refused O_TMPFILE once: named from then on
_no_tmpfile_lock = threading.Lock()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        flush.fsync(fd)
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


def make_dirs(path: Path, mode: int = 0o755, *, fault: str = "state", sync: bool = True) -> None:
    """Create ``path`` and any missing parents; fsync the parent of every level created.

    A level another process created at the same moment is fsynced in its parent too (its
    creator may not have got there yet). ``sync=False``: no fsync, for a caller that syncs
    the whole filesystem afterwards (``promoter.fs.group_sync``).
    """
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, mode)
        except FileExistsError:
            if not level.is_dir():
                raise
        point(f"{fault}_after_mkdir")
        if sync:
            fsync_dir(level.parent)
            point(f"{fault}_after_mkdir_sync")


def write_new(path: Path, data: bytes, *, mode: int = 0o444, fault: str = "state") -> bool:
    """Write ``data`` at ``path`` durably unless a file is already there.

    Returns True when this call created the file, False when something already stood
    at ``path`` (the caller compares contents).
    """
    temp = _Temp.written(path.parent, data, mode, fault)
    try:
        created = temp.link(path.name, fault)
        flush.fsync(temp.dir_fd)
    finally:
        temp.close()
    point(f"{fault}_after_dir_fsync")
    return created


def write_copy(path: Path, data: bytes, *, mode: int = 0o444, fault: str = "state") -> bool:
    """``write_new`` without a flush: a copy of bytes whose record is durable elsewhere.

    The temp is written and linked (never over a file) and nothing is fsynced, not even
    a directory made for it: after a crash the name may be missing, and (on a
    filesystem that does not order data before names) the file may be empty or short,
    so its reader compares it with the record and rebuilds it (``promoter.store.audit``,
    ``AuditStore.copy``). Fault points as ``write_new``'s, without the fsyncs'.
    """
    make_dirs(path.parent, fault=fault, sync=False)
    temp = _Temp.written(path.parent, data, mode, fault, sync=False)
    try:
        return temp.link(path.name, fault)
    finally:
        temp.close()


def set_aside(path: Path, expected: bytes) -> Path | None:
    """Move the file at ``path`` to a fresh hidden name beside it unless it holds exactly
    ``expected``; the aside path (its bytes kept), or None (it held ``expected``: linked
    back, or nothing stood at ``path``).

    For a copy found damaged: its bytes are kept and its name is free for the copy.
    A file that turns out to hold ``expected`` (a concurrent writer's good copy) goes
    back under its name, never over a file that took the name meanwhile.
    """
    aside = path.with_name(f".{path.name}.damaged-{secrets.token_hex(8)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(aside, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return aside  # a symlink or anything unreadable: kept as it is
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        found = os.read(fd, len(expected) + 1) if regular else None
    finally:
        os.close(fd)
    if found != expected:
        return aside
    try:
        os.link(aside, path)
        os.unlink(aside)  # the same bytes are under ``path`` again
    except FileExistsError:
        return aside  # another copy took the name: this one stays aside, kept
    return None


def write_new_together(
    items: Sequence[tuple[Path, bytes, str]], *, group_sync_limit: int | None, mode: int = 0o444
) -> list[bool]:
    """``write_new`` of several files (``(path, data, fault)`` each), flushed together.

    Every temp is written, then all are made durable, then each is linked into place
    (never over a file: False where one stood), then their directories are made
    durable. Where ``GroupSync`` offers it (``group_sync_limit`` not None, every
    directory on one filesystem that allows it), each of the two flushes is one
    ``syncfs``; otherwise an fsync of each temp and of each directory, as ``write_new``.
    The fault points are ``write_new``'s, each file's in turn at each stage.
    """
    for path, _, fault in items:
        make_dirs(path.parent, fault=fault)
    group = _group_for([path.parent for path, _, _ in items], group_sync_limit)
    temps: list[_Temp] = []
    try:
        for path, data, fault in items:
            temps.append(_Temp.written(path.parent, data, mode, fault, sync=group is None))
        if group is not None:
            group.sync()
            for _, _, fault in items:
                point(f"{fault}_after_fsync")
        created = [
            temp.link(path.name, fault) for temp, (path, _, fault) in zip(temps, items, strict=True)
        ]
        if group is not None:
            group.sync()
        else:
            synced: set[Path] = set()
            for temp in temps:
                if temp.directory not in synced:
                    flush.fsync(temp.dir_fd)
                    synced.add(temp.directory)
    finally:
        for temp in temps:
            temp.close()
        if group is not None:
            group.close()
    for _, _, fault in items:
        point(f"{fault}_after_dir_fsync")
    return created


def _group_for(directories: list[Path], limit: int | None) -> GroupSync | None:
    """One ``GroupSync`` for several files in ``directories`` (None: an fsync each)."""
    if limit is None or len(directories) < 2:
        return None
    if len({os.stat(directory).st_dev for directory in directories}) != 1:
        return None
    from promoter.fs.group_sync import GroupSync  # several files in one directory only

    return GroupSync.start_at(os.fspath(directories[0]), limit, "after_state_group_sync")


def write_replace(path: Path, data: bytes, *, mode: int = 0o644, fault: str = "state") -> None:
    """Write ``data`` at ``path`` durably, atomically replacing what was there."""
    temp = _Temp.written(path.parent, data, mode, fault)
    try:
        temp.replace(path.name, fault)
        flush.fsync(temp.dir_fd)
    finally:
        temp.close()
    point(f"{fault}_after_dir_fsync")


class StagedReplace:
    """A ``write_replace`` in two halves, for a caller that flushes a group of files.

    Made: the temp is written (``state_write``, ``<fault>_after_create``,
    ``<fault>_after_write``) and not flushed; the caller makes it durable with the rest
    of its group (``promoter.fs.group_sync``). ``finish`` then renames it over the
    target and fsyncs the directory (``<fault>_after_rename``, ``<fault>_after_dir_fsync``);
    ``close`` drops a temp that was never finished (idempotent).
    """

    def __init__(self, path: Path, data: bytes, *, mode: int = 0o644, fault: str = "state") -> None:
        self._name = path.name
        self._fault = fault
        self._temp: _Temp | None = _Temp.written(path.parent, data, mode, fault, sync=False)

    def finish(self) -> None:
        """Rename the (already durable) temp over the target; fsync its directory."""
        temp = self._temp
        assert temp is not None
        try:
            temp.replace(self._name, self._fault)
            flush.fsync(temp.dir_fd)
        finally:
            self.close()
        point(f"{self._fault}_after_dir_fsync")

    def close(self) -> None:
        if self._temp is not None:
            temp, self._temp = self._temp, None
            temp.close()


class StagedNew:
    """A ``write_new`` in two halves, for a caller that flushes a group of files.

    Made: the temp is written (``state_write``, ``<fault>_after_create``,
    ``<fault>_after_write``), flushed only with ``sync=True`` (``<fault>_after_fsync``);
    without it the caller makes it durable with the rest of its group
    (``promoter.fs.group_sync``). ``link`` then gives it its name, never over a file
    (``<fault>_after_link``; False where one stood), and ``sync_dir`` fsyncs its
    directory for a caller that does not sync the group's names at once; ``close``
    drops a temp never linked (idempotent).
    """

    def __init__(
        self, path: Path, data: bytes, *, mode: int = 0o444, fault: str = "state", sync: bool
    ) -> None:
        self.path = path
        self._fault = fault
        self._temp: _Temp | None = _Temp.written(path.parent, data, mode, fault, sync=sync)

    def link(self) -> bool:
        """Name the (already durable) temp; True when this call created the file."""
        assert self._temp is not None
        return self._temp.link(self.path.name, self._fault)

    def sync_dir(self) -> None:
        """fsync the directory the file was named in (``<fault>_after_dir_fsync``)."""
        assert self._temp is not None
        flush.fsync(self._temp.dir_fd)
        point(f"{self._fault}_after_dir_fsync")

    def close(self) -> None:
        if self._temp is not None:
            temp, self._temp = self._temp, None
            temp.close()


def write_private(path: Path, data: bytes) -> None:
    """Write a 0600 file (credentials) durably, replacing nothing that exists."""
    write_new(path, data, mode=0o600)


class _Temp:
    """A written, fsynced temp file in one directory: anonymous (``name is None``) or named."""

    def __init__(self, directory: Path, dir_fd: int, fd: int, name: str | None) -> None:
        self.directory = directory
        self.dir_fd = dir_fd
        self.fd: int | None = fd
        self.name = name

    @classmethod
    def written(
        cls, directory: Path, data: bytes, mode: int, fault: str, *, sync: bool = True
    ) -> _Temp:
        """A new temp in ``directory`` (made if missing) holding ``data``, fsynced
        (``sync=False``: not, for a caller that syncs a group of them itself)."""
        make_dirs(directory, fault=fault)
        dir_fd = os.open(directory, _DIR_FLAGS)
        try:
            fd, name = _open_temp(dir_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        temp = cls(directory, dir_fd, fd, name)
        try:
            point(f"{fault}_after_create")
            point("state_write")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            point(f"{fault}_after_write")
            os.fchmod(fd, mode)
            if sync:
                flush.fsync(fd)
                point(f"{fault}_after_fsync")
        except BaseException:
            temp.close()
            raise
        return temp

    def link(self, target: str, fault: str) -> bool:
        """Link the temp as ``target`` (never over a file); False when ``target`` exists."""
        try:
            self._link_as(target)
        except FileExistsError:
            return False
        point(f"{fault}_after_link")
        if self.name is not None:
            self._drop_name()
            point(f"{fault}_after_unlink_temp")
        return True

    def replace(self, target: str, fault: str) -> None:
        """Rename the temp over ``target`` (an anonymous one is first given a temp name)."""
        if self.name is None:
            name = temp_name()
            self._link_as(name)
            self.name = name
            point(f"{fault}_after_link")
        os.rename(self.name, target, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        self.name = None
        point(f"{fault}_after_rename")

    def _link_as(self, target: str) -> None:
        if self.name is not None:
            os.link(self.name, target, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            return
        assert self.fd is not None
        # linkat(AT_SYMLINK_FOLLOW) of the descriptor's /proc link names the anonymous inode
        os.link(f"/proc/self/fd/{self.fd}", target, dst_dir_fd=self.dir_fd, follow_symlinks=True)

    def _drop_name(self) -> None:
        name, self.name = self.name, None
        if name is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.dir_fd)

    def close(self) -> None:
        """Close the descriptors and remove the temp's name, if it still has one."""
        if self.fd is not None:
            os.close(self.fd)  # an anonymous temp vanishes with its last descriptor
            self.fd = None
        self._drop_name()
        os.close(self.dir_fd)


def _open_temp(dir_fd: int) -> tuple[int, str | None]:
    """A new temp file in the directory ``dir_fd``: (descriptor, None) when anonymous,
    (descriptor, name) when the filesystem has no ``O_TMPFILE``."""
    device = os.fstat(dir_fd).st_dev
    if device not in _no_tmpfile and _PROC_FD:
        try:
            point("state_tmpfile")
            return os.open(
                ".", os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
            ), None
        except OSError as exc:
            if exc.errno not in NO_TMPFILE:
                raise
            with _no_tmpfile_lock:
                _no_tmpfile.add(device)
    name = temp_name()
    return os.open(name, _NAMED_FLAGS, 0o600, dir_fd=dir_fd), name


_PROC_FD = os.path.isdir("/proc/self/fd")
