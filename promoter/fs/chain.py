"""Descriptor chains from a worktree root.

This module owns every lookup promoter makes in a worktree: it opens the root once and
reaches any directory below it one component at a time with
``O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`` relative to the previous descriptor. A symlink
anywhere on a chain is refused with ``PathUnsafe``. Leaf states (``LeafState``,
``ExpectedState``) are defined in ``leaf.py`` and re-exported here.

Mounts (SPEC §5.4 step 6, §10.9) are told by mount id, not only device id, so a bind
mount of the root's own filesystem is refused (``PathUnsafe``) like any other mount.
The root's mount id is read once; each directory a walk opens costs one ``statx``
(``STATX_MNT_ID``) on its descriptor, and ``leaf_state`` (hence ``read_state`` and every
compare-and-swap in ``atomic.py``) one more on the leaf's name, which refuses a
bind-mounted single file at a target. ``verify_chain`` reads no mount ids: a
descriptor's mount never changes, the held ones were checked when opened, and a mount
placed over a component later changes its (device, inode), which the re-walk compares.
Where the kernel has ``openat2``, components are also opened with ``RESOLVE_NO_XDEV``
(``EXDEV`` → ``PathUnsafe``), re-walks included. Fallbacks: ``/proc/self/fdinfo`` mount
ids, else device ids only (``Root.mnt_id is None``; ``syscalls.mount_id_source``).

Choices made here:

- ``Root.read_state`` reports a missing directory on the way as a ``missing`` leaf; a
  component that exists but is not a directory raises ``TargetDrift``
  (``found="not_a_directory"``).
- ``Root.open_parent(rel, create=False)`` raises ``TargetDrift``
  (``found="missing_parent"``) when a directory on the way is missing; callers that
  only classify a path use ``read_state``.
- Walks refuse to enter a nested repository: a directory below the root holding a
  ``.git`` entry raises ``PathUnsafe`` (SPEC §6, rule 6).
- Any mount inside the worktree is refused, even one whose source is inside the same
  worktree: promoter does not reason about where a mount's bytes come from.

Fault point called here: ``after_mkdir`` (a new directory was made and the directory
holding it fsynced).

Deliberately not here: changing files (``atomic.py``, whose ``Parent`` extends
``ParentChain``), the repository lock (``lock.py``), and what a state means for a
promotion. Residual risks: a held directory moved out of the root after a
``verify_chain`` is only seen by the next one; a file mounted on a leaf's name and
unmounted again between the read and its check goes unseen, so that read returned the
mounted bytes (a rename or unlink onto a mount point fails with ``EBUSY``: nothing is
written through one); with neither ``statx`` mount ids nor ``/proc``, a bind mount of
the root's own filesystem looks like an ordinary directory.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Self

from promoter import faults
from promoter.errors import PathUnsafe, PromoterError, TargetDrift
from promoter.fs.leaf import (
    MISSING,
    ExpectedState,
    LeafState,
    os_error,
    read_leaf,
    split_rel,
)
from promoter.fs.syscalls import mount_id, open_dir_component

if TYPE_CHECKING:
    from promoter.fs.atomic import Parent

__all__ = ["ExpectedState", "LeafState", "Parent", "ParentChain", "Root"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ON_ANOTHER_MOUNT = "a path crosses a mount (a mount point or a bind mount)"


def _open_dir(dir_fd: int, name: str, rel: str, at: str, root_dev: int) -> int | None:
    """Open one directory component below ``dir_fd``; None when it does not exist.

    With ``openat2`` the lookup itself refuses to enter a mount (``RESOLVE_NO_XDEV``);
    the device id is compared either way.
    """
    try:
        fd = open_dir_component(dir_fd, name, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise PathUnsafe(_ON_ANOTHER_MOUNT, path=rel, at=at) from exc
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise os_error("opening a directory", rel, exc) from exc
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc2:
            raise os_error("inspecting a directory", rel, exc2) from exc2
        if stat.S_ISLNK(st.st_mode):
            raise PathUnsafe("a path component is a symlink", path=rel, at=at) from exc
        if stat.S_ISDIR(st.st_mode):
            raise PathUnsafe("a path component changed while opened", path=rel, at=at) from exc
        raise TargetDrift(
            "a path component is not a directory", path=rel, found="not_a_directory", at=at
        ) from exc
    st = os.fstat(fd)
    if st.st_dev != root_dev:
        os.close(fd)
        raise PathUnsafe("a directory is on another device (a mount)", path=rel, at=at)
    return fd


@dataclass
class _Walked:
    fd: int
    ids: list[tuple[int, int]]
    created: list[str]


class _HoldsFd:
    """Closes ``fd`` once, on ``close()`` or at the end of a ``with`` block."""

    fd: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ParentChain(_HoldsFd):
    """An open descriptor of the directory holding ``name``, reached from a ``Root``.

    ``ids`` holds the (dev, ino) of every directory from the root's first child down to
    the parent, as they were when the chain was opened; ``verify_chain`` re-walks by
    name and requires the same identities.
    """

    def __init__(
        self,
        root: Root,
        rel: str,
        fd: int,
        ids: list[tuple[int, int]],
        created_dirs: list[str],
    ) -> None:
        self.root = root
        self.rel = rel
        self.fd = fd
        self.name = rel.rsplit("/", 1)[-1]
        self.dir_parts = rel.split("/")[:-1]
        self.ids = ids
        self.created_dirs = created_dirs

    def verify_chain(self) -> None:
        """Raise ``PathUnsafe`` unless the root and every held directory are still in place.

        No mount ids are read here: the held descriptors were checked when opened and
        every re-walked directory must be the same (device, inode).
        """
        self.root.recheck()
        current = os.dup(self.root.fd)
        try:
            for depth, name in enumerate(self.dir_parts):
                at = "/".join(self.dir_parts[: depth + 1])
                try:
                    nxt = _open_dir(current, name, self.rel, at, self.root.dev)
                except TargetDrift as exc:
                    raise PathUnsafe("a held directory was replaced", path=self.rel, at=at) from exc
                os.close(current)
                current = -1
                if nxt is None:
                    raise PathUnsafe("a held directory was moved", path=self.rel, at=at)
                current = nxt
                st = os.fstat(current)
                if (st.st_dev, st.st_ino) != self.ids[depth]:
                    raise PathUnsafe("a held directory was swapped", path=self.rel, at=at)
            held, found = os.fstat(self.fd), os.fstat(current)
            if (held.st_dev, held.st_ino) != (found.st_dev, found.st_ino):
                raise PathUnsafe("the held parent is not the directory at its path", path=self.rel)
        except OSError as exc:
            raise os_error("re-walking the parent chain", self.rel, exc) from exc
        finally:
            if current >= 0:
                os.close(current)

    def leaf_state(self) -> LeafState:
        """The state of the leaf in the held parent (not re-walking the chain).

        Checked after the read: nothing may be mounted at the leaf's name (a bind-mounted
        single file has the root's device id but its own mount id).
        """
        state = read_leaf(self.fd, self.name, self.rel, self.root.dev)
        self.root.check_mount(self.fd, self.name, self.rel)
        return state


class Root(_HoldsFd):
    """The worktree root, held open by descriptor; every lookup starts here."""

    def __init__(self, path: str, fd: int, dev: int, ino: int, mnt_id: int | None = None) -> None:
        self.path = path
        self.fd = fd
        self.dev = dev
        self.ino = ino
        self.mnt_id = mnt_id

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Root:
        """Open ``path`` (the caller resolves it, e.g. with realpath) as the root.

        A relative path is made absolute first, so ``recheck`` does not depend on the
        working directory. The root's mount id is read once here (None: this process
        cannot read mount ids, and only device ids are compared).
        """
        spath = os.path.abspath(os.fspath(path))
        try:
            fd = os.open(spath, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise PathUnsafe("worktree root is not a directory", path=spath) from exc
            raise os_error("opening the worktree root", spath, exc) from exc
        try:
            st = os.fstat(fd)
            mnt_id = mount_id(fd)
        except OSError as exc:
            os.close(fd)
            raise os_error("inspecting the worktree root", spath, exc) from exc
        return cls(spath, fd, st.st_dev, st.st_ino, mnt_id)

    def check_mount(self, dir_fd: int, name: str, rel: str, at: str | None = None) -> None:
        """Raise ``PathUnsafe`` unless ``dir_fd`` (``name=""``), or its entry ``name``, is on
        the root's mount; ``dir_fd`` must then be a held directory on it. A missing entry passes.
        """
        if self.mnt_id is None:
            return
        try:
            found = mount_id(dir_fd, name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise os_error("reading a mount id", rel, exc) from exc
        if found != self.mnt_id:
            raise PathUnsafe(_ON_ANOTHER_MOUNT, path=rel, at=at or rel, mount_id=found)

    def recheck(self) -> None:
        """Raise ``PathUnsafe`` if the root's path no longer names the held directory."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError as exc:
            raise PathUnsafe("worktree root is gone", path=self.path) from exc
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            raise PathUnsafe("worktree root was renamed or replaced", path=self.path)

    def _walk(self, rel: str, dir_parts: list[str], *, create: bool) -> _Walked | None:
        """Open the chain to ``dir_parts``; None if a directory is missing and not created."""
        current = os.dup(self.fd)
        walked = _Walked(fd=-1, ids=[], created=[])
        try:
            for depth, name in enumerate(dir_parts):
                at = "/".join(dir_parts[: depth + 1])
                nxt = _open_dir(current, name, rel, at, self.dev)
                if nxt is None and create:
                    if self._mkdir(current, name, at):
                        walked.created.append(at)  # recorded before the sync can fail
                        self._sync_new_dir(current, rel)
                    nxt = _open_dir(current, name, rel, at, self.dev)
                os.close(current)
                current = -1
                if nxt is None:
                    return None
                current = nxt
                self.check_mount(current, "", rel, at)
                st = os.fstat(current)
                walked.ids.append((st.st_dev, st.st_ino))
                if not (walked.created and walked.created[-1] == at):
                    self._refuse_nested_repository(current, rel, at)
        except BaseException as exc:
            if current >= 0:
                os.close(current)
            error = os_error("opening a directory", rel, exc) if isinstance(exc, OSError) else exc
            if isinstance(error, PromoterError) and walked.created:
                error.context["created_dirs"] = list(walked.created)
            if error is exc:
                raise
            raise error from exc
        walked.fd = current
        return walked

    @staticmethod
    def _mkdir(dir_fd: int, name: str, at: str) -> bool:
        try:
            os.mkdir(name, mode=0o777, dir_fd=dir_fd)
        except FileExistsError:
            return False
        except OSError as exc:
            raise os_error("creating a directory", at, exc) from exc
        return True

    @staticmethod
    def _sync_new_dir(dir_fd: int, rel: str) -> None:
        try:
            os.fsync(dir_fd)
            faults.point("after_mkdir")
        except OSError as exc:
            raise os_error("syncing a new directory", rel, exc) from exc

    @staticmethod
    def _refuse_nested_repository(dir_fd: int, rel: str, at: str) -> None:
        try:
            os.stat(".git", dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise os_error("inspecting a directory", rel, exc) from exc
        raise PathUnsafe("path is inside a nested repository", path=rel, at=at)

    def open_parent(self, rel: str, *, create: bool) -> Parent:
        """Open the directory holding ``rel`` through a descriptor chain.

        With ``create=True`` missing directories are made (``mkdir`` with mode 0o777,
        the umask applies), each fsynced into its parent and listed shallowest first in
        ``created_dirs``; if the walk then fails, the error's context carries the
        ``created_dirs`` made so far. Without ``create`` a missing directory raises
        ``TargetDrift`` (``found="missing_parent"``).
        """
        from promoter.fs.atomic import Parent  # imported here: atomic.py extends this module

        parts = split_rel(rel)
        walked = self._walk(rel, parts[:-1], create=create)
        if walked is None:
            raise TargetDrift("a parent directory is missing", path=rel, found="missing_parent")
        return Parent(self, rel, walked.fd, walked.ids, walked.created)

    def _open_chain(self, rel: str) -> ParentChain | None:
        parts = split_rel(rel)
        walked = self._walk(rel, parts[:-1], create=False)
        if walked is None:
            return None
        return ParentChain(self, rel, walked.fd, walked.ids, walked.created)

    def read_state(self, rel: str) -> LeafState:
        """Read what is at ``rel`` now, through a fresh chain, verified after reading."""
        chain = self._open_chain(rel)
        if chain is None:
            return MISSING
        with chain:
            state = chain.leaf_state()
            chain.verify_chain()
        return state

    def remove_dir_if_empty(self, rel: str) -> bool:
        """``rmdir`` directory ``rel`` if empty; False if missing, non-empty or not a directory."""
        chain = self._open_chain(rel)
        if chain is None:
            return False
        with chain:
            try:
                st = os.stat(chain.name, dir_fd=chain.fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise os_error("inspecting a directory", rel, exc) from exc
            if not stat.S_ISDIR(st.st_mode):
                return False
            if st.st_dev != self.dev:
                raise PathUnsafe("a directory is on another device (a mount)", path=rel)
            self.check_mount(chain.fd, chain.name, rel)
            chain.verify_chain()
            try:
                os.rmdir(chain.name, dir_fd=chain.fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                    return False
                if exc.errno == errno.EBUSY:  # a mount point, placed after the check
                    raise PathUnsafe(_ON_ANOTHER_MOUNT, path=rel, at=rel) from exc
                raise os_error("removing a directory", rel, exc) from exc
            try:
                os.fsync(chain.fd)
            except OSError as exc:
                raise os_error("syncing a directory", rel, exc) from exc
        return True
