"""Removing a directory tree that is provably promoter's own, by descriptors only.

``remove_own_tree(parent, name, proof)`` removes ``parent/name`` and everything below
it, but only after ``proof(fd)`` accepted the opened directory (for a sandbox: its
``run.json`` names that very run). Every directory is opened below the one holding it
with ``O_NOFOLLOW`` (``openat2`` without symlinks or mount crossings where the kernel has
it), so the walk never leaves the tree through a symlink, a swapped directory or a bind
mount; a symlink is removed as a link, never followed. A directory on another mount
(device or mount id differs from the tree's) is kept with everything in it, and so are
the directories above it; they are named in the ``PathUnsafe`` raised at the end.

Deliberately not here: deciding which trees are promoter's (the caller's ``proof``), and
anything inside a user's worktree (``promoter.fs.delete`` removes single journaled files
there, and ``Root.remove_dir_if_empty`` only empty directories).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from promoter.errors import PathUnsafe
from promoter.fs import flush
from promoter.fs.syscalls import mount_id, open_dir_component

__all__ = ["remove_own_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _same_mount(fd: int, device: int, mount: int | None) -> bool:
    return os.fstat(fd).st_dev == device and (mount is None or mount_id(fd) == mount)


def _empty(fd: int, where: str, device: int, mount: int | None, kept: list[str]) -> bool:
    """Remove everything below the open directory ``fd``; False when something was kept."""
    clean = True
    for name in sorted(os.listdir(fd)):
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        path = f"{where}/{name}"
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=fd)  # files, links, fifos: the entry itself, not its target
            continue
        try:
            child = open_dir_component(fd, name, _DIR_FLAGS)
        except OSError:  # a mount crossing or a swap under the walk: keep it
            kept.append(path)
            clean = False
            continue
        try:
            if not _same_mount(child, device, mount):
                kept.append(path)  # a bind mount inside the tree: not ours to empty
                clean = False
                continue
            if not _empty(child, path, device, mount, kept):
                clean = False  # something deeper was kept, and so is this directory
                continue
        finally:
            os.close(child)
        os.rmdir(name, dir_fd=fd)
    return clean


def remove_own_tree(parent: Path, name: str, proof: Callable[[int], bool]) -> Path:
    """Remove ``parent/name`` when ``proof`` accepts it; returns the removed path.

    Raises ``PathUnsafe`` when ``name`` is not a directory of ``parent``'s mount that
    ``proof`` accepts (nothing is removed), or when part of the tree sat on another mount
    (that part is kept and named; the rest is removed).
    """
    where = parent / name
    if "/" in name or name in ("", ".", ".."):
        raise PathUnsafe(f"{name!r} is not a single directory name", path=str(where))
    holder = os.open(parent, _DIR_FLAGS)
    try:
        try:
            top = open_dir_component(holder, name, _DIR_FLAGS)
        except OSError as exc:
            raise PathUnsafe(
                f"{where} is not a directory of its own: {exc}", path=str(where)
            ) from exc
        try:
            device, mount = os.fstat(holder).st_dev, mount_id(holder)
            if not _same_mount(top, device, mount):
                raise PathUnsafe(f"{where} is on another mount; nothing removed", path=str(where))
            if not proof(top):
                raise PathUnsafe(
                    f"{where} is not provably promoter's; nothing removed", path=str(where)
                )
            kept: list[str] = []
            clean = _empty(top, str(where), device, mount, kept)
        finally:
            os.close(top)
        if not clean:
            raise PathUnsafe(
                f"parts of {where} sat on another mount and were kept: {', '.join(kept)}",
                path=str(where),
                kept=kept,
            )
        os.rmdir(name, dir_fd=holder)
        with contextlib.suppress(OSError):
            flush.fsync(holder)
    finally:
        os.close(holder)
    return where
