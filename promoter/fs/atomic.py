"""Durable writes into a worktree with compare-and-swap on the target.

This module owns every change promoter makes to a file in a worktree: writing a temp
file next to the target under the name the journal gave it (``temp_name`` in
``promoter.domain.paths``; an anonymous ``O_TMPFILE`` that gets the name only after all
bytes, the mode and ``fsync``, or ``O_CREAT|O_EXCL|O_NOFOLLOW`` where the filesystem has
no ``O_TMPFILE``),
putting it in place only while the target is still the expected old state, deletes by
move-aside-then-verify, and the mode rule of SPEC §3.1 (keep the replaced file's
permission bits, set or clear the execute bits where read is set; new files get
``0666 & ~umask``).

A temp's bytes come whole (``bytes``) or from a ``Source`` (a stored blob,
``BlobStore.stream``) written in chunks and hashed in the same pass: bytes that do not
hash to the source's sha256 raise (``BlobHashMismatch``) before the temp gets its name,
so no whole blob is held in memory and no unchecked byte is ever named. Where there is no
``O_TMPFILE`` the named temp is removed instead (it is promoter's own inode).
``write_temp`` is ``begin_temp`` (bytes, mode, writeback started) then ``end_temp``
(fsync, name, chain re-check): a caller writing many temps begins several before it
ends the first, so their fsyncs wait for the disk together, each temp still fsynced
before it is named.

Nothing is unlinked unless it is provably promoter's own (SPEC §10.1, ``aside.py``):
- A create uses ``renameat2(RENAME_NOREPLACE)``.
- A modify uses ``renameat2(RENAME_EXCHANGE)`` and then reads the displaced file through
  a descriptor. The exact expected old state, and the very inode checked before, is
  removed. Anything else is exchanged back (the user's version returns to the target
  name) and what then comes back under the temp name is removed only if it is still the
  inode promoter wrote with promoter's bytes; otherwise it is kept under a
  ``.promoter-kept-*`` name and the step refuses with the kept file in its report.
- A delete (``delete.py``) renames the target to its journaled temp name
  (``RENAME_NOREPLACE``), reads it there, and unlinks it only if it is the exact old
  state with one link; otherwise it goes back to its name (or, if that name was taken
  meanwhile, it is kept).
Every refusal after a rename carries ``kept`` (a list of ``Kept.to_dict()``) naming
where any bytes that were not promoter's are now.

Where the kernel or filesystem answers ``EINVAL``/``ENOSYS`` to ``renameat2``, a create
falls back to ``link`` + ``unlink`` (still never replaces), a modify to a plain
``rename`` right after a re-check and a delete to a re-check and ``unlinkat``: those
fallbacks cannot verify or restore the displaced file, so an edit landing in that window
is lost (the README's residual risks). ``replace`` does not fsync the parent directory:
callers batch and call ``Parent.fsync`` once.

Fault points called here: ``before_temp_named`` (an anonymous temp holds every byte,
no name yet), ``after_temp_write`` (temp written, chmod'ed, fsynced, named and
closed), ``before_replace`` (old state checked, nothing renamed yet),
``after_exchange`` (new file at the target, displaced file at the temp name, not yet
read), ``before_swap_back`` (displaced file found not to be the old state),
``after_replace`` (the step's rename is done) and ``after_parent_fsync`` (the delete's
points are ``delete.py``'s). An ``OSError`` anywhere, injected
or real, surfaces as ``WriteFailed`` with its errno and is never retried; in particular
a failed fsync is reported, not repeated.

Deliberately not here: finding paths (``chain.py``), deciding what to write, journaling,
and directory removal (``Root.remove_dir_if_empty``). Residual risk, documented: an
in-place write through a descriptor opened on the old file before the exchange, landing
after the displaced file was verified, is lost with it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from promoter import faults
from promoter.domain.state import SYMLINK_MODE
from promoter.errors import PathUnsafe, PromoterError, TargetDrift, WriteFailed
from promoter.fs.aside import Kept, beside, check_temp_name, keep, refusal, remove_if, with_kept
from promoter.fs.delete import Deleting
from promoter.fs.leaf import (
    ExpectedState,
    LeafState,
    os_error,
)
from promoter.fs.syscalls import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    current_umask,
    file_mode,
    renameat2,
    start_writeback,
)

log = logging.getLogger("promoter.fs")

_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ANON_FLAGS = os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC


class Source(Protocol):
    """Bytes to write, read in chunks, and the sha256 they must have (a stored blob)."""

    sha256: str

    def chunks(self) -> Generator[bytes, None, None]: ...

    def mismatch(self, actual: str) -> PromoterError:
        """The error to raise when the bytes hash to ``actual`` instead."""
        ...


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_checked(fd: int, source: Source) -> None:
    """Write ``source`` chunk by chunk to ``fd``, hashing as it goes; raise on a mismatch."""
    digest = hashlib.sha256()
    with contextlib.closing(source.chunks()) as chunks:
        for chunk in chunks:
            digest.update(chunk)
            _write_all(fd, chunk)
    actual = digest.hexdigest()
    if actual != source.sha256:
        raise source.mismatch(actual)


def _whole(data: bytes | Source) -> bytes:
    """A link target's text: ``data`` itself, or the source's bytes checked against its sha256."""
    if isinstance(data, bytes):
        return data
    with contextlib.closing(data.chunks()) as chunks:
        whole = b"".join(chunks)
    actual = hashlib.sha256(whole).hexdigest()
    if actual != data.sha256:
        raise data.mismatch(actual)
    return whole


@functools.cache
def _proc_fd_links() -> bool:
    """Whether ``/proc/self/fd`` exists, through which an ``O_TMPFILE`` gets a name."""
    return os.path.isdir("/proc/self/fd")


@dataclass(frozen=True)
class PendingTemp:
    """A temp file written but not yet fsynced (``Parent.begin_temp``): its journaled name,
    its open descriptor and whether it is still anonymous (``O_TMPFILE``)."""

    temp: str
    fd: int
    anonymous: bool


class Parent(Deleting):
    """The held parent directory of one target, with the operations that change it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: dict[str, tuple[int, int]] = {}
        # set by ``Directories.open_parent`` when it re-checked the held chain just now
        # (``HeldDir.still_in_place`` and the nested-repository check); the caller that
        # changes nothing before its first write passes it on as ``chain_checked`` once
        self.checked_at_open = False

    def write_temp(
        self,
        data: bytes | Source,
        git_mode: str,
        *,
        temp: str,
        umask: int | None = None,
        chain_checked: bool = False,
    ) -> str:
        """Write ``data`` durably to the journaled temp name ``temp``; return it.

        ``data`` is the bytes themselves, or a ``Source`` streamed in chunks and hashed in
        the same pass: bytes that do not hash to ``source.sha256`` raise
        ``source.mismatch(actual)`` before the temp gets its name (an anonymous temp is
        simply closed; a named fallback temp is removed as promoter's own).
        A name that is already taken is refused (``PathUnsafe``) and left untouched. With
        ``git_mode`` 120000, ``data`` is a link's target text and the temp is a symlink.

        ``umask``: the process umask as the caller read it for its pass (read here when
        None). ``chain_checked``: the caller opened or re-checked this parent's chain
        immediately before the call, with nothing done in the worktree in between
        (``promoter.engine.apply``), so the check before the write is that one; the
        check after the write always runs.
        """
        begun = self.begin_temp(data, git_mode, temp=temp, umask=umask, chain_checked=chain_checked)
        return begun if isinstance(begun, str) else self.end_temp(begun)

    def begin_temp(
        self,
        data: bytes | Source,
        git_mode: str,
        *,
        temp: str,
        umask: int | None = None,
        chain_checked: bool = False,
    ) -> str | PendingTemp:
        """The first half of ``write_temp``: every byte written and its mode set, the
        writeback started, but not yet fsynced nor (an anonymous temp) named.

        ``end_temp`` finishes it (fsync, name, the chain re-check), ``abort_temp`` drops it.
        Many temps begun before the first is ended wait for the disk together. A link temp
        is written whole here (its name is its only content): its name is returned.
        """
        check_temp_name(temp)
        if not chain_checked:
            self.verify_chain()
        if git_mode == SYMLINK_MODE:
            return self._write_link_temp(_whole(data), temp)
        try:
            current = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
            replaced = current.st_mode if stat.S_ISREG(current.st_mode) else None
        except FileNotFoundError:
            replaced = None
        except OSError as exc:
            raise os_error("inspecting the target", self.rel, exc) from exc
        mode = file_mode(git_mode, replaced, current_umask() if umask is None else umask)
        fd, anonymous = self._open_temp(temp)
        try:
            try:
                if not anonymous:  # the name is ours from here, even half written
                    st = os.fstat(fd)
                    self.written[temp] = (st.st_dev, st.st_ino)
                if isinstance(data, bytes):
                    _write_all(fd, data)
                else:
                    _write_checked(fd, data)
                os.fchmod(fd, mode)
                start_writeback(fd)
            except BaseException:
                os.close(fd)
                raise
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp file")
        return PendingTemp(temp, fd, anonymous)

    def end_temp(self, pending: PendingTemp) -> str:
        """fsync a begun temp, give an anonymous one its journaled name, re-check the
        chain; return the name. On any failure the temp is dropped as in ``write_temp``."""
        temp, fd = pending.temp, pending.fd
        try:
            try:
                os.fsync(fd)
                if pending.anonymous:
                    faults.point("before_temp_named")
                    self._link_temp(fd, temp)
                    st = os.fstat(fd)
                    self.written[temp] = (st.st_dev, st.st_ino)
            finally:
                os.close(fd)
            faults.point("after_temp_write")
            self.verify_chain()
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp file")
        return temp

    def abort_temp(self, pending: PendingTemp) -> list[Kept]:
        """Drop a begun temp that will not be ended: an anonymous one vanishes with its
        descriptor, a named one is removed while it is still promoter's own. Returns what
        was kept (nothing, normally)."""
        os.close(pending.fd)
        if pending.temp not in self.written:
            return []
        return self.drop_temp(pending.temp, ExpectedState(True, None, None))

    def _write_link_temp(self, target: bytes, temp: str) -> str:
        """``symlinkat(target, parent, temp)``, the parent fsynced; the link is never followed."""
        if not target or b"\x00" in target:
            raise PathUnsafe("a link target must be non-empty text without NUL", path=self.rel)
        try:
            os.symlink(target, os.fsencode(temp), dir_fd=self.fd)
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc
        except OSError as exc:
            raise os_error("creating a temp link", self.rel, exc) from exc
        try:
            st = os.stat(temp, dir_fd=self.fd, follow_symlinks=False)
            self.written[temp] = (st.st_dev, st.st_ino)
            os.fsync(self.fd)
            faults.point("after_temp_write")
            self.verify_chain()
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp link")
        return temp

    def _fail_temp(self, temp: str, exc: BaseException, action: str) -> NoReturn:
        """Remove a temp that is still promoter's own and raise, naming anything kept."""
        kept = self.drop_temp(temp, ExpectedState(True, None, None)) if temp in self.written else []
        if isinstance(exc, OSError):
            raise with_kept(os_error(action, self.rel, exc), kept) from exc
        if isinstance(exc, PromoterError):
            with_kept(exc, kept)
        raise exc

    def _open_temp(self, temp: str) -> tuple[int, bool]:
        """An anonymous ``O_TMPFILE`` in the parent (True), or ``temp`` created ``O_EXCL``.

        The anonymous file gets its name only once it holds every byte, its mode and an
        fsync, so after a crash a journaled temp name never holds a partial write that
        could not be proven promoter's own.
        """
        if _proc_fd_links():
            try:
                return os.open(".", _ANON_FLAGS, 0o600, dir_fd=self.fd), True
            except OSError as exc:
                if exc.errno not in (*_UNSUPPORTED, errno.EISDIR):
                    raise os_error("creating a temp file", self.rel, exc) from exc
        try:
            return os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=self.fd), False
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc
        except OSError as exc:
            raise os_error("creating a temp file", self.rel, exc) from exc

    def _link_temp(self, fd: int, temp: str) -> None:
        """Give the anonymous temp ``fd`` its journaled name (never replacing anything)."""
        try:
            os.link(f"/proc/self/fd/{fd}", temp, dst_dir_fd=self.fd, follow_symlinks=True)
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc

    def _name_taken(self, temp: str) -> PathUnsafe:
        return PathUnsafe(
            "something already has promoter's journaled temp name; it was left alone",
            path=self.rel,
            name=temp,
        )

    def _is_own(self, temp: str, new: ExpectedState) -> Callable[[LeafState], bool]:
        """The test for "this is the file promoter wrote at ``temp``, unchanged"."""
        inode = self.written.get(temp)

        def own(leaf: LeafState) -> bool:
            if inode is None or (leaf.dev, leaf.ino) != inode:
                return False
            return new.sha256 is None or leaf.matches(new)

        return own

    def drop_temp(self, temp: str, new: ExpectedState) -> list[Kept]:
        """Remove the temp promoter wrote (still its inode and bytes); keep anything else.

        ``new`` with ``sha256=None`` accepts the written inode whatever it holds (a temp
        whose write failed part-way). Returns what was kept (nothing, normally).
        """
        try:
            done, found = remove_if(self, temp, self._is_own(temp, new))
        except PromoterError:
            log.warning("could not read temp file %s in %s; left in place", temp, self.rel)
            return []
        if done != "left":
            self.written.pop(temp, None)
            return []
        return [keep(self, temp, found)]

    def replace(self, temp: str, *, expected_old: ExpectedState, new: ExpectedState) -> None:
        """Put ``temp`` at the target only if the target is ``expected_old`` (or already ``new``).

        Refuses with ``TargetDrift`` (another state) or ``PathUnsafe`` (symlink, special
        file, swapped chain); on a refusal before any rename the temp is removed and the
        target is left as found. Idempotent when the target already is ``new``.
        """
        check_temp_name(temp)
        if not new.exists:
            raise ValueError("replace writes a file; deletes use unlink_checked")
        settled = False
        try:
            self.verify_chain()
            current = self.leaf_state()
            if current.matches(new):
                self.drop_temp(temp, new)
                return
            if not current.matches(expected_old):
                raise refusal(self.rel, expected_old, current)
            faults.point("before_replace")
            if not expected_old.exists:
                self._create_from(temp, new)
            else:
                settled = True  # from here the exchange settles the temp name itself
                self._exchange_in(temp, current, expected_old, new)
            faults.point("after_replace")
            self.verify_chain()
        except OSError as exc:
            error = os_error("replacing the target", self.rel, exc)
            if not settled:
                with_kept(error, self.drop_temp(temp, new))
            raise error from exc
        except PromoterError as exc:
            if not settled:
                with_kept(exc, self.drop_temp(temp, new))
            raise
        if not settled:
            self.drop_temp(temp, new)  # normally gone: the rename consumed it

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
            raise refusal(self.rel, ExpectedState(False, None, None), found)
        os.rename(temp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def _raise_unless_new(self, new: ExpectedState, old: ExpectedState, exc: OSError) -> None:
        found = self.leaf_state()
        if not found.matches(new):
            raise refusal(self.rel, old, found) from exc

    def _exchange_in(
        self, temp: str, current: LeafState, expected_old: ExpectedState, new: ExpectedState
    ) -> None:
        """Exchange temp and target, then settle what the exchange displaced (see the module)."""
        try:
            renameat2(self.fd, temp, self.fd, self.name, RENAME_EXCHANGE)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                found = self.leaf_state()
                raise with_kept(
                    refusal(self.rel, expected_old, found), self.drop_temp(temp, new)
                ) from exc
            if exc.errno not in _UNSUPPORTED:
                raise with_kept(
                    os_error("exchanging the target", self.rel, exc), self.drop_temp(temp, new)
                ) from exc
            self._rename_after_recheck(temp, current, expected_old, new, exc)
            return
        faults.point("after_exchange")

        def is_old(leaf: LeafState) -> bool:
            same_inode = (leaf.dev, leaf.ino) == (current.dev, current.ino)
            return same_inode and leaf.matches(expected_old)

        try:
            done, displaced = remove_if(self, temp, is_old)
        except PromoterError:
            done, displaced = "left", LeafState(kind="special")
        if done != "left":
            return
        faults.point("before_swap_back")
        try:
            renameat2(self.fd, temp, self.fd, self.name, RENAME_EXCHANGE)
        except OSError as exc:
            held = Kept(
                self.rel, beside(self, temp), displaced.kind, displaced.sha256, displaced.size
            )
            raise with_kept(
                WriteFailed(
                    "could not put the displaced file back; it is kept under the temp name",
                    path=self.rel,
                    errno=exc.errno,
                ),
                [held],
            ) from exc
        kept = self.drop_temp(temp, new)
        error: PromoterError
        if displaced.kind in ("file", "symlink") and displaced.matches(expected_old):
            error = TargetDrift(
                "target was replaced between the check and the exchange",
                path=self.rel,
                expected=expected_old.to_dict(),
                found=displaced.to_dict(),
                reason="swapped",
            )
        elif displaced.kind in ("file", "symlink", "missing"):
            error = refusal(self.rel, expected_old, displaced)
        else:
            error = PathUnsafe("the displaced file could not be verified", path=self.rel)
        raise with_kept(error, kept)

    def _rename_after_recheck(
        self,
        temp: str,
        current: LeafState,
        expected_old: ExpectedState,
        new: ExpectedState,
        cause: OSError,
    ) -> None:
        """Fallback without ``RENAME_EXCHANGE``: re-check, then a plain rename (residual risk)."""
        again = self.leaf_state()
        if not again.matches(expected_old) or (again.dev, again.ino) != (current.dev, current.ino):
            raise with_kept(
                refusal(self.rel, expected_old, again), self.drop_temp(temp, new)
            ) from cause
        os.rename(temp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def fsync(self) -> None:
        """fsync the held parent directory (once per batch); a failure is raised, never retried."""
        try:
            os.fsync(self.fd)
            faults.point("after_parent_fsync")
        except OSError as exc:
            raise os_error("syncing the parent directory", self.rel, exc) from exc
