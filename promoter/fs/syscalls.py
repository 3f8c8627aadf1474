"""The few Linux calls the standard library lacks: ``renameat2``, ``openat2``, mount ids, the umask.

This module owns ``renameat2`` through ctypes (libc's wrapper, or the raw syscall
number where libc lacks it; ``ENOSYS`` when neither exists), opening one directory
component with ``openat2(RESOLVE_NO_XDEV|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)``
where the kernel has it (Linux 5.6+; plain ``openat`` otherwise, probed once; the call
itself as ``openat2``), the
mount id of an open descriptor or of a directory entry (``mount_id``; with the device
and inode in one call, ``statx_identity``), reading the
process umask without changing it (``/proc/self/status``; set-and-restore under a lock
only as a fallback, which is racy against other threads creating files), the
permission bits a written file gets (protocol: documents#written-file-mode), and ``start_writeback``
(``sync_file_range(SYNC_FILE_RANGE_WRITE)``: a hint that makes nothing durable).

Mount ids come from ``statx(2)`` with ``STATX_MNT_ID`` (Linux 5.8+, through libc's
wrapper or the raw syscall), else from the ``mnt_id:`` line of
``/proc/self/fdinfo/<fd>`` (Linux 3.15+), else they are unknown (``None``) and callers
fall back to comparing device ids. The source is probed once per process
(``mount_id_source``). A mount id is the kernel's per-mount number (the one
``/proc/self/mountinfo`` shows): it can be reused after a mount is gone, so ids are
only compared while a descriptor on each of the mounts is held.

Deliberately not here: deciding when to rename, what a mount crossing means for a
write, or which mode a target should have.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, Literal, cast

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYSCALL_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "riscv64": 276, "i686": 353, "i386": 353}
_SYSCALL_STATX = {"x86_64": 332, "aarch64": 291, "riscv64": 291, "i686": 383, "i386": 383}
STATX_MNT_ID = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
AT_NO_AUTOMOUNT = 0x800
AT_EMPTY_PATH = 0x1000
_SYSCALL_OPENAT2 = 437  # the same on every architecture in _SYSCALL_STATX
_AT_FDCWD = -100
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_COMPONENT = RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS
_UNAVAILABLE = (errno.ENOSYS, errno.EPERM)  # EPERM: a seccomp filter that forbids statx
_GIT_MODES = ("100644", "100755")
_SYNC_FILE_RANGE_WRITE = 2
_umask_lock = threading.Lock()
_STATUS_READ = 1 << 16  # the whole of /proc/self/status; its Umask line is the second

Renameat2 = Callable[[int, str, int, str, int], None]
MountIdSource = Literal["statx", "fdinfo", "none"]


def _machine() -> str:
    """The machine's architecture as ``platform.machine()`` answers on Linux (the kernel's
    own name), without loading ``platform``."""
    return os.uname().machine


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
    number = _SYSCALL_RENAMEAT2.get(_machine())
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


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


Openat2 = Callable[[int, str | bytes, int, int], int]


@functools.cache
def _openat2_impl() -> Openat2 | None:
    """The raw ``openat2`` syscall, or None when this kernel or filter refuses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    size = ctypes.c_size_t(ctypes.sizeof(_OpenHow))

    def call(dir_fd: int, name: str | bytes, flags: int, resolve: int) -> int:
        how = _OpenHow(flags, 0, resolve)
        path = os.fsencode(name)
        fd = syscall(
            ctypes.c_long(_SYSCALL_OPENAT2), ctypes.c_int(dir_fd), path, ctypes.byref(how), size
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), name)
        return int(fd)

    if _machine() not in _SYSCALL_STATX:
        return None
    try:
        os.close(call(_AT_FDCWD, "/", os.O_PATH | os.O_CLOEXEC, _RESOLVE_COMPONENT))
    except OSError:  # ENOSYS, EPERM (seccomp), E2BIG/EINVAL (unknown flags): use openat
        return None
    return call


def openat2(dir_fd: int, path: str | bytes, flags: int, resolve: int) -> int:
    """The ``openat2`` syscall (``how.mode`` 0): a new descriptor, or ``OSError``
    (``ENOSYS`` where this process found it unavailable)."""
    impl = _openat2_impl()
    if impl is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), path)
    return impl(dir_fd, path, flags, resolve)


