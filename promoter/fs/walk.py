"""A read-only fingerprint of a directory tree, and the difference between two of them.

``walk`` records every entry below a directory, reached through descriptors, hashing
content only inside ``RACY_WINDOW_NS`` of the walk's start (and, in a second walk, the
same paths the first hashed); ``compare`` (pure) lists what was created, modified or
removed (protocol: recovery#change-detection).

Not here: what a difference means (``promoter.engine.operation.worktree_diff``), and any
change to the tree: nothing here creates, writes or removes anything.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import Literal

from promoter.fs.leaf import LEAF_FLAGS, hash_fd, os_error

__all__ = ["RACY_WINDOW_NS", "Difference", "Entry", "Tree", "compare", "hashed", "walk"]

# Two seconds of FAT/SMB mtime granularity plus margin for coarse kernel clocks.
RACY_WINDOW_NS = 3_000_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

EntryKind = Literal["file", "directory", "symlink", "special"]
ChangeKind = Literal["created", "modified", "removed"]


@dataclass(frozen=True)
class Entry:
    """One entry as ``lstat`` saw it; ``sha256`` only for files that were hashed."""

    kind: EntryKind
    mode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    dev: int
    ino: int
    link: str | None = None
    sha256: str | None = None
    entered: bool = False


Tree = dict[str, Entry]
# What tells two entries of a kind apart (a field missing here is not compared).
_COMPARED: dict[EntryKind, tuple[str, ...]] = {
    "file": ("mode", "size", "mtime_ns", "ctime_ns", "dev", "ino", "sha256"),
    "symlink": ("link", "mtime_ns", "ctime_ns", "dev", "ino"),
    "directory": ("mode", "dev", "ino", "entered"),
    "special": ("mode", "size", "mtime_ns", "ctime_ns", "dev", "ino"),
}
assert all(set(names) <= {f.name for f in fields(Entry)} for names in _COMPARED.values())


@dataclass(frozen=True)
class Difference:
    """A path that differs between two walks, and which recorded fields differ."""

    path: str
    change: ChangeKind
    fields: tuple[str, ...] = ()


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special"


def _hash_at(dir_fd: int, name: str, st: os.stat_result) -> str | None:
    """sha256 of regular file ``name``; None if it is no longer the inode ``st`` named."""
    try:
        fd = os.open(name, LEAF_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(held.st_mode):
            return None
        return hash_fd(fd)[0]
    finally:
        os.close(fd)


def _open_below(dir_fd: int, name: str, st: os.stat_result) -> int | None:
    """Open directory ``name`` if it is still the inode ``st`` named; None otherwise."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    held = os.fstat(fd)
    if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        return None
    return fd


def walk(
    top: str,
    *,
    prune: Callable[[str], bool] = lambda rel: False,
    hash_paths: Collection[str] = (),
    racy_window_ns: int | None = RACY_WINDOW_NS,
) -> Tree:
    """Every entry below ``top`` by relative path (``/``-separated), ``top`` itself excluded.

    Regular files are hashed when their mtime or ctime is within ``racy_window_ns`` of
    the walk's start (never when it is None), or when their path is in ``hash_paths``.
    Directories ``prune`` returns True for are recorded and not entered. Raises
    ``WriteFailed`` when ``top`` cannot be opened or a directory cannot be listed.
    """
    racy_from = time.time_ns() - racy_window_ns if racy_window_ns is not None else 1 << 63
    wanted = set(hash_paths)
    tree: Tree = {}
    try:
        root_fd = os.open(top, _DIR_FLAGS)
    except OSError as exc:
        raise os_error("opening a directory to fingerprint", top, exc) from exc
    root_dev = os.fstat(root_fd).st_dev
    pending: list[tuple[int, str]] = [(root_fd, "")]
    try:
        while pending:
            dir_fd, prefix = pending.pop()
            try:
                _list(dir_fd, prefix, root_dev, racy_from, wanted, prune, tree, pending)
            except OSError as exc:
                raise os_error("listing a directory to fingerprint", prefix or top, exc) from exc
            finally:
                os.close(dir_fd)
    except BaseException:
        for dir_fd, _ in pending:
            os.close(dir_fd)
        raise
    return tree


def _list(
    dir_fd: int,
    prefix: str,
    root_dev: int,
    racy_from: int,
    wanted: set[str],
    prune: Callable[[str], bool],
    tree: Tree,
    pending: list[tuple[int, str]],
) -> None:
    with os.scandir(dir_fd) as listing:
        names = [item.name for item in listing]
    for name in names:
        rel = prefix + name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        kind = _kind(st.st_mode)
        link = sha256 = None
        entered = False
        if kind == "file" and (rel in wanted or max(st.st_mtime_ns, st.st_ctime_ns) >= racy_from):
            sha256 = _hash_at(dir_fd, name, st)
        elif kind == "symlink":
            try:
                link = os.readlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
        elif kind == "directory" and st.st_dev == root_dev and not prune(rel):
            child = _open_below(dir_fd, name, st)
            if child is not None:
                pending.append((child, rel + "/"))
                entered = True
        tree[rel] = Entry(
            kind=kind,
            mode=st.st_mode,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
            dev=st.st_dev,
            ino=st.st_ino,
            link=link,
            sha256=sha256,
            entered=entered,
        )


def hashed(tree: Tree) -> set[str]:
    """The paths ``walk`` hashed: the second walk must hash exactly these again."""
    return {path for path, entry in tree.items() if entry.sha256 is not None}


def compare(before: Tree, after: Tree) -> list[Difference]:
    """What was created, modified or removed from ``before`` to ``after``, sorted by path.

    ``after`` must come from a walk given ``hash_paths=hashed(before)`` and
    ``racy_window_ns=None``, so that both hashed the same files; a file hashed in one walk
    and not the other (it vanished while being read) counts as modified.
    """
    differences: list[Difference] = []
    for path in sorted(before.keys() | after.keys(), key=os.fsencode):
        old, new = before.get(path), after.get(path)
        if old is None:
            differences.append(Difference(path, "created"))
        elif new is None:
            differences.append(Difference(path, "removed"))
        elif old.kind != new.kind:
            differences.append(Difference(path, "modified", ("kind",)))
        else:
            changed = tuple(
                name for name in _COMPARED[old.kind] if getattr(old, name) != getattr(new, name)
            )
            if changed:
                differences.append(Difference(path, "modified", changed))
    return differences
