"""The directories one pass of writes holds open: each reached from the root once.

``Directories`` is the applier's cache for one pass: the first step in a directory walks
the chain from the root (every rule of ``chain.py``), later steps borrow its descriptor
(``HeldDir``), re-verified cheaply before reuse and around every change by
``HeldDir.still_in_place`` (device, inode, mount id and the ``.git`` check per component,
no opens), falling back to a full re-walk on any difference; when a check may stand for
the next: protocol: promotion#chain-checks. ``read_state`` and
``read_states`` read through the same cache; ``close`` closes each descriptor once.

Not here: the walk and its rules (``root.py``, ``chain.py``), changing files
(``atomic.py``), which steps share a pass. Residual risk: a directory swapped away and
back between two checks is unseen by both.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from promoter.errors import PathUnsafe, PromoterError, TargetDrift
from promoter.fs import syscalls
from promoter.fs.atomic import Parent
from promoter.fs.chain import HoldsFd, ParentChain
from promoter.fs.leaf import MISSING, LeafState, os_error, split_rel
from promoter.fs.root import Root
from promoter.fs.syscalls import entry_errno, mount_id, statx_identity

__all__ = ["Directories", "HeldDir"]


class HeldDir(HoldsFd):
    """One directory below (or at) the root, held open by descriptor for a pass."""

    def __init__(self, root: Root, parts: tuple[str, ...], fd: int, ids: list[tuple[int, int]]):
        self.root = root
        self.parts = parts
        self.fd = fd
        self.ids = ids
        self.prefixes = ["/".join(parts[: depth + 1]) for depth in range(len(parts))]
        self._encoded = [os.fsencode(prefix) for prefix in self.prefixes]
        self._dot_git = [os.fsencode(f"{prefix}/.git") for prefix in self.prefixes]
        # one statx per component gives the (device, inode) and mount id: decided once,
        # as the root's mount id was read once
        self._by_statx = (
            root.mnt_id is not None
            and syscalls.mount_id_source() == "statx"
            and syscalls.identity_by_statx()
        )

    def still_in_place(self) -> bool:
        """True when every component path still names the directory recorded for it.

        Raises ``PathUnsafe`` when the root itself was moved or replaced (as the re-walk
        does); any other difference answers False and the caller re-walks. Where mount ids
        come from ``statx``, each component costs that one call (device, inode and mount
        id together); elsewhere a ``stat`` and a mount id read.
        """
        self.root.recheck()
        mnt_id = self.root.mnt_id
        if self._by_statx:
            root_fd = self.root.fd
            try:
                for path, (dev, ino) in zip(self._encoded, self.ids, strict=True):
                    if statx_identity(root_fd, path) != (dev, ino, mnt_id):
                        return False
            except OSError:
                return False
            return True
        for prefix, ident in zip(self.prefixes, self.ids, strict=True):
            try:
                st = os.stat(prefix, dir_fd=self.root.fd, follow_symlinks=False)
                if (st.st_dev, st.st_ino) != ident:
                    return False
                if mnt_id is not None and mount_id(self.root.fd, prefix) != mnt_id:
                    return False
            except OSError:
                return False
        return True

    def refuse_nested_repository(self, rel: str) -> None:
        """Raise ``PathUnsafe`` if a component now holds a ``.git`` entry (as a walk would)."""
        if self._by_statx:
            for prefix, dot_git in zip(self.prefixes, self._dot_git, strict=True):
                code = entry_errno(self.root.fd, dot_git)
                if code == errno.ENOENT:
                    continue
                if code:
                    raise os_error("inspecting a directory", rel, OSError(code, os.strerror(code)))
                raise PathUnsafe("path is inside a nested repository", path=rel, at=prefix)
            return
        for prefix in self.prefixes:
            try:
                os.stat(f"{prefix}/.git", dir_fd=self.root.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise os_error("inspecting a directory", rel, exc) from exc
            raise PathUnsafe("path is inside a nested repository", path=rel, at=prefix)


READS_HOLD_AT_MOST = 64  # directories a reading pass keeps open at once


class Directories:
    """The held directories of one pass, by their parts below the root.

    ``hold_at_most`` bounds the descriptors a pass that only reads (``read_state``, no
    ``open_parent``) keeps open: past it the directory held longest is closed (a later
    read there walks again). A pass that lent descriptors to ``Parent`` views keeps all.
    """

    def __init__(self, root: Root, *, hold_at_most: int | None = None) -> None:
        self.root = root
        self.hold_at_most = hold_at_most
        self._held: dict[tuple[str, ...], HeldDir] = {}
        self._all: list[HeldDir] = []  # every one opened, replaced ones too, closed once
        self._lent = False  # a Parent borrowed a held descriptor: none is closed before close()

    @classmethod
    def for_reads(cls, root: Root) -> Directories:
        """A pass that only reads targets, holding at most ``READS_HOLD_AT_MOST`` directories."""
        return cls(root, hold_at_most=READS_HOLD_AT_MOST)

    def __len__(self) -> int:
        return len(self._held)

    def open_parent(self, rel: str, *, create: bool) -> Parent:
        """The ``Parent`` of ``rel``, sharing the pass's descriptor of its directory.

        Same contract as ``Root.open_parent``: missing directories are made with
        ``create`` (listed in the parent's ``created_dirs``, or in the error's context
        when the walk fails); without it a missing one raises ``TargetDrift``
        (``found="missing_parent"``). A reused directory's ``Parent`` has
        ``checked_at_open`` set: its chain was re-checked by this call (the root's path
        included); a freshly walked one has not (the walk does not re-check the root's
        path), so its first write checks the chain as usual.
        """
        parts = tuple(split_rel(rel)[:-1])
        self._lent = True
        held = self._reuse(rel, parts)
        if held is not None:
            parent = Parent(ParentChain(self.root, rel, held.fd, held.ids, [], held=held))
            parent.checked_at_open = True
            return parent
        walked = self.root._walk(rel, list(parts), create=create)
        if walked is None:
            raise TargetDrift("a parent directory is missing", path=rel, found="missing_parent")
        held = self._hold(parts, walked.fd, walked.ids)
        return Parent(ParentChain(self.root, rel, held.fd, held.ids, walked.created, held=held))

    def view(self, rel: str, held: HeldDir) -> Parent:
        """A ``Parent`` of ``rel`` on ``held``, the held directory of ``rel``'s directory,
        made without re-checking its chain: for a caller whose check of that chain still
        stands (``promoter.engine.operation.apply``: begins in one directory that named
        nothing in between); its changes check as they always do."""
        if tuple(split_rel(rel)[:-1]) != held.parts or self._held.get(held.parts) is not held:
            raise ValueError(f"{rel} is not in the held directory {'/'.join(held.parts)}")
        self._lent = True
        return Parent(ParentChain(self.root, rel, held.fd, held.ids, [], held=held))

    def _reuse(self, rel: str, parts: tuple[str, ...]) -> HeldDir | None:
        """The held directory of ``parts`` when it is still in place (checked), else None."""
        held = self._held.get(parts)
        if held is not None and held.still_in_place():
            held.refuse_nested_repository(rel)
            return held
        return None

    def _hold(self, parts: tuple[str, ...], fd: int, ids: list[tuple[int, int]]) -> HeldDir:
        if not self._lent:  # nothing borrowed: a replaced or the longest-held one can go
            stale = self._held.pop(parts, None)
            if stale is not None:
                self._release(stale)
            while self.hold_at_most is not None and len(self._held) >= max(self.hold_at_most, 1):
                self._release(self._held.pop(next(iter(self._held))))
        held = HeldDir(self.root, parts, fd, ids)
        self._held[parts] = held
        self._all.append(held)
        return held

    def _release(self, held: HeldDir) -> None:
        held.close()
        self._all.remove(held)

    def read_state(self, rel: str) -> LeafState:
        """What is at ``rel`` now: ``Root.read_state``'s answer through the held directory.

        The first read in a directory walks the chain from the root (and holds it); a
        later one re-checks it per component first (walking afresh on any difference),
        then reads the leaf and verifies the chain after reading, as every read does. A
        missing directory on the way reads as a missing leaf and is not held.
        """
        return self._read(rel, None)[0]

    def read_states(self, rels: Sequence[str]) -> list[LeafState | PromoterError]:
        """``read_state`` of each of ``rels``, in order, in one call; a refusal is returned
        in the path's place (an ``OSError`` or other error propagates, as from
        ``read_state``).

        Nothing is done in the worktree between two reads of one call, so when a read
        is in the directory whose chain the previous read verified after reading, that
        verification is also the check before this read: the chain is not re-checked a
        second time in the same instant. The nested-repository check of every component
        and the verification after every read still run for each path.
        """
        found: list[LeafState | PromoterError] = []
        checked: HeldDir | None = None
        for rel in rels:
            try:
                state, checked = self._read(rel, checked)
            except PromoterError as exc:
                found.append(exc)
                checked = None
                continue
            found.append(state)
        return found

    def _read(self, rel: str, checked: HeldDir | None) -> tuple[LeafState, HeldDir | None]:
        """Read ``rel``; ``checked``: the held directory whose chain was verified just now.

        Returns the state and the held directory this read verified after reading (None
        when the read held none: a missing directory on the way).
        """
        parts = tuple(split_rel(rel)[:-1])
        held = self._held.get(parts)
        if held is not None and held is checked:
            held.refuse_nested_repository(rel)
        else:
            held = self._reuse(rel, parts)
        if held is None:
            walked = self.root._walk(rel, list(parts), create=False)
            if walked is None:
                return MISSING, None
            held = self._hold(parts, walked.fd, walked.ids)
        chain = ParentChain(self.root, rel, held.fd, held.ids, [], held=held)
        state = chain.leaf_state()
        chain.verify_chain()
        return state, held

    def close(self) -> None:
        for held in self._all:
            held.close()
        self._all.clear()
        self._held.clear()