def lookup_refuses_mounts() -> bool:
    """Whether ``open_dir_component``'s lookup itself refuses to cross a mount (``openat2``)."""
    return _openat2_impl() is not None


def open_dir_component(dir_fd: int, name: str | bytes, flags: int) -> int:
    """Open the single component ``name`` below ``dir_fd`` with ``flags``.

    Where ``openat2`` exists the lookup may not cross a mount (``EXDEV``), follow a
    symlink (``ELOOP``) or a magic link; elsewhere this is ``os.open(name, flags,
    dir_fd=dir_fd)`` and the caller's own checks are the only guard. Raises ``OSError``.
    """
    impl = _openat2_impl()
    if impl is None:
        return os.open(name, flags, dir_fd=dir_fd)
    return impl(dir_fd, name, flags, _RESOLVE_COMPONENT)


class _Statx(ctypes.Structure):
    """``struct statx`` as far as promoter reads it (256 bytes, spare words included)."""

    _fields_ = (
        ("stx_mask", ctypes.c_uint32),  # offset 0
        ("_up_to_ino", ctypes.c_uint8 * 28),
        ("stx_ino", ctypes.c_uint64),  # offset 32
        ("_up_to_dev", ctypes.c_uint8 * 96),
        ("stx_dev_major", ctypes.c_uint32),  # offset 136
        ("stx_dev_minor", ctypes.c_uint32),  # offset 140
        ("stx_mnt_id", ctypes.c_uint64),  # offset 144
        ("_rest", ctypes.c_uint8 * 104),
    )


assert ctypes.sizeof(_Statx) == 256 and _Statx.stx_mnt_id.offset == 144
assert _Statx.stx_ino.offset == 32 and _Statx.stx_dev_major.offset == 136


RawStatx = Callable[[int, bytes, int, int, Any], int]
_per_thread = threading.local()


@functools.cache
def _statx_impl() -> RawStatx | None:
    """libc's ``statx`` (glibc 2.28+) or the raw syscall; None where neither exists."""
    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "statx", None)
    if func is not None:
        func.restype = ctypes.c_int  # plain ints, bytes and byref convert without argtypes
        return cast(RawStatx, func)
    number = _SYSCALL_STATX.get(_machine())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def call_syscall(fd: int, path: bytes, flags: int, mask: int, buf: Any) -> int:
        args = (ctypes.c_int(fd), path, ctypes.c_int(flags), ctypes.c_uint(mask), buf)
        return int(syscall(ctypes.c_long(number), *args))

    return call_syscall


def _statx_buffer() -> _Statx:
    """One result buffer per thread, reused (a ``statx`` call fills it before it is read)."""
    return _statx_slot()[0]


def _statx_slot() -> tuple[_Statx, Any]:
    """This thread's result buffer and the reference ``statx`` is given to fill it."""
    slot: tuple[_Statx, Any] | None = getattr(_per_thread, "statx", None)
    if slot is None:
        buf = _Statx()
        slot = _per_thread.statx = (buf, ctypes.byref(buf))
    return slot


def statx_mount_id(dir_fd: int, name: str = "") -> int | None:
    """``stx_mnt_id`` of ``name`` in ``dir_fd`` (of ``dir_fd`` itself when ``name`` is ``""``).

    A final symlink is not followed and no automount is triggered; a mount sitting on
    ``name`` is entered, as every lookup does. None when statx or ``STATX_MNT_ID`` is
    unavailable (``ENOSYS``, ``EPERM``, or the bit missing from ``stx_mask``); any other
    failure raises ``OSError``.
    """
    impl = _statx_impl()
    if impl is None:
        return None
    buf = _statx_buffer()
    flags = AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | (AT_EMPTY_PATH if not name else 0)
    if impl(dir_fd, os.fsencode(name), flags, STATX_MNT_ID, ctypes.byref(buf)) != 0:
        code = ctypes.get_errno()
        if code in _UNAVAILABLE:
            return None
        raise OSError(code, os.strerror(code), name)
    if not buf.stx_mask & STATX_MNT_ID:
        return None
    return int(buf.stx_mnt_id)


STATX_INO = 0x100
_IDENTITY_MASK = STATX_INO | STATX_MNT_ID
_ENTRY_FLAGS = AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT


