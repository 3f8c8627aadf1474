"""The Linux inotify calls promoter uses, through libc: open, watch, unwatch, read events.

This module owns the thin binding: ``Inotify`` (one non-blocking, close-on-exec inotify
descriptor), ``add_watch`` for a directory that is not followed through a symlink,
``remove_watch``, and ``read_events``, which returns every queued event without
blocking. The event masks are the kernel's.

It deliberately does not decide what to watch or what an event means for a snapshot
(``promoter.fs.watch`` does), and it never touches the files it watches. Where inotify
is not available (not Linux, or no libc symbol) ``available()`` is false and ``Inotify``
raises ``OSError``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import weakref
from dataclasses import dataclass

__all__ = [
    "IN_ATTRIB",
    "IN_CLOSE_WRITE",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_IGNORED",
    "IN_ISDIR",
    "IN_MODIFY",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_Q_OVERFLOW",
    "IN_UNMOUNT",
    "Event",
    "Inotify",
    "available",
]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_SIZE = 1 << 16


@dataclass(frozen=True)
class Event:
    """One inotify event: the watch it came from, its mask and the entry name (or b"")."""

    wd: int
    mask: int
    name: bytes


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name, use_errno=True) if name else ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if not all(hasattr(lib, f) for f in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch")):
        return None
    lib.inotify_init1.argtypes = [ctypes.c_int]
    lib.inotify_init1.restype = ctypes.c_int
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    lib.inotify_add_watch.restype = ctypes.c_int
    lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.inotify_rm_watch.restype = ctypes.c_int
    return lib


_LIBC = _libc()


def available() -> bool:
    """Whether this system offers inotify."""
    return _LIBC is not None


def _raise(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")


class Inotify:
    """One inotify descriptor; ``close`` releases it and every watch on it."""

    def __init__(self) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "inotify is not available on this system")
        self._lib = _LIBC
        fd = self._lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            _raise("inotify_init1")
        self.fd: int | None = fd
        self._finalizer = weakref.finalize(self, os.close, fd)  # closed if never closed

    def _fd(self) -> int:
        if self.fd is None:
            raise OSError(errno.EBADF, "the inotify descriptor is closed")
        return self.fd

    def add_watch(self, path: bytes, mask: int) -> int:
        """Watch the directory ``path`` (a final symlink is not followed); its descriptor."""
        wd = self._lib.inotify_add_watch(self._fd(), path, mask | IN_ONLYDIR | IN_DONT_FOLLOW)
        if wd < 0:
            _raise(f"inotify_add_watch {path!r}")
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        """Stop watching ``wd``; a watch the kernel already dropped is not an error."""
        if self._lib.inotify_rm_watch(self._fd(), wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            _raise("inotify_rm_watch")

    def read_events(self) -> list[Event]:
        """Every event queued now, without waiting."""
        fd = self._fd()
        events: list[Event] = []
        while True:
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                return events
            if not data:
                return events
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size
                name = data[offset : offset + size].rstrip(b"\0")
                offset += size
                events.append(Event(wd, mask, name))

    def close(self) -> None:
        """Release the descriptor (and so every watch)."""
        if self.fd is not None:
            self.fd = None
            self._finalizer()
