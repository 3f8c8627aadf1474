"""The few Linux calls the standard library lacks: ``renameat2``, the umask, the mode rule.

This module owns ``renameat2`` through ctypes (libc's wrapper, or the raw syscall
number where libc lacks it; ``ENOSYS`` when neither exists), reading the process umask
without changing it (``/proc/self/status``; set-and-restore under a lock only as a
fallback, which is racy against other threads creating files), and the permission
bits SPEC §3.1 gives a written file.

Deliberately not here: deciding when to rename or which mode a target should have.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import stat
import threading
from collections.abc import Callable

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYSCALL_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "riscv64": 276, "i686": 353, "i386": 353}
_GIT_MODES = ("100644", "100755")
_umask_lock = threading.Lock()

Renameat2 = Callable[[int, str, int, str, int], None]


@functools.cache
def _renameat2_impl() -> Renameat2:
    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is not None:
        c_int, c_str = ctypes.c_int, ctypes.c_char_p
        func.argtypes = [c_int, c_str, c_int, c_str, ctypes.c_uint]
        func.restype = ctypes.c_int

        def call(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
            if func(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flags) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))

        return call
    number = _SYSCALL_RENAMEAT2.get(platform.machine())
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def call_syscall(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
        if number is None:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
        args = (ctypes.c_int(src_fd), os.fsencode(src), ctypes.c_int(dst_fd), os.fsencode(dst))
        if syscall(ctypes.c_long(number), *args, ctypes.c_uint(flags)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return call_syscall


def renameat2(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str, flags: int) -> None:
    """Linux ``renameat2``; raises ``OSError`` (``ENOSYS``/``EINVAL`` when unsupported)."""
    _renameat2_impl()(src_dir_fd, src, dst_dir_fd, dst, flags)


def current_umask() -> int:
    """The process umask, read from ``/proc/self/status`` (set-and-restore as fallback)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode(git_mode: str, replaced_mode: int | None, umask: int) -> int:
    """Permission bits for a written file (SPEC §3.1), like git checkout does.

    The base is the replaced file's permission bits, or ``0o666 & ~umask`` for a new
    file; an executable gets the execute bits where read is set (and always the owner
    execute bit, so it reads back as ``100755``); a non-executable loses all of them.
    """
    if git_mode not in _GIT_MODES:
        raise ValueError(f"not a promotable git mode: {git_mode!r}")
    base = (replaced_mode & 0o777) if replaced_mode is not None else (0o666 & ~umask)
    if git_mode == "100755":
        return base | ((base & 0o444) >> 2) | stat.S_IXUSR
    return base & ~0o111
