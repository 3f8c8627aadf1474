"""One ``syncfs(2)`` for a group of files, where it is as durable as an fsync of each.

``GroupSync.start(fd, max_pending)`` decides whether a group may use it
(protocol: storage#group-flush) and opens its own descriptor on the directory before
the group is written, so a writeback error of the group fails ``sync``; any "no" answers
``None`` and the caller fsyncs each file as before. Fault points: ``after_group_sync``
(and ``after_state_group_sync`` for promoter's own state files).

Not here: which files make a group, naming them, or one file's fsync.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import threading

from promoter import faults
from promoter.fs import flush
from promoter.lazy_log import LazyLogger

log = LazyLogger("promoter.fs")

_LOCAL_JOURNALED = {
    0xEF53: "ext4",  # also ext2/ext3
    0x58465342: "xfs",
    0x9123683E: "btrfs",
}
_MEMINFO = re.compile(rb"^(Dirty|Writeback):\s+(\d+) kB$", re.MULTILINE)


class _StatFs(ctypes.Structure):
    _fields_ = (("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112))


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def kernel_reports_errors() -> bool:
    """Whether ``syncfs`` returns writeback errors here (Linux 5.8 and newer)."""
    system = os.uname()  # what ``platform`` answers here, without loading it
    if system.sysname != "Linux":
        return False
    found = re.match(r"(\d+)\.(\d+)", system.release)
    return found is not None and (int(found[1]), int(found[2])) >= (5, 8)


def filesystem_type(fd: int) -> int | None:
    """The ``statfs`` magic number of the filesystem holding ``fd`` (None if unknown)."""
    buffer = _StatFs()
    try:
        if _libc().fstatfs(fd, ctypes.byref(buffer)) != 0:
            return None
    except AttributeError:
        return None
    return int(buffer.f_type) & 0xFFFFFFFF


def pending_bytes() -> int | None:
    """Bytes dirty or under writeback system-wide (None when ``/proc/meminfo`` is unread)."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    found = _MEMINFO.findall(text)
    if len(found) != 2:
        return None
    return sum(int(kb) for _, kb in found) * 1024


def _busy(max_pending: int) -> str | None:
    """Why the disk is too busy for a group sync now (None: it is not)."""
    pending = pending_bytes()
    if pending is None:
        return "/proc/meminfo could not be read"
    if pending > max_pending:
        return f"{pending >> 20} MiB are waiting to be written (more than {max_pending >> 20})"
    return None


def _syncfs(fd: int) -> None:
    flush.syncfs(fd)


class GroupSync:
    """A descriptor opened before a group was written; ``sync`` makes the group durable."""

    def __init__(self, fd: int, fault: str = "after_group_sync") -> None:
        self._fault = fault
        self._fd: int | None = fd
        self._failed: OSError | None = None
        self._lock = threading.Lock()  # ``close`` may come from another thread (a cancel)

    @classmethod
    def start(
        cls, dir_fd: int, max_pending: int, fault: str = "after_group_sync"
    ) -> GroupSync | None:
        """A ``GroupSync`` for the filesystem of directory ``dir_fd``, or None (fsync each)
        (also when more than ``max_pending`` bytes wait to be written system-wide)."""
        why = cls.unsupported(dir_fd) or _busy(max_pending)
        if why is None:
            try:  # a descriptor of its own: it samples the filesystem's error sequence now
                own = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
                return cls(own, fault)
            except OSError as exc:
                why = f"the directory could not be opened again ({exc.strerror})"
        log.debug("an fsync per file, not one syncfs: %s", why)
        return None

    @staticmethod
    def unsupported(dir_fd: int) -> str | None:
        """Why a group sync is never as durable as an fsync of each file on the filesystem
        of ``dir_fd`` (None: it is, whenever the disk is not busy)."""
        if not kernel_reports_errors():
            return "this kernel does not report writeback errors through syncfs"
        kind = filesystem_type(dir_fd)
        if kind not in _LOCAL_JOURNALED:
            magic = "unknown" if kind is None else hex(kind)
            return f"the filesystem (statfs magic {magic}) is not ext4, XFS or btrfs"
        return None

    @classmethod
    def start_at(
        cls, directory: str, max_pending: int, fault: str = "after_group_sync"
    ) -> GroupSync | None:
        """``start`` for a directory of promoter's own state, by path (None: fsync each)."""
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return cls.start(fd, max_pending, fault)
        finally:
            os.close(fd)

    def sync(self) -> None:
        """``syncfs``: every file and entry written on the filesystem so far is durable.

        Raises the ``OSError`` of a failed call (a writeback error since ``start``), and
        the same error on every later call: a failed sync is never retried and trusted
        (the kernel reports an error once per descriptor).
        """
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._fd is None:
                raise OSError(errno.EBADF, "the group's sync was closed")
            fd = os.dup(self._fd)  # the same open file: the same error sequence sample
        try:
            _syncfs(fd)
            faults.point(self._fault)
        except OSError as exc:
            self._failed = exc
            raise
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
