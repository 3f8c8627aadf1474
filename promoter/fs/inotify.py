"""The Linux inotify calls promoter uses: open, watch, unwatch, read events.

This module owns the thin adapter over ``inotify_simple`` (which binds libc and parses the
kernel's event records): ``Inotify`` (one non-blocking, close-on-exec inotify descriptor),
``add_watch`` for a directory that is not followed through a symlink, ``remove_watch``,
and ``read_events``, which returns every queued event (waiting a bounded time for a
first one only when asked), each name as the exact bytes the kernel gave. The event
masks are the kernel's.

It deliberately does not decide what to watch or what an event means for a snapshot
(``promoter.fs.watch`` does), and it never touches the files it watches. Where inotify
is not available (not Linux) ``available()`` is false and ``Inotify`` raises ``OSError``,
as it does on a libc without the inotify calls.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from typing import Any

try:
    import inotify_simple
except ImportError:  # not POSIX (termios, fcntl): available() is false
    _simple: Any = None
else:
    _simple = inotify_simple

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


@dataclass(frozen=True)
class Event:
    """One inotify event: the watch it came from, its mask and the entry name (or b"")."""

    wd: int
    mask: int
    name: bytes


_AVAILABLE = _simple is not None and sys.platform.startswith("linux")


def available() -> bool:
    """Whether this system offers inotify."""
    return _AVAILABLE


class Inotify:
    """One inotify descriptor; ``close`` releases it and every watch on it."""

    def __init__(self) -> None:
        if not _AVAILABLE:
            raise OSError(errno.ENOSYS, "inotify is not available on this system")
        # close-on-exec, non-blocking; the descriptor is closed with the object if never closed
        try:
            self._ino: Any = _simple.INotify(inheritable=False, nonblocking=True)
        except AttributeError as exc:  # a libc without the inotify calls
            raise OSError(errno.ENOSYS, "inotify is not available on this system") from exc

    @property
    def fd(self) -> int | None:
        return None if self._ino is None else int(self._ino.fileno())

    def _open(self) -> Any:
        if self._ino is None:
            raise OSError(errno.EBADF, "the inotify descriptor is closed")
        return self._ino

    def add_watch(self, path: bytes, mask: int) -> int:
        """Watch the directory ``path`` (a final symlink is not followed); its descriptor."""
        return int(self._open().add_watch(path, mask | IN_ONLYDIR | IN_DONT_FOLLOW))

    def remove_watch(self, wd: int) -> None:
        """Stop watching ``wd``; a watch the kernel already dropped is not an error."""
        try:
            self._open().rm_watch(wd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise

    def read_events(self, wait_ms: int = 0) -> list[Event]:
        """Every event queued now, waiting up to ``wait_ms`` for a first one when none is."""
        found = self._open().read(timeout=wait_ms)
        return [Event(e.wd, e.mask, os.fsencode(e.name)) for e in found]

    def close(self) -> None:
        """Release the descriptor (and so every watch)."""
        if self._ino is not None:
            ino, self._ino = self._ino, None
            ino.close()
