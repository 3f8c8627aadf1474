"""What is at one path: lexical re-checks, leaf states and reading a leaf without following it.

This module owns the vocabulary the fs layer speaks in: ``ExpectedState`` (the domain's
``State``: missing, or a file with a sha256 and git mode), ``LeafState`` (what was found:
missing, file, directory, symlink or special file, with identity; a symlink's ``sha256``
is that of its target text, read with ``readlinkat``, its mode ``120000``), the cheap
lexical re-check of worktree-relative paths (empty, ``.``, ``..``, ``/``, NUL, ``.git``
under case-folding, over-long names; raised as ``PathUnsafe`` before any syscall, as
defence in depth behind the domain layer's path rules), and ``read_leaf``, which
classifies one entry of an open directory without following symlinks and without
blocking on FIFOs or devices.

Deliberately not here: walking from the root (``chain.py``) and any change to a file
(``atomic.py``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import Literal, TypedDict

from promoter.domain.path_state import SYMLINK_MODE, State, holds
from promoter.domain.record_type import record
from promoter.errors import PathUnsafe, WriteFailed

TEMP_PREFIX = ".promoter-tmp-"
KEPT_PREFIX = ".promoter-kept-"
LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_ATTEMPTS = 4
_CHUNK = 1 << 20

LeafKind = Literal["missing", "file", "directory", "symlink", "special"]


# the domain's one state type: missing, or a file with this sha256 and git mode
ExpectedState = State


class LeafReport(TypedDict):
    """``LeafState.to_dict``: a leaf as drift and reconciliation messages report it."""

    kind: str
    sha256: str | None
    mode: str | None
    size: int | None


@record(frozen=True)
class LeafState:
    """What is at a path right now, read without following symlinks."""

    kind: LeafKind
    sha256: str | None = None
    mode: str | None = None
    size: int | None = None
    dev: int | None = None
    ino: int | None = None
    nlink: int | None = None

    def matches(
        self,
        exists: bool | ExpectedState,
        sha256: str | None = None,
        mode: str | None = None,
    ) -> bool:
        """True when this leaf is exactly the given state (an ``ExpectedState`` or its fields)."""
        return holds(self, exists if isinstance(exists, State) else State(exists, sha256, mode))

    def to_dict(self) -> LeafReport:
        """A report of the state for drift and reconciliation messages."""
        return {"kind": self.kind, "sha256": self.sha256, "mode": self.mode, "size": self.size}


MISSING = LeafState(kind="missing")


def git_mode_of(st_mode: int) -> str:
    """``"100755"`` when the owner-execute bit is set, else ``"100644"``."""
    return "100755" if st_mode & stat.S_IXUSR else "100644"


def _check_component(rel: str, name: str) -> None:
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\x00" in name
        or name.casefold() == ".git"
        or len(name.encode("utf-8", "surrogateescape")) > 255
    ):
        raise PathUnsafe("path has an unsafe component", path=rel, component=name)


_NOT_NAMES = frozenset(("", ".", ".."))


def split_rel(rel: str) -> list[str]:
    """Split a worktree-relative file path into checked components (at least one).

    The whole path is looked at first: no NUL in it, at most 255 bytes in all (so in each
    component), no empty, ``.`` or ``..`` component and none that case-folds to ``.git``
    (``casefold`` maps each character on its own and never makes a ``/``, so the folded
    path's components are the components' folds). Only a path failing one of those is
    checked component by component, which raises the same ``PathUnsafe`` as always.
    """
    size = len(rel.encode("utf-8", "surrogateescape"))
    if not rel or rel.startswith("/") or size > 4096:
        raise PathUnsafe("path is empty, absolute or too long", path=rel)
    parts = rel.split("/")
    if (
        size > 255
        or "\x00" in rel
        or not _NOT_NAMES.isdisjoint(parts)
        or ".git" in rel.casefold().split("/")
    ):
        for name in parts:
            _check_component(rel, name)
    return parts


def split_dir(rel_dir: str) -> list[str]:
    """Like ``split_rel`` but ``""`` names the root itself."""
    return [] if rel_dir == "" else split_rel(rel_dir)


def os_error(action: str, rel: str, exc: OSError) -> WriteFailed:
    return WriteFailed(f"{action} failed: {exc.strerror}", path=rel, errno=exc.errno)


def hash_fd(fd: int) -> tuple[str, int]:
    """sha256 hex and byte count of everything readable from ``fd``."""
    digest = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _read_leaf_once(dir_fd: int, name: str, rel: str, root_dev: int) -> LeafState | None:
    """Classify ``name`` in ``dir_fd``; None when it changed while being read."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return MISSING
    kind: LeafKind | None = None
    if stat.S_ISLNK(st.st_mode):
        return _read_link(dir_fd, name, st)
    if stat.S_ISDIR(st.st_mode):
        kind = "directory"
    elif not stat.S_ISREG(st.st_mode):
        kind = "special"
    if kind is not None:
        return LeafState(kind, None, None, st.st_size, st.st_dev, st.st_ino, st.st_nlink)
    if st.st_dev != root_dev:
        raise PathUnsafe("file is on another device than the worktree root", path=rel)
    try:
        fd = os.open(name, LEAF_FLAGS, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EWOULDBLOCK):
            return None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode) or (before.st_dev, before.st_ino) != (
            st.st_dev,
            st.st_ino,
        ):
            return None
        state = hash_steady(fd, before)
    finally:
        os.close(fd)
    if state is None:
        return None
    try:
        again = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        return None
    return state


