"""Durable writes into a worktree with compare-and-swap on the target.

This module owns every change promoter makes to a file in a worktree: writing a temp
file next to the target (``.promoter-tmp-<hex>``, ``O_CREAT|O_EXCL|O_NOFOLLOW``, all
bytes, mode, ``fsync``), putting it in place only while the target is still the
expected old state, checked deletes, removal of its own temp files, and the mode rule
of SPEC §3.1 (keep the replaced file's permission bits, set or clear the execute bits
where read is set; new files get ``0666 & ~umask``).

Replacing: a create uses ``renameat2(RENAME_NOREPLACE)``; a modify uses
``renameat2(RENAME_EXCHANGE)`` and then reads the displaced file, which must be the
expected old state and the very inode checked before; if not, the two are exchanged
back (the user's version returns to the target name), the temp is removed and the
step refuses. Where the kernel or filesystem answers ``EINVAL``/``ENOSYS`` to
``renameat2``, a create falls back to ``link`` + ``unlink`` (still never replaces) and
a modify to a plain ``rename`` right after a re-check: that fallback cannot verify or
restore the displaced file, so an edit landing between the re-check and the rename is
lost. ``replace`` does not fsync the parent directory: callers batch and call
``Parent.fsync`` once.

Fault points called here: ``after_temp_write`` (temp written, chmod'ed, fsynced and
closed), ``before_replace`` (old state checked, nothing renamed yet),
``after_replace`` (the new file is at the target name; a displaced old file may still
be at the temp name), ``after_unlink`` (a checked delete is done) and
``after_parent_fsync``. An ``OSError`` anywhere, injected or real, surfaces as
``WriteFailed`` with its errno and is never retried; in particular a failed fsync is
reported, not repeated.

Deliberately not here: finding paths (``chain.py``), deciding what to write, journaling,
and directory removal (``Root.remove_dir_if_empty``). Residual risk, documented: Linux
has no unlink-by-descriptor, so a delete re-checks the name's inode right before
``unlinkat`` and an exchange happening in that window is not detected; an in-place
edit of the displaced file after it was verified is lost with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable

from promoter import faults
from promoter.errors import PathUnsafe, PromoterError, TargetDrift, WriteFailed
from promoter.fs.chain import ParentChain, Root
from promoter.fs.leaf import (
    LEAF_FLAGS,
    TEMP_PREFIX,
    ExpectedState,
    LeafState,
    git_mode_of,
    hash_fd,
    os_error,
    read_leaf,
)
from promoter.fs.syscalls import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    current_umask,
    file_mode,
    renameat2,
)

_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_ATTEMPTS = 4


def _check_temp_name(name: str) -> None:
    bad = "/" in name or "\x00" in name or len(name) == len(TEMP_PREFIX)
    if bad or not name.startswith(TEMP_PREFIX):
        raise PathUnsafe("not a promoter temp file name", name=name)


def _refusal(rel: str, expected: ExpectedState, found: LeafState) -> PromoterError:
    if found.kind in ("symlink", "special"):
        return PathUnsafe(f"target is a {found.kind}", path=rel, found=found.to_dict())
    return TargetDrift(
        "target is not in the expected state",
        path=rel,
        expected=expected.to_dict(),
        found=found.to_dict(),
    )


class Parent(ParentChain):
    """The held parent directory of one target, with the operations that change it."""

    def write_temp(self, data: bytes, git_mode: str) -> str:
        """Write ``data`` durably to a new temp file next to the target; return its name."""
        self.verify_chain()
        try:
            current = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
            replaced = current.st_mode if stat.S_ISREG(current.st_mode) else None
        except FileNotFoundError:
            replaced = None
        except OSError as exc:
            raise os_error("inspecting the target", self.rel, exc) from exc
        mode = file_mode(git_mode, replaced, current_umask())
        temp, fd = self._create_temp()
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            faults.point("after_temp_write")
            self.verify_chain()
        except BaseException as exc:
            self._discard(temp)
            if isinstance(exc, OSError):
                raise os_error("writing a temp file", self.rel, exc) from exc
            raise
        return temp

    def _create_temp(self) -> tuple[str, int]:
        last: OSError | None = None
        for _ in range(_TEMP_ATTEMPTS):
            temp = TEMP_PREFIX + secrets.token_hex(12)
            try:
                return temp, os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=self.fd)
            except FileExistsError as exc:
                last = exc
            except OSError as exc:
                raise os_error("creating a temp file", self.rel, exc) from exc
        assert last is not None
        raise os_error("creating a temp file", self.rel, last) from last

    def replace(self, temp: str, *, expected_old: ExpectedState, new: ExpectedState) -> None:
        """Put ``temp`` at the target only if the target is ``expected_old`` (or already ``new``).

        Refuses with ``TargetDrift`` (another state) or ``PathUnsafe`` (symlink, special
        file, swapped chain); on refusal the temp is removed and the target is left as
        found. Idempotent when the target already is ``new``.
        """
        _check_temp_name(temp)
        if not new.exists:
            raise ValueError("replace writes a file; deletes use unlink_checked")
        holds_user_file = False
        try:
            self.verify_chain()
            current = self.leaf_state()
            if current.matches(new):
                return
            if not current.matches(expected_old):
                raise _refusal(self.rel, expected_old, current)
            faults.point("before_replace")
            if not expected_old.exists:
                self._create_from(temp, new)
            else:
                holds_user_file = True
                self._exchange_in(temp, current, expected_old)
                holds_user_file = False
            faults.point("after_replace")
            self.remove_temp(temp)
            self.verify_chain()
        except OSError as exc:
            raise os_error("replacing the target", self.rel, exc) from exc
        finally:
            if not holds_user_file:
                self._discard(temp)

    def _create_from(self, temp: str, new: ExpectedState) -> None:
        try:
            renameat2(self.fd, temp, self.fd, self.name, RENAME_NOREPLACE)
            return
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                self._raise_unless_new(new, ExpectedState(False, None, None), exc)
                return
            if exc.errno not in _UNSUPPORTED:
                raise
        try:
            os.link(temp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
            return
        except FileExistsError as exc:
            self._raise_unless_new(new, ExpectedState(False, None, None), exc)
            return
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                raise
        found = self.leaf_state()
        if not found.matches(False):
            raise _refusal(self.rel, ExpectedState(False, None, None), found)
        os.rename(temp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def _raise_unless_new(self, new: ExpectedState, old: ExpectedState, exc: OSError) -> None:
        found = self.leaf_state()
        if not found.matches(new):
            raise _refusal(self.rel, old, found) from exc

    def _exchange_in(self, temp: str, current: LeafState, expected_old: ExpectedState) -> None:
        """Exchange temp and target and verify the displaced file (plain rename if unsupported)."""
        try:
            renameat2(self.fd, temp, self.fd, self.name, RENAME_EXCHANGE)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise _refusal(self.rel, expected_old, self.leaf_state()) from exc
            if exc.errno not in _UNSUPPORTED:
                raise
            again = self.leaf_state()
            if not again.matches(expected_old) or (again.dev, again.ino) != (
                current.dev,
                current.ino,
            ):
                raise _refusal(self.rel, expected_old, again) from exc
            os.rename(temp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            return
        try:
            displaced: LeafState | None = read_leaf(self.fd, temp, self.rel, self.root.dev)
        except PromoterError:
            displaced = None
        same_inode = displaced is not None and (displaced.dev, displaced.ino) == (
            current.dev,
            current.ino,
        )
        if displaced is not None and displaced.matches(expected_old) and same_inode:
            return
        try:
            renameat2(self.fd, temp, self.fd, self.name, RENAME_EXCHANGE)
        except OSError as exc:
            raise WriteFailed(
                "could not put the displaced file back",
                path=self.rel,
                displaced_to=temp,
                errno=exc.errno,
            ) from exc
        self._discard(temp)
        if displaced is None:
            raise PathUnsafe("the displaced file could not be verified", path=self.rel)
        if displaced.matches(expected_old):
            raise TargetDrift(
                "target was replaced between the check and the exchange",
                path=self.rel,
                expected=expected_old.to_dict(),
                found=displaced.to_dict(),
                reason="swapped",
            )
        raise _refusal(self.rel, expected_old, displaced)

    def unlink_checked(self, expected_old: ExpectedState) -> None:
        """Delete the target only if it is our singly linked regular file equal to ``expected_old``.

        Already missing is success. A hard-linked, foreign-owned, symlinked, special or
        swapped target raises ``PathUnsafe``; other content or mode raises ``TargetDrift``.
        """
        if not expected_old.exists:
            raise ValueError("unlink_checked needs the existing state to remove")
        try:
            self.verify_chain()
            try:
                fd = os.open(self.name, LEAF_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EWOULDBLOCK):
                    raise _refusal(self.rel, expected_old, self.leaf_state()) from exc
                raise
            try:
                found = self._checked_leaf(fd, expected_old)
            finally:
                os.close(fd)
            if not found.matches(expected_old):
                raise _refusal(self.rel, expected_old, found)
            try:
                again = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if (again.st_dev, again.st_ino) != (found.dev, found.ino):
                raise PathUnsafe("target was swapped while it was checked", path=self.rel)
            self.verify_chain()
            os.unlink(self.name, dir_fd=self.fd)
            faults.point("after_unlink")
        except OSError as exc:
            raise os_error("deleting the target", self.rel, exc) from exc

    def _checked_leaf(self, fd: int, expected_old: ExpectedState) -> LeafState:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _refusal(self.rel, expected_old, LeafState(kind="directory"))
        if not stat.S_ISREG(st.st_mode):
            raise PathUnsafe("target is a special file", path=self.rel)
        if st.st_dev != self.root.dev:
            raise PathUnsafe("target is on another device", path=self.rel)
        if st.st_nlink != 1:
            raise PathUnsafe("target has other hard links", path=self.rel, nlink=st.st_nlink)
        if st.st_uid != os.geteuid():
            raise PathUnsafe("target is owned by another user", path=self.rel, uid=st.st_uid)
        sha256, size = hash_fd(fd)
        after = os.fstat(fd)
        if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (
            after.st_size,
            after.st_mtime_ns,
            after.st_ctime_ns,
        ) or size != after.st_size:
            raise PathUnsafe("target changed while it was checked", path=self.rel)
        return LeafState(
            kind="file",
            sha256=sha256,
            mode=git_mode_of(after.st_mode),
            size=size,
            dev=after.st_dev,
            ino=after.st_ino,
            nlink=after.st_nlink,
        )

    def remove_temp(self, name: str) -> None:
        """Remove promoter's temp file ``name`` in this directory; missing is fine."""
        _check_temp_name(name)
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise PathUnsafe("temp name is not a regular file", path=self.rel, name=name)
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise os_error("removing a temp file", self.rel, exc) from exc

    def _discard(self, name: str) -> None:
        """Best-effort ``remove_temp`` on a failure path (recovery removes what remains)."""
        with contextlib.suppress(PromoterError):
            self.remove_temp(name)

    def fsync(self) -> None:
        """fsync the held parent directory (once per batch); a failure is raised, never retried."""
        try:
            os.fsync(self.fd)
            faults.point("after_parent_fsync")
        except OSError as exc:
            raise os_error("syncing the parent directory", self.rel, exc) from exc


def read_back(root: Root, rel: str) -> LeafState:
    """The state at ``rel`` now, through a fresh descriptor chain (``Root.read_state``)."""
    return root.read_state(rel)


def remove_orphan_temps(root: Root, paths: Iterable[str]) -> list[str]:
    """Remove promoter's own ``.promoter-tmp-*`` files beside the given target paths.

    Only the directories holding those targets are looked at; an unreachable directory
    (missing, unsafe) is skipped. Returns the removed temp files' relative paths.
    """
    removed: list[str] = []
    for directory in sorted({path.rpartition("/")[0] for path in paths}):
        try:
            names = root.list_temp_files(directory)
        except PromoterError:
            continue
        for name in names:
            rel = f"{directory}/{name}" if directory else name
            with root.open_parent(rel, create=False) as parent:
                parent.remove_temp(name)
            removed.append(rel)
    return removed
