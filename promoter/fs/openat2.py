"""A held directory's chain re-checked with one ``openat2`` beneath the worktree root.

``chain_in_place`` is the check ``ParentChain.verify_chain`` makes before it walks a chain
again: one ``openat2`` with ``RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
RESOLVE_NO_XDEV`` reaches the directory, then it and its ancestors (``..`` by ``stat``, no
opens) must be the (device, inode) the chain recorded. Any refusal, error or difference
answers False and the caller walks as before, so every refusal stays the walk's own
(protocol: promotion#descriptor-chains). ``kernel_has_it`` probes the syscall once per
process; ``chain_recheck_openat2 = false`` keeps the walk everywhere.

Not here: the walk and its refusals (``chain.py``, ``root.py``), the per-component check
of a held directory (``held.py``), what a refusal means.
"""

from __future__ import annotations

import functools
import os

from promoter.fs import syscalls

__all__ = ["RESOLVE", "available", "chain_in_place", "choose", "kernel_has_it", "open_beneath"]

RESOLVE_BENEATH = 0x08
RESOLVE = (
    RESOLVE_BENEATH
    | syscalls.RESOLVE_NO_SYMLINKS
    | syscalls.RESOLVE_NO_MAGICLINKS
    | syscalls.RESOLVE_NO_XDEV
)
_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def open_beneath(root_fd: int, rel_dir: str) -> int:
    """An ``O_PATH`` descriptor of directory ``rel_dir`` below ``root_fd``, reached by one
    ``openat2`` with ``RESOLVE``; raises ``OSError`` (``ELOOP``: a symlink, ``EXDEV``: a
    mount or a way out of the root, ``ENOTDIR``, ``ENOENT``; ``ENOSYS`` without openat2)."""
    return syscalls.openat2(root_fd, rel_dir, _FLAGS, RESOLVE)


_chosen = [True]  # the settings' ``chain_recheck_openat2``; False: the walk, always


def choose(use_openat2: bool) -> None:
    """Set, for this process, whether chains are re-checked with ``openat2`` where the
    kernel has it (the daemon's ``chain_recheck_openat2`` setting; default True)."""
    _chosen[0] = use_openat2


def available() -> bool:
    """Whether this process re-checks chains with ``openat2``: chosen, and the kernel has it."""
    return _chosen[0] and kernel_has_it()


@functools.cache
def kernel_has_it() -> bool:
    """Whether ``openat2`` with ``RESOLVE`` works here (probed once per process, on ``/``)."""
    return probe()


def probe() -> bool:
    """One try of ``openat2`` with ``RESOLVE`` (``kernel_has_it`` keeps its first answer)."""
    try:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.close(open_beneath(root, "."))
    except OSError:  # ENOSYS, EPERM (seccomp), EINVAL/E2BIG (unknown flags)
        return False
    finally:
        os.close(root)
    return True


def chain_in_place(
    root_fd: int,
    root_id: tuple[int, int],
    dir_parts: list[str],
    ids: list[tuple[int, int]],
    held_fd: int,
) -> bool:
    """True when ``dir_parts`` below ``root_fd`` still names, by one ``openat2``, the
    directory ``held_fd`` holds, with every component the (device, inode) in ``ids`` and
    the root ``root_id``; False on any difference, refusal or error (the caller walks).

    ``dir_parts`` are checked components (``leaf.split_rel``); an empty chain (a file in
    the root) answers False: the walk of no component is as cheap.
    """
    if not dir_parts or len(ids) != len(dir_parts) or not available():
        return False
    try:
        fd = open_beneath(root_fd, "/".join(dir_parts))
    except OSError:
        return False
    try:
        found, held = os.fstat(fd), os.fstat(held_fd)
        if (found.st_dev, found.st_ino) != ids[-1] or (held.st_dev, held.st_ino) != ids[-1]:
            return False
        up = ".."
        for expected in [*reversed(ids[:-1]), root_id]:
            st = os.stat(up, dir_fd=fd, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != expected:
                return False
            up += "/.."
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
