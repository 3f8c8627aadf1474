"""Deletes by move-aside-then-verify (protocol: recovery#removal-provably-ours): the ``Deletion`` a
``Parent`` delegates to.

``Deletion`` holds the ``ParentChain`` of one target (the same one its ``atomic.Parent``
holds) and changes nothing else.

The target is checked (a singly linked regular file, or a symlink read with
``readlinkat`` and never followed, of this user, on the root's mount, equal to the
expected old state), renamed to the step's journaled temp name with
``RENAME_NOREPLACE``, read there through a descriptor and unlinked only if it is still
exactly that state with one link. Anything else goes back under its name, or, if the
name was taken meanwhile, is kept beside it (``aside.keep``) and named in the refusal.

Fault points: ``before_unlink`` (old state checked, nothing renamed), ``after_move_aside``
(the target is at its temp name) and ``after_unlink``.

Deliberately not here: writes and exchanges (``atomic.py``) and directory removal
(``Root.remove_dir_if_empty``). Residual risk: without ``renameat2`` the delete falls
back to re-checking the inode and ``unlinkat`` by name, and a save in that instant is
lost.
"""

from __future__ import annotations

import errno
import os
import stat

from promoter import faults
from promoter.domain.path_state import leaf_kind
from promoter.errors import PathUnsafe, PromoterError
from promoter.fs.aside import Kept, check_temp_name, keep, refusal, remove_if, with_kept
from promoter.fs.chain import ParentChain
from promoter.fs.leaf import LEAF_FLAGS, ExpectedState, LeafState, hash_steady, os_error
from promoter.fs.syscalls import RENAME_NOREPLACE, renameat2

_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


class Deletion:
    """The delete of the target of one held parent directory (its ``ParentChain``)."""

    def __init__(self, chain: ParentChain) -> None:
        self.chain = chain

    def unlink_checked(
        self, expected_old: ExpectedState, *, aside: str, chain_checked: bool = False
    ) -> None:
        """Delete the target only if it is our singly linked regular file equal to ``expected_old``.

        Move-aside-then-verify: the target is renamed to the journaled temp name
        ``aside`` and read there; only the exact old state is unlinked, anything else
        goes back (or is kept, with ``kept`` in the refusal). Already missing is success.
        A hard-linked, foreign-owned, symlinked, special or swapped target raises
        ``PathUnsafe``; other content or mode raises ``TargetDrift``.

        ``chain_checked``: as for ``Parent.write_temp``, the caller checked the chain
        immediately before the call, so the check before reading the target is that
        one; the check after reading (before the rename) always runs.
        """
        if not expected_old.exists:
            raise ValueError("unlink_checked needs the existing state to remove")
        check_temp_name(aside)
        try:
            if not chain_checked:
                self.chain.verify_chain()
            if leaf_kind(expected_old.mode) == "symlink":
                found = self._checked_link(expected_old)
                if found.kind == "missing":
                    return
            else:
                try:
                    fd = os.open(self.chain.name, LEAF_FLAGS, dir_fd=self.chain.fd)
                except FileNotFoundError:
                    return
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EWOULDBLOCK):
                        raise refusal(
                            self.chain.rel, expected_old, self.chain.leaf_state()
                        ) from exc
                    raise
                try:
                    found = self._checked_leaf(fd, expected_old)
                finally:
                    os.close(fd)
            if not found.matches(expected_old):
                raise refusal(self.chain.rel, expected_old, found)
            self.chain.root.check_mount(self.chain.fd, self.chain.name, self.chain.rel)
            faults.point("before_unlink")
            self.chain.verify_chain()
            try:
                renameat2(self.chain.fd, self.chain.name, self.chain.fd, aside, RENAME_NOREPLACE)
            except FileNotFoundError:
                return
            except FileExistsError as exc:
                raise PathUnsafe(
                    "something already has promoter's journaled temp name; it was left alone",
                    path=self.chain.rel,
                    name=aside,
                ) from exc
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise
                self._unlink_after_recheck(found)
                return
            faults.point("after_move_aside")
            self._settle_aside(aside, expected_old)
            faults.point("after_unlink")
        except OSError as exc:
            raise os_error("deleting the target", self.chain.rel, exc) from exc

    def _settle_aside(self, aside: str, expected_old: ExpectedState) -> None:
        """Unlink the moved-aside target if it is exactly ``expected_old``; else put it back."""

        def is_old(leaf: LeafState) -> bool:
            return leaf.nlink == 1 and leaf.matches(expected_old)

        try:
            done, moved = remove_if(self.chain, aside, is_old)
        except PromoterError:
            done, moved = "left", LeafState(kind="special")
        if done != "left":
            return
        kept: list[Kept] = []
        try:
            renameat2(self.chain.fd, aside, self.chain.fd, self.chain.name, RENAME_NOREPLACE)
        except OSError:
            kept = [keep(self.chain, aside, moved)]
        error = refusal(self.chain.rel, expected_old, moved)
        error.context["reason"] = "changed while it was being deleted"
        raise with_kept(error, kept)

    def _unlink_after_recheck(self, found: LeafState) -> None:
        """Fallback without ``renameat2``: re-check the inode, then unlink (residual risk)."""
        try:
            again = os.stat(self.chain.name, dir_fd=self.chain.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if (again.st_dev, again.st_ino) != (found.dev, found.ino):
            raise PathUnsafe("target was swapped while it was checked", path=self.chain.rel)
        self.chain.verify_chain()
        os.unlink(self.chain.name, dir_fd=self.chain.fd)

    def _checked_link(self, expected_old: ExpectedState) -> LeafState:
        """The symlink at the target, read with ``readlinkat`` (never followed) and checked."""
        found = self.chain.leaf_state()
        if found.kind == "missing":
            return found
        if found.kind != "symlink":
            raise refusal(self.chain.rel, expected_old, found)
        st = os.stat(self.chain.name, dir_fd=self.chain.fd, follow_symlinks=False)
        if st.st_nlink != 1:
            raise PathUnsafe("target has other hard links", path=self.chain.rel, nlink=st.st_nlink)
        if st.st_uid != os.geteuid():
            raise PathUnsafe("target is owned by another user", path=self.chain.rel, uid=st.st_uid)
        return found

    def _checked_leaf(self, fd: int, expected_old: ExpectedState) -> LeafState:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise refusal(self.chain.rel, expected_old, LeafState(kind="directory"))
        if not stat.S_ISREG(st.st_mode):
            raise PathUnsafe("target is a special file", path=self.chain.rel)
        if st.st_dev != self.chain.root.dev:
            raise PathUnsafe("target is on another device", path=self.chain.rel)
        if st.st_nlink != 1:
            raise PathUnsafe("target has other hard links", path=self.chain.rel, nlink=st.st_nlink)
        if st.st_uid != os.geteuid():
            raise PathUnsafe("target is owned by another user", path=self.chain.rel, uid=st.st_uid)
        found = hash_steady(fd, st)
        if found is None:
            raise PathUnsafe("target changed while it was checked", path=self.chain.rel)
        return found
