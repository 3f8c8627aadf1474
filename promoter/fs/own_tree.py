"""Removing a directory tree that is provably promoter's own, and disarming one it keeps.

``remove_own_tree(parent, name, proof)`` removes ``parent/name`` and everything below
it, but only after ``proof(fd)`` accepted the opened directory (for a sandbox: its
``run.json`` names that very run). The walk is ``promoter.fs.tree_walk``'s: by
descriptors, with a stack of its own (any depth, any name, paths past ``PATH_MAX``),
never through a symlink, a swapped directory or a bind mount; a symlink, a FIFO or a
socket is removed as an entry, never opened or followed. A directory the command left
unreadable (mode 000) or unwritable is given ``u+rwx`` first, through a descriptor of
itself. A directory on another mount, or an entry that cannot be removed, is kept with
the directories above it; they are named in the ``PathUnsafe`` raised at the end.

``disarm_tree(path)`` drops the set-user-ID and set-group-ID bits of every file and
directory in a tree promoter keeps (a sandbox after its command ended), so nothing a
command left there runs with its owner's privileges. A set-ID file with more than one
link is unlinked from the tree instead (changing its mode would change the other name's
file too) and named.

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
from promoter.fs.tree_walk import DIR_FLAGS, Level, Walk

__all__ = ["disarm_tree", "remove_own_tree"]

SETID = stat.S_ISUID | stat.S_ISGID


def _same_mount(fd: int, device: int, mount: int | None) -> bool:
    return os.fstat(fd).st_dev == device and (mount is None or mount_id(fd) == mount)


def _in_writable(level: Level, action: Callable[[int], None]) -> None:
    """``action(level.fd)``, once more after giving the directory ``u+rwx`` if refused."""
    assert level.fd is not None
    try:
        action(level.fd)
    except PermissionError:
        os.fchmod(level.fd, stat.S_IMODE(os.fstat(level.fd).st_mode) | stat.S_IRWXU)
        action(level.fd)


def _empty(top: int, where: str) -> list[str]:
    """Remove everything below the open directory ``top``; what was kept."""
    walk = Walk(top, where, enter_unreadable=True)

    def entry(level: Level, name: str, info: os.stat_result) -> bool:
        try:
            _in_writable(level, lambda fd: os.unlink(name, dir_fd=fd))
        except FileNotFoundError:
            pass
        except OSError:
            walk.kept.append(walk.path(name))
            return False
        return True

    def leave(parent: Level, child: Level) -> bool:
        if not child.clean:
            return False
        try:
            _in_writable(parent, lambda fd: os.rmdir(child.name, dir_fd=fd))
        except OSError:
            walk.kept.append(walk.path(child.name))
            return False
        return True

    walk.run(entry, leave)
    return walk.kept


def remove_own_tree(parent: Path, name: str, proof: Callable[[int], bool]) -> Path:
    """Remove ``parent/name`` when ``proof`` accepts it; returns the removed path.

    Raises ``PathUnsafe`` when ``name`` is not a directory of ``parent``'s mount that
    ``proof`` accepts (nothing is removed), or when part of the tree sat on another mount
    or could not be removed (that part is kept and named; the rest is removed).
    """
    where = parent / name
    if "/" in name or name in ("", ".", ".."):
        raise PathUnsafe(f"{name!r} is not a single directory name", path=str(where))
    holder = os.open(parent, DIR_FLAGS)
    try:
        try:
            top = open_dir_component(holder, name, DIR_FLAGS)
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
            kept = _empty(top, str(where))
        finally:
            os.close(top)
        if kept:
            raise PathUnsafe(
                f"parts of {where} were kept (another mount, or not removable): " + ", ".join(kept),
                path=str(where),
                kept=kept,
            )
        os.rmdir(name, dir_fd=holder)
        with contextlib.suppress(OSError):
            flush.fsync(holder)
    finally:
        os.close(holder)
    return where


def _drop_setid(fd: int, mode: int) -> None:
    """Clear the set-ID bits of the file open (``O_PATH`` or not) at ``fd``."""
    os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) & ~SETID)


def disarm_tree(path: Path) -> list[str]:
    """Drop every set-user-ID and set-group-ID bit in the tree at ``path``.

    Returns the set-ID files with other links that were unlinked from the tree instead.
    Raises ``PathUnsafe`` naming what could not be walked or changed.
    """
    top = os.open(path, DIR_FLAGS)
    unlinked: list[str] = []
    try:
        walk = Walk(top, str(path), enter_unreadable=True)

        def entry(level: Level, name: str, info: os.stat_result) -> bool:
            if not stat.S_ISREG(info.st_mode) or not info.st_mode & SETID:
                return True
            assert level.fd is not None
            try:
                if info.st_nlink > 1:
                    _in_writable(level, lambda fd: os.unlink(name, dir_fd=fd))
                    unlinked.append(walk.path(name))
                    return True
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=level.fd)
                try:
                    now = os.fstat(fd)
                    if now.st_ino != info.st_ino or not stat.S_ISREG(now.st_mode):
                        raise OSError("swapped during the walk")
                    _drop_setid(fd, now.st_mode)
                finally:
                    os.close(fd)
            except OSError:
                walk.kept.append(walk.path(name))
                return False
            return True

        def leave(parent: Level, child: Level) -> bool:
            assert child.fd is not None
            mode = stat.S_IMODE(os.fstat(child.fd).st_mode)
            wanted = (mode if child.mode_before is None else child.mode_before) & ~SETID
            if wanted != mode:  # set-ID bits dropped, or the mode given back as it was
                os.fchmod(child.fd, wanted)
            return True

        walk.run(entry, leave)
        mode = os.fstat(top).st_mode
        if mode & SETID:
            os.fchmod(top, stat.S_IMODE(mode) & ~SETID)
    finally:
        os.close(top)
    if walk.kept:
        raise PathUnsafe(
            f"set-ID bits in {path} could not all be dropped: " + ", ".join(walk.kept),
            path=str(path),
            kept=walk.kept,
        )
    return unlinked
