"""The repository lock (protocol: promotion#step-lock).

This module owns ``RepoLock``: an in-process ``threading.Lock`` per git common dir (by
realpath) and an exclusive ``flock`` (through ``portalocker``'s ``FlockLocker``, never a
record lock) on ``<common dir>/promoter.lock``, opened by promoter itself relative to the
common dir and checked (protocol: promotion#lock-file). One deadline bounds the thread
lock, the flock and the wait for git's ``index.lock``; past it ``LockUnavailable`` names
why (``held_in_process``, ``held_by_another_process``, ``lock_file_replaced``,
``index_lock_present``) and, from the holder's record, who. The thread lock is not
reentrant.

Not here: what is done under the lock, and any git command. Residual risk: a child made
by ``fork`` without ``exec`` shares the locked file description.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from portalocker import AlreadyLocked, LockException, LockFlags
from portalocker.portalocker import FlockLocker

from promoter.errors import LockUnavailable, PathUnsafe, WriteFailed

LOCK_NAME = "promoter.lock"
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_HOLDER_BYTES = 512  # the holder's line, at most
_FIRST_DELAY = 0.002
_MAX_DELAY = 0.05

LockObserver = Callable[[str, float], None]
OBSERVERS: list[LockObserver] = []  # told (common dir, seconds waited) on each acquisition

_registry_guard = threading.Lock()
_thread_locks: dict[str, threading.Lock] = {}


def _thread_lock_for(key: str) -> threading.Lock:
    with _registry_guard:
        return _thread_locks.setdefault(key, threading.Lock())


class RepoLock:
    """Exclusive lock of one repository (all worktrees sharing a git common dir)."""

    def __init__(
        self,
        common_dir: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        index_lock_dirs: Sequence[str | os.PathLike[str]] = (),
        holder: str | None = None,
    ) -> None:
        """``holder``: this process's name in the lock file while it holds the lock (a
        host id); its pid is recorded beside it."""
        self.holder = holder
        self.common_dir = os.path.realpath(common_dir)
        self.path = os.path.join(self.common_dir, LOCK_NAME)
        self.timeout = timeout
        self.index_lock_dirs = [os.fspath(d) for d in index_lock_dirs]
        self._thread_lock: threading.Lock | None = None
        self._dir_fd = -1
        self._fd = -1

    # -- acquiring -------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lock within ``timeout`` seconds or raise ``LockUnavailable``."""
        if self._thread_lock is not None:
            raise RuntimeError("this RepoLock is already held")
        deadline = time.monotonic() + self.timeout
        thread_lock = _thread_lock_for(self.common_dir)
        if not thread_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise self._unavailable("held_in_process")
        try:
            self._open_common_dir()
            self._take_file_lock(deadline)
        except BaseException:
            self._close_fds()
            thread_lock.release()
            raise
        self._thread_lock = thread_lock
        for observe in tuple(OBSERVERS):
            with contextlib.suppress(Exception):  # a metric never fails an acquisition
                observe(self.common_dir, time.monotonic() - deadline + self.timeout)

    def _open_common_dir(self) -> None:
        try:
            self._dir_fd = os.open(self.common_dir, _DIR_FLAGS)
        except OSError as exc:
            raise WriteFailed(
                "cannot open the git common dir", path=self.common_dir, errno=exc.errno
            ) from exc

    def _take_file_lock(self, deadline: float) -> None:
        delay = _FIRST_DELAY
        while True:
            fd = self._open_lock_file()
            reason = self._try_lock(fd)
            if reason is None:
                self._fd = fd
                self._record_holder()
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                holder = _read_holder(fd) if reason == "held_by_another_process" else None
                os.close(fd)
                raise self._unavailable(reason, holder)
            os.close(fd)
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_DELAY)

    def _open_lock_file(self) -> int:
        try:
            fd = os.open(LOCK_NAME, _OPEN_FLAGS, 0o600, dir_fd=self._dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                raise PathUnsafe(
                    "lock path is not a regular file", path=self.path, errno=exc.errno
                ) from exc
            raise WriteFailed("cannot open the lock file", path=self.path, errno=exc.errno) from exc
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "lock path is not a regular file"
        elif st.st_nlink != 1:
            problem = "lock file has other hard links"
        elif st.st_uid != os.geteuid():
            problem = "lock file is owned by another user"
        if problem is not None:
            os.close(fd)
            raise PathUnsafe(problem, path=self.path)
        return fd

    def _try_lock(self, fd: int) -> str | None:
        """Flock ``fd`` and check it is still the lock file; None when held, else why not."""
        try:
            FlockLocker().lock(fd, LockFlags.EXCLUSIVE | LockFlags.NON_BLOCKING)
        except AlreadyLocked:
            return "held_by_another_process"
        except LockException as exc:
            raise LockUnavailable(
                "the lock file cannot be locked", path=self.path, reason="lock_error"
            ) from exc
        if not self._names_locked_inode(fd):
            return "lock_file_replaced"
        if self._index_lock_present():
            return "index_lock_present"
        return None

    def _names_locked_inode(self, fd: int) -> bool:
        try:
            by_name = os.stat(LOCK_NAME, dir_fd=self._dir_fd, follow_symlinks=False)
            by_path = os.stat(self.common_dir)
        except FileNotFoundError:
            return False
        held, held_dir = os.fstat(fd), os.fstat(self._dir_fd)
        return (by_name.st_dev, by_name.st_ino) == (held.st_dev, held.st_ino) and (
            by_path.st_dev,
            by_path.st_ino,
        ) == (held_dir.st_dev, held_dir.st_ino)

    def _index_lock_present(self) -> bool:
        return any(os.path.lexists(os.path.join(d, "index.lock")) for d in self.index_lock_dirs)

    def _unavailable(self, reason: str, holder: dict[str, Any] | None = None) -> LockUnavailable:
        if holder is None:
            return LockUnavailable(
                "the repository lock could not be taken in time",
                path=self.path,
                reason=reason,
                timeout_seconds=self.timeout,
            )
        return LockUnavailable(
            f"the repository lock is held by {_describe(holder)}",
            path=self.path,
            reason=reason,
            timeout_seconds=self.timeout,
            holder=holder,
        )

    def _record_holder(self) -> None:
        """Write this process into the held lock file (a hint; a failure is ignored)."""
        if self.holder is None:
            return
        line = json.dumps({"pid": os.getpid(), "host": self.holder}, sort_keys=True) + "\n"
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, line.encode()[:_HOLDER_BYTES], 0)

    # -- holding and releasing ---------------------------------------------------------

    def check_held(self) -> None:
        """Raise ``PathUnsafe`` unless the lock path still names the locked file."""
        if self._fd < 0:
            raise RuntimeError("RepoLock.check_held called while not held")
        if not self._names_locked_inode(self._fd):
            raise PathUnsafe("the lock file was replaced while held", path=self.path)

    def release(self) -> None:
        """Drop the flock, close the descriptors and release the in-process lock."""
        if self._fd >= 0 and self.holder is not None:
            with contextlib.suppress(OSError):  # no stale holder left behind
                os.ftruncate(self._fd, 0)
        if self._fd >= 0:
            # closing the last descriptor below drops the flock even if unlocking fails
            with contextlib.suppress(LockException):
                FlockLocker().unlock(self._fd)
        self._close_fds()
        if self._thread_lock is not None:
            self._thread_lock.release()
            self._thread_lock = None

    def _close_fds(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._dir_fd = -1

    @property
    def held(self) -> bool:
        return self._thread_lock is not None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any] | None:
    """The holder recorded in the lock file, with its state when its pid runs on this
    machine (``stopped``, ``running``, ``gone``); None when none is recorded."""
    try:
        raw = os.pread(fd, _HOLDER_BYTES, 0)
        found = json.loads(raw.decode("utf-8", "replace").splitlines()[0]) if raw else None
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("pid"), int):
        return None
    holder: dict[str, Any] = {"pid": found["pid"], "host": str(found.get("host", ""))}
    holder["state"] = _process_state(found["pid"])
    return holder


def _process_state(pid: int) -> str:
    """``stopped`` (SIGSTOP, traced), ``running`` or ``gone`` for a pid of this machine's
    process namespace (a holder on another machine sharing the disk reads as ``gone`` or
    as an unrelated process: the host id in the record tells them apart)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat_file:
            fields = stat_file.read().rpartition(")")[2].split()
    except OSError:
        return "gone"
    return "stopped" if fields and fields[0] in ("T", "t") else "running"


def _describe(holder: dict[str, Any]) -> str:
    """One sentence: who holds the lock and what the operator can do."""
    pid, host, state = holder["pid"], holder["host"] or "an unknown host", holder["state"]
    if state == "stopped":
        return (
            f"process {pid} of host {host}, which is stopped: `kill -CONT {pid}` lets it "
            f"go on (a fenced host then stands down and releases it), `kill {pid}` ends it"
        )
    if state == "gone":
        return (
            f"process {pid} of host {host}, not running on this machine: it runs elsewhere "
            "on a shared disk, or its lock is released when its process ends; try again"
        )
    return f"process {pid} of host {host}, which is running: try again once it is done"
