"""Temp files next to a target, under the names the journal gave them.

``Temps`` (a collaborator of ``atomic.Parent``, sharing its ``ParentChain``) writes a temp
as an anonymous ``O_TMPFILE`` that gets its journaled name only after its bytes, mode and
flush (``O_CREAT|O_EXCL|O_NOFOLLOW`` where there is no ``O_TMPFILE``; a link temp by
``symlinkat``), refusing a name already taken. Bytes come whole or from a stored blob
hashed while written, refused before the temp is named if they do not match.
``begin_temp``/``end_temp`` split a write so a group's flushes wait together
(protocol: promotion#flush-order); ``drop_temp`` removes a temp only while it is still
promoter's (protocol: recovery#journaled-names-only). Fault points: ``after_temp_fsync``,
``before_temp_named``, ``after_temp_write``.

Not here: putting a temp in place (``atomic.py``), deletes (``delete.py``), finding
paths (``chain.py``), deciding what to write.
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
from typing import NoReturn, Protocol

from promoter import faults
from promoter.domain.path_state import SYMLINK_MODE
from promoter.errors import PathUnsafe, PromoterError
from promoter.fs import flush
from promoter.fs.aside import Kept, check_temp_name, keep, remove_if, with_kept
from promoter.fs.chain import ParentChain
from promoter.fs.leaf import ExpectedState, LeafState, os_error
from promoter.fs.syscalls import current_umask, file_mode, start_writeback

log = logging.getLogger("promoter.fs")

UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)  # no such call or flag here
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


class Temps:
    """A held parent directory's temp files: written, named, dropped."""

    def __init__(self, chain: ParentChain) -> None:
        self.chain = chain
        # journaled temp name -> (device, inode) promoter wrote there: what ``drop_temp``
        # may remove
        self.written: dict[str, tuple[int, int]] = {}

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
        (``promoter.engine.operation.apply``), so the check before the write is that one; the
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
        writeback: bool = True,
    ) -> str | PendingTemp:
        """The first half of ``write_temp``: every byte written and its mode set, the
        writeback started, but not yet fsynced nor (an anonymous temp) named.

        ``end_temp`` finishes it (fsync, name, the chain re-check), ``abort_temp`` drops it.
        Many temps begun before the first is ended wait for the disk together. A link temp
        is written whole here (its name is its only content): its name is returned.
        ``writeback=False``: no early writeback (a group synced at once writes it then).
        """
        check_temp_name(temp)
        if not chain_checked:
            self.chain.verify_chain()
        if git_mode == SYMLINK_MODE:
            return self._write_link_temp(_whole(data), temp)
        try:
            current = os.stat(self.chain.name, dir_fd=self.chain.fd, follow_symlinks=False)
            replaced = current.st_mode if stat.S_ISREG(current.st_mode) else None
        except FileNotFoundError:
            replaced = None
        except OSError as exc:
            raise os_error("inspecting the target", self.chain.rel, exc) from exc
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
                if writeback:
                    start_writeback(fd)
            except BaseException:
                os.close(fd)
                raise
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp file")
        return PendingTemp(temp, fd, anonymous)

    def end_temp(self, pending: PendingTemp, *, synced: bool = False) -> str:
        """fsync a begun temp, give an anonymous one its journaled name, re-check the
        chain; return the name. On any failure the temp is dropped as in ``write_temp``.

        ``synced``: the caller made the temp durable already, with the rest of its group
        (``promoter.fs.group_sync``), after it was begun: no fsync of its own.
        """
        temp, fd = pending.temp, pending.fd
        try:
            try:
                if not synced:
                    self.sync_begun(pending)
                if pending.anonymous:
                    faults.point("before_temp_named")
                    self._link_temp(fd, temp)
                    st = os.fstat(fd)
                    self.written[temp] = (st.st_dev, st.st_ino)
            finally:
                os.close(fd)
            faults.point("after_temp_write")
            self.chain.verify_chain()
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp file")
        return temp

    def sync_begun(self, pending: PendingTemp) -> None:
        """fsync a begun temp (fault point ``after_temp_fsync``); the ``OSError`` is raised
        as it is. ``end_temp`` calls it, or a caller that fsyncs a group of begun temps a
        few at once (``promoter.fs.shares``) before it ends each with ``synced``; it
        touches nothing but the temp's own descriptor, so any thread may call it."""
        flush.fsync(pending.fd)
        faults.point("after_temp_fsync")

    def fail_begun(self, pending: PendingTemp, exc: BaseException) -> NoReturn:
        """End a begun temp whose fsync (``sync_begun``) raised ``exc`` as ``end_temp``
        would have: the temp dropped (closed; a named one removed while promoter's own)
        and the error raised as a ``WriteFailed`` naming anything kept."""
        os.close(pending.fd)
        self._fail_temp(pending.temp, exc, "writing a temp file")

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
            raise PathUnsafe(
                "a link target must be non-empty text without NUL", path=self.chain.rel
            )
        try:
            os.symlink(target, os.fsencode(temp), dir_fd=self.chain.fd)
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc
        except OSError as exc:
            raise os_error("creating a temp link", self.chain.rel, exc) from exc
        try:
            st = os.stat(temp, dir_fd=self.chain.fd, follow_symlinks=False)
            self.written[temp] = (st.st_dev, st.st_ino)
            flush.fsync(self.chain.fd)
            faults.point("after_temp_write")
            self.chain.verify_chain()
        except BaseException as exc:
            self._fail_temp(temp, exc, "writing a temp link")
        return temp

    def _fail_temp(self, temp: str, exc: BaseException, action: str) -> NoReturn:
        """Remove a temp that is still promoter's own and raise, naming anything kept."""
        kept = self.drop_temp(temp, ExpectedState(True, None, None)) if temp in self.written else []
        if isinstance(exc, OSError):
            raise with_kept(os_error(action, self.chain.rel, exc), kept) from exc
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
                return os.open(".", _ANON_FLAGS, 0o600, dir_fd=self.chain.fd), True
            except OSError as exc:
                if exc.errno not in (*UNSUPPORTED, errno.EISDIR):
                    raise os_error("creating a temp file", self.chain.rel, exc) from exc
        try:
            return os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=self.chain.fd), False
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc
        except OSError as exc:
            raise os_error("creating a temp file", self.chain.rel, exc) from exc

    def _link_temp(self, fd: int, temp: str) -> None:
        """Give the anonymous temp ``fd`` its journaled name (never replacing anything)."""
        try:
            os.link(f"/proc/self/fd/{fd}", temp, dst_dir_fd=self.chain.fd, follow_symlinks=True)
        except FileExistsError as exc:
            raise self._name_taken(temp) from exc

    def _name_taken(self, temp: str) -> PathUnsafe:
        return PathUnsafe(
            "something already has promoter's journaled temp name; it was left alone",
            path=self.chain.rel,
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
            done, found = remove_if(self.chain, temp, self._is_own(temp, new))
        except PromoterError:
            log.warning("could not read temp file %s in %s; left in place", temp, self.chain.rel)
            return []
        if done != "left":
            self.written.pop(temp, None)
            return []
        return [keep(self.chain, temp, found)]