def _read_link(dir_fd: int, name: str, st: os.stat_result) -> LeafState | None:
    """The link ``name``'s target text, hashed; None if it changed while read. Never followed."""
    try:
        target = os.readlink(os.fsencode(name), dir_fd=dir_fd)
        again = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # no longer a link
            return None
        raise
    if (again.st_dev, again.st_ino, again.st_ctime_ns) != (st.st_dev, st.st_ino, st.st_ctime_ns):
        return None
    return LeafState(
        "symlink",
        hashlib.sha256(target).hexdigest(),
        SYMLINK_MODE,
        len(target),
        st.st_dev,
        st.st_ino,
        st.st_nlink,
    )


def hash_steady(fd: int, before: os.stat_result) -> LeafState | None:
    """Hash the regular file ``fd``; None if it changed (size, times, mode) while read."""
    sha256, size = hash_fd(fd)
    after = os.fstat(fd)
    stamp = (before.st_size, before.st_mtime_ns, before.st_ctime_ns, before.st_mode)
    if stamp != (after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_mode):
        return None
    if size != after.st_size:
        return None
    return LeafState(
        kind="file",
        sha256=sha256,
        mode=git_mode_of(after.st_mode),
        size=size,
        dev=after.st_dev,
        ino=after.st_ino,
        nlink=after.st_nlink,
    )


def read_leaf_bytes(dir_fd: int, name: str, rel: str, state: LeafState, limit: int) -> bytes:
    """The bytes of the regular file ``name`` that was just read as ``state``.

    Opened ``O_NOFOLLOW|O_NONBLOCK``; it must be the same inode, at most ``limit`` bytes
    (never more is read), and hash to ``state.sha256``: otherwise it changed since it was
    read and ``PathUnsafe`` is raised (nothing is returned of a file in flux).
    """
    changed = PathUnsafe("the file changed while it was read", path=rel)
    try:
        fd = os.open(name, LEAF_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise changed from exc
    chunks: list[bytes] = []
    total = 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (state.dev, state.ino):
            raise changed
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise changed
    except OSError as exc:
        raise os_error("reading the target", rel, exc) from exc
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != state.sha256:
        raise changed
    return data


def read_leaf(dir_fd: int, name: str, rel: str, root_dev: int) -> LeafState:
    """Classify the entry ``name`` of an open directory without following or blocking.

    A regular file is opened ``O_NOFOLLOW|O_NONBLOCK``, checked to be the inode that was
    stat'ed by name, hashed, and checked unchanged (size, mtime, ctime, mode) and still
    at that name afterwards; a leaf that keeps changing raises ``PathUnsafe``.
    """
    try:
        for _ in range(_READ_ATTEMPTS):
            state = _read_leaf_once(dir_fd, name, rel, root_dev)
            if state is not None:
                return state
    except OSError as exc:
        raise os_error("reading the target", rel, exc) from exc
    raise PathUnsafe("target kept changing while it was read", path=rel)
