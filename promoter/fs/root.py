"""The held worktree root and the walks below it (see ``chain.py`` for the rules).

``Root.open(path)`` holds the worktree root; ``open_parent`` reaches the directory of a
target through a descriptor chain (creating missing directories when asked) and returns
the ``Parent`` that changes it (``atomic.py``: a handle holding that chain);
``read_state`` reads what is at a path without following anything (``read_content`` its
bytes too, bounded);
``remove_dir_if_empty`` removes an empty directory. This module imports ``atomic.py`` and
``chain.py``, never the other way round (a chain knows its root as ``chain.ChainRoot``).
``Root.walks`` and ``Root.rewalks`` count the chains walked from the root and the full
re-checks of ``verify_chain`` (``Root.one_call_rechecks``: those one ``openat2`` answered
without a walk; read by tests and benchmarks; nothing decides on them).

Deliberately not here: the per-component rules and ``ParentChain`` (``chain.py``), the
directories a pass holds (``held.py``), and any change to a file (``atomic.py``,
``delete.py``).
"""

from __future__ import annotations

import errno
import os
import stat

from promoter import faults
from promoter.errors import PathUnsafe, PromoterError, TargetDrift
from promoter.fs import flush
from promoter.fs.atomic import Parent
from promoter.fs.chain import DIR_FLAGS, ON_ANOTHER_MOUNT, HoldsFd, ParentChain, Walked, open_dir
from promoter.fs.leaf import MISSING, LeafState, os_error, read_leaf_bytes, split_rel
from promoter.fs.syscalls import mount_id

__all__ = ["Root"]


class Root(HoldsFd):
    """The worktree root, held open by descriptor; every lookup starts here."""

    def __init__(self, path: str, fd: int, dev: int, ino: int, mnt_id: int | None = None) -> None:
        self.path = path
        self.fd = fd
        self.dev = dev
        self.ino = ino
        self.mnt_id = mnt_id
        self.walks = 0  # chains walked from the root: counters tests and benchmarks read
        self.rewalks = 0  # re-checks of ``ParentChain.verify_chain`` past a held check
        self.one_call_rechecks = 0  # of those, the ones one ``openat2`` answered (no walk)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Root:
        """Open ``path`` (the caller resolves it, e.g. with realpath) as the root.

        A relative path is made absolute first, so ``recheck`` does not depend on the
        working directory. The root's mount id is read once here (None: this process
        cannot read mount ids, and only device ids are compared).
        """
        spath = os.path.abspath(os.fspath(path))
        try:
            fd = os.open(spath, DIR_FLAGS)
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
            raise PathUnsafe(ON_ANOTHER_MOUNT, path=rel, at=at or rel, mount_id=found)

    def recheck(self) -> None:
        """Raise ``PathUnsafe`` if the root's path no longer names the held directory."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError as exc:
            raise PathUnsafe("worktree root is gone", path=self.path) from exc
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            raise PathUnsafe("worktree root was renamed or replaced", path=self.path)

    def _walk(self, rel: str, dir_parts: list[str], *, create: bool) -> Walked | None:
        """Open the chain to ``dir_parts``; None if a directory is missing and not created."""
        self.walks += 1
        current = os.dup(self.fd)
        walked = Walked(fd=-1, ids=[], created=[])
        try:
            for depth in range(len(dir_parts)):
                at = "/".join(dir_parts[: depth + 1])
                nxt = self.open_component(current, dir_parts[depth], rel, at, create, walked)
                os.close(current)
                current = -1
                if nxt is None:
                    return None
                current = nxt
        except BaseException as exc:
            if current >= 0:
                os.close(current)
            error = self.walk_error(exc, rel, walked.created)
            if error is exc:
                raise
            raise error from exc
        walked.fd = current
        return walked

    def open_component(
        self, current: int, name: str, rel: str, at: str, create: bool, walked: Walked
    ) -> int | None:
        """Open directory ``name`` below the held ``current`` (``at`` is its path), as a walk does.

        Made first when missing and ``create`` (recorded in ``walked.created`` before its
        sync can fail); then checked to be on the root's mount and, unless just made, not
        a nested repository; its (device, inode) is appended to ``walked.ids``. None when
        it is missing and not created. The returned descriptor is the caller's to close.
        """
        nxt = open_dir(current, name, rel, at, self)
        if nxt is None and create:
            if self._mkdir(current, name, at):
                walked.created.append(at)  # recorded before the sync can fail
                self._sync_new_dir(current, rel)
            nxt = open_dir(current, name, rel, at, self)
        if nxt is None:
            return None
        try:
            self.check_mount(nxt, "", rel, at)
            st = os.fstat(nxt)
            walked.ids.append((st.st_dev, st.st_ino))
            if not (walked.created and walked.created[-1] == at):
                self._refuse_nested_repository(nxt, rel, at)
        except BaseException:
            os.close(nxt)
            raise
        return nxt

    @staticmethod
    def walk_error(exc: BaseException, rel: str, created: list[str]) -> BaseException:
        """``exc`` as a walk raises it: an ``OSError`` translated, ``created_dirs`` attached."""
        error = os_error("opening a directory", rel, exc) if isinstance(exc, OSError) else exc
        if isinstance(error, PromoterError) and created:
            error.context["created_dirs"] = list(created)
        return error

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
            flush.fsync(dir_fd)
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
        parts = split_rel(rel)
        walked = self._walk(rel, parts[:-1], create=create)
        if walked is None:
            raise TargetDrift("a parent directory is missing", path=rel, found="missing_parent")
        return Parent(ParentChain(self, rel, walked.fd, walked.ids, walked.created))

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

    def read_content(self, rel: str, limit: int) -> tuple[LeafState, bytes | None]:
        """What is at ``rel`` and, for a regular file of at most ``limit`` bytes, its bytes.

        Read through a fresh chain as ``read_state`` reads (no symlink followed anywhere,
        mounts refused); the bytes come from the same inode and must hash to the state
        read (``leaf.read_leaf_bytes``). A symlink, directory, special file or larger file
        comes back without bytes, and nothing of a larger file is held in memory.
        """
        chain = self._open_chain(rel)
        if chain is None:
            return MISSING, None
        with chain:
            state = chain.leaf_state()
            data: bytes | None = None
            if state.kind == "file" and state.size is not None and state.size <= limit:
                data = read_leaf_bytes(chain.fd, chain.name, rel, state, limit)
            chain.verify_chain()
        return state, data

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
                    raise PathUnsafe(ON_ANOTHER_MOUNT, path=rel, at=rel) from exc
                raise os_error("removing a directory", rel, exc) from exc
            try:
                flush.fsync(chain.fd)
            except OSError as exc:
                raise os_error("syncing a directory", rel, exc) from exc
        return True