def statx_identity(dir_fd: int, path: bytes) -> tuple[int, int, int]:
    """(device, inode, mount id) of ``path`` below ``dir_fd`` in one ``statx``, not following
    a final symlink; the device is encoded as ``os.stat``'s ``st_dev`` is.

    Only for a process whose ``identity_by_statx()`` is True; raises ``OSError`` when the
    entry cannot be read or the kernel did not fill the inode and mount id.
    """
    impl = _statx_impl()
    assert impl is not None
    buf, ref = _statx_slot()
    if impl(dir_fd, path, _ENTRY_FLAGS, _IDENTITY_MASK, ref) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    if buf.stx_mask & _IDENTITY_MASK != _IDENTITY_MASK:
        raise OSError(errno.ENODATA, "statx did not report the inode and mount id", path)
    return os.makedev(buf.stx_dev_major, buf.stx_dev_minor), buf.stx_ino, buf.stx_mnt_id


def entry_errno(dir_fd: int, path: bytes) -> int:
    """0 when ``path`` below ``dir_fd`` exists (a final symlink not followed), else the errno
    of the failed lookup (``ENOENT`` for a missing entry), as ``os.stat`` would raise it.

    Only for a process whose ``identity_by_statx()`` is True: one ``statx`` and no
    exception for a missing entry.
    """
    impl = _statx_impl()
    assert impl is not None
    if impl(dir_fd, path, _ENTRY_FLAGS, 0, _statx_slot()[1]) != 0:
        return ctypes.get_errno() or errno.EIO
    return 0


@functools.cache
def identity_by_statx() -> bool:
    """Whether ``statx_identity`` answers as ``os.stat`` and ``mount_id`` do (probed on ``/``)."""
    if _statx_impl() is None:
        return False
    try:
        found = statx_identity(_AT_FDCWD, b"/")
        st = os.stat("/", follow_symlinks=False)
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            expected_mnt = statx_mount_id(fd)
        finally:
            os.close(fd)
    except OSError:
        return False
    return found == (st.st_dev, st.st_ino, expected_mnt) and entry_errno(_AT_FDCWD, b"/") == 0


def fdinfo_mount_id(fd: int) -> int | None:
    """The ``mnt_id:`` of ``/proc/self/fdinfo/<fd>``; None when /proc does not say."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            lines = info.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(b"mnt_id:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _fdinfo_mount_id_at(dir_fd: int, name: str) -> int | None:
    if not name:
        return fdinfo_mount_id(dir_fd)
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return fdinfo_mount_id(fd)
    finally:
        os.close(fd)


@functools.cache
def mount_id_source() -> MountIdSource:
    """Where this process reads mount ids from, probed once on ``/``."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            if statx_mount_id(fd) is not None:
                return "statx"
        except OSError:
            pass
        if fdinfo_mount_id(fd) is not None:
            return "fdinfo"
        return "none"
    finally:
        os.close(fd)


def mount_id(dir_fd: int, name: str = "") -> int | None:
    """The mount id of ``name`` in ``dir_fd`` (of ``dir_fd`` when ``name`` is ``""``).

    None only when this process has no way to read mount ids (``mount_id_source() ==
    "none"``). A source that stops answering raises ``OSError(ENODATA)``;
    ``FileNotFoundError`` and other ``OSError`` propagate.
    """
    source = mount_id_source()
    if source == "none":
        return None
    found = statx_mount_id(dir_fd, name) if source == "statx" else _fdinfo_mount_id_at(dir_fd, name)
    if found is None:
        raise OSError(errno.ENODATA, f"no mount id from {source}")
    return found


def current_umask() -> int:
    """The process umask, read from ``/proc/self/status`` (set-and-restore as fallback)."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, _STATUS_READ)
        finally:
            os.close(fd)
        at = status.find(b"\nUmask:")
        if at >= 0:
            return int(status[at + 7 : status.index(b"\n", at + 7)].strip(), 8)
    except (OSError, ValueError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode(git_mode: str, replaced_mode: int | None, umask: int) -> int:
    """Permission bits for a written file (protocol: documents#written-file-mode), like git checkout
    does.

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


@functools.cache
def _sync_file_range() -> Callable[..., int] | None:
    try:
        func = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):  # not Linux, or a libc without it
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def start_writeback(fd: int) -> None:
    """Start writing ``fd``'s dirty pages to the disk without waiting (a hint: errors of
    the call are ignored; the fsync that must follow reports any write error).

    Many files written one after another and then fsynced wait far less when each one's
    writeback started as soon as its last byte was written.
    """
    func = _sync_file_range()
    if func is not None:
        func(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
