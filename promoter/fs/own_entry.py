"""Removing one entry that is provably promoter's own: made this run, or inside its own tree.

``Made`` records a path this process made by device and inode and removes it only while
the name still names that inode; ``OwnTree`` holds a tree promoter made and hands out
``OwnDir`` handles reached one component at a time (``openat2`` where the kernel has it),
from which one entry or one empty directory is removed
(protocol: recovery#own-names-outside-worktrees). Anything else is refused with
``PathUnsafe`` and left in place.

Not here: whole trees (``own_tree.py``), promoter's temp files (``own_temp.py``), a
person's worktree (``delete.py``, ``aside.py``), and deciding that a tree is promoter's
(``OwnTree.open``'s caller made it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Sequence

from promoter.domain.record_type import record
from promoter.errors import PathUnsafe
from promoter.fs.chain import HoldsFd
from promoter.fs.syscalls import lookup_refuses_mounts, mount_id, open_dir_component

__all__ = ["Made", "OwnDir", "OwnTree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_REMOVED = (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR)


@record(frozen=True)
class Made:
    """A file, socket or directory this process made: its path and (device, inode)."""

    path: str
    identity: tuple[int, int]

    @classmethod
    def record(cls, path: str | os.PathLike[str]) -> Made:
        """``path``, just made by this process (a socket it bound, say), as it is now."""
        info = os.lstat(path)
        return cls(os.fspath(path), (info.st_dev, info.st_ino))

    @classmethod
    def mkdir(cls, path: str | os.PathLike[str], mode: int = 0o777) -> Made:
        """Make directory ``path`` (``FileExistsError`` when the name is taken: not ours)."""
        os.mkdir(path, mode)
        return cls.record(path)

    @classmethod
    def mkdtemp(cls, prefix: str) -> Made:
        """A fresh private directory (``tempfile.mkdtemp``: mode 0700, a new name)."""
        return cls.record(tempfile.mkdtemp(prefix=prefix))

    def remove(self) -> bool:
        """Remove the path while it still names what was made; False when already gone.

        Raises ``PathUnsafe`` when something else has the name now (it is left in place);
        an ``OSError`` of the removal itself (a directory not empty yet, a busy cgroup)
        propagates and nothing was removed.
        """
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return False
        if (info.st_dev, info.st_ino) != self.identity:
            raise PathUnsafe(
                f"{self.path} is no longer what promoter made there; it was left in place",
                path=self.path,
            )
        try:
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(self.path)
            else:
                os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True


class OwnTree(HoldsFd):
    """A directory tree promoter made, held open by descriptor; hands out its directories."""

    def __init__(self, path: str, fd: int, device: int, mount: int | None) -> None:
        self.path = path
        self.fd = fd
        self.device = device
        self.mount = mount

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> OwnTree:
        """Hold the top of the tree (never through a symlink at ``path`` itself)."""
        spath = os.fspath(path)
        fd = os.open(spath, _DIR_FLAGS)
        try:
            return cls(spath, fd, os.fstat(fd).st_dev, mount_id(fd))
        except BaseException:
            os.close(fd)
            raise

    def directory(self, parts: Sequence[str | bytes], *, create: bool = False) -> OwnDir:
        """The directory ``parts`` below the top (``[]``: the top itself), as an ``OwnDir``.

        Each component is opened below the previous one without following a link and
        must be on the tree's device and mount (else ``PathUnsafe``); with ``create`` a
        missing one is made (mode 0777, the umask applies). The kernel's refusals
        propagate as ``OSError`` (``ENOENT`` missing, ``ELOOP``/``ENOTDIR`` a link or a
        file, ``EXDEV`` a mount crossed). Where the lookup itself refuses every mount
        crossing (``openat2``), nothing more is read per component.
        """
        check = not lookup_refuses_mounts()
        fd = os.dup(self.fd)
        try:
            for depth, part in enumerate(parts):
                try:
                    child = open_dir_component(fd, part, _DIR_FLAGS)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = open_dir_component(fd, part, _DIR_FLAGS)
                os.close(fd)
                fd = child
                if check:
                    self._check_mount(fd, parts[: depth + 1])
        except BaseException:
            os.close(fd)
            raise
        return OwnDir(self, fd, tuple(parts))

    def below(self, parts: Sequence[str | bytes]) -> str:
        """The path of ``parts`` below the top (for messages)."""
        return os.path.join(self.path, *(os.fsdecode(part) for part in parts))

    def _check_mount(self, fd: int, parts: Sequence[str | bytes]) -> None:
        """Refuse a directory on another device or mount than the top's."""
        other = os.fstat(fd).st_dev != self.device
        if not other and self.mount is not None:
            other = mount_id(fd) != self.mount
        if other:
            where = self.below(parts)
            raise PathUnsafe(f"{where} is on another mount than {self.path}", path=where)


class OwnDir(HoldsFd):
    """One directory of an ``OwnTree``, opened by it; entries are removed by name in it."""

    def __init__(self, tree: OwnTree, fd: int, parts: tuple[str | bytes, ...]) -> None:
        self.tree = tree
        self.fd = fd
        self.parts = parts

    @property
    def path(self) -> str:
        return self.tree.below(self.parts)

    def mode(self, name: str | bytes) -> int | None:
        """The ``st_mode`` of entry ``name`` (never followed), or None when it is missing."""
        try:
            return os.lstat(name, dir_fd=self.fd).st_mode
        except FileNotFoundError:
            return None

    def remove_entry(self, name: str | bytes) -> bool:
        """Unlink the non-directory entry ``name`` (a file, link, socket or fifo itself);
        False when it is missing.

        A directory, or an entry on another device than the tree (a file mounted there),
        is left in place and refused with ``PathUnsafe``.
        """
        where = os.path.join(self.path, os.fsdecode(name))
        try:
            info = os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(info.st_mode):
            raise PathUnsafe(f"{where} is a directory; it was left in place", path=where)
        if info.st_dev != self.tree.device:
            raise PathUnsafe(f"{where} is on another device; it was left in place", path=where)
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def remove_empty_dir(self, name: str | bytes) -> bool:
        """``rmdir`` the entry ``name``; False when it is not an empty directory (or missing).

        ``rmdir`` removes nothing but an empty directory; a mount point answers ``EBUSY``,
        which is raised like any other error.
        """
        try:
            os.rmdir(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in _NOT_REMOVED:
                return False
            raise
        return True
