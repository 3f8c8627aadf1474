"""Durable writes into a worktree with compare-and-swap on the target.

This module owns every change promoter makes to a file in a worktree. ``Parent`` is the
directory handle of one target (its ``ParentChain``) and delegates to ``Temps``
(``temps.py``: the journaled temp, written, flushed, given its mode), ``Swap`` (here: the
temp put in place only while the target is still the old state) and ``Deletion``
(``delete.py``). Modes: protocol: documents#written-file-mode. Nothing is unlinked unless
it is provably promoter's own (protocol: recovery#exchange-and-verify,
promotion#without-renameat2). An ``OSError`` surfaces as ``WriteFailed`` with its errno
and is never retried (protocol: promotion#failed-flush); ``replace`` leaves the parent's
fsync to the caller. Fault points: ``before_replace``, ``after_exchange``,
``before_swap_back``, ``after_replace``, ``after_parent_fsync``.

Not here: finding paths (``chain.py``), deciding what to write, journaling, directory
removal (``Root.remove_dir_if_empty``).
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from promoter import faults
from promoter.domain.closing import Closing
from promoter.errors import PathUnsafe, PromoterError, TargetDrift, WriteFailed
from promoter.fs import flush
from promoter.fs.aside import Kept, beside, check_temp_name, refusal, remove_if, with_kept
from promoter.fs.chain import ChainRoot, InPlace, ParentChain
from promoter.fs.delete import Deletion
from promoter.fs.leaf import (
    ExpectedState,
    LeafState,
    os_error,
)
from promoter.fs.syscalls import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    renameat2,
)
from promoter.fs.temps import UNSUPPORTED, Temps

P = ParamSpec("P")
R = TypeVar("R")


class Swap:
    """The compare-and-swap that puts a written temp at the target (see the module)."""

    def __init__(self, chain: ParentChain, temps: Temps) -> None:
        self.chain = chain
        self.temps = temps

    def replace(
        self,
        temp: str,
        *,
        expected_old: ExpectedState,
        new: ExpectedState,
        chain_checked: bool = False,
    ) -> bool:
        """Put ``temp`` at the target only if the target is ``expected_old`` (or already ``new``).

        Refuses with ``TargetDrift`` (another state) or ``PathUnsafe`` (symlink, special
        file, swapped chain); on a refusal before any rename the temp is removed and the
        target is left as found. Idempotent when the target already is ``new``.

        ``chain_checked``: the caller verified this chain immediately before the call,
        with nothing done in the worktree in between (the check after the previous
        replace in the same held directory: ``promoter.engine.operation.apply``), so that
        check is the one before this replace; the check after it always runs. Returns
        True when that check after its rename was the last thing it did (False: the
        target was already ``new`` and nothing was renamed).
        """
        check_temp_name(temp)
        if not new.exists:
            raise ValueError("replace writes a file; deletes use unlink_checked")
        settled = False
        try:
            if not chain_checked:
                self.chain.verify_chain()
            current = self.chain.leaf_state()
            if current.matches(new):
                self.temps.drop_temp(temp, new)
                return False
            if not current.matches(expected_old):
                raise refusal(self.chain.rel, expected_old, current)
            faults.point("before_replace")
            if not expected_old.exists:
                self._create_from(temp, new)
                self.temps.drop_temp(temp, new)  # normally gone: the rename consumed it
            else:
                settled = True  # from here the exchange settles the temp name itself
                self._exchange_in(temp, current, expected_old, new)
            faults.point("after_replace")
            self.chain.verify_chain()
        except OSError as exc:
            error = os_error("replacing the target", self.chain.rel, exc)
            if not settled:
                with_kept(error, self.temps.drop_temp(temp, new))
            raise error from exc
        except PromoterError as exc:
            if not settled:
                with_kept(exc, self.temps.drop_temp(temp, new))
            raise
        return True

    def _create_from(self, temp: str, new: ExpectedState) -> None:
        try:
            renameat2(self.chain.fd, temp, self.chain.fd, self.chain.name, RENAME_NOREPLACE)
            return
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                self._raise_unless_new(new, ExpectedState(False, None, None), exc)
                return
            if exc.errno not in UNSUPPORTED:
                raise
        try:
            os.link(
                temp,
                self.chain.name,
                src_dir_fd=self.chain.fd,
                dst_dir_fd=self.chain.fd,
                follow_symlinks=False,
            )
            return
        except FileExistsError as exc:
            self._raise_unless_new(new, ExpectedState(False, None, None), exc)
            return
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                raise
        found = self.chain.leaf_state()
        if not found.matches(False):
            raise refusal(self.chain.rel, ExpectedState(False, None, None), found)
        os.rename(temp, self.chain.name, src_dir_fd=self.chain.fd, dst_dir_fd=self.chain.fd)

    def _raise_unless_new(self, new: ExpectedState, old: ExpectedState, exc: OSError) -> None:
        found = self.chain.leaf_state()
        if not found.matches(new):
            raise refusal(self.chain.rel, old, found) from exc

    def _exchange_in(
        self, temp: str, current: LeafState, expected_old: ExpectedState, new: ExpectedState
    ) -> None:
        """Exchange temp and target, then settle what the exchange displaced (see the module)."""
        try:
            renameat2(self.chain.fd, temp, self.chain.fd, self.chain.name, RENAME_EXCHANGE)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                found = self.chain.leaf_state()
                raise with_kept(
                    refusal(self.chain.rel, expected_old, found), self.temps.drop_temp(temp, new)
                ) from exc
            if exc.errno not in UNSUPPORTED:
                raise with_kept(
                    os_error("exchanging the target", self.chain.rel, exc),
                    self.temps.drop_temp(temp, new),
                ) from exc
            self._rename_after_recheck(temp, current, expected_old, new, exc)
            return
        faults.point("after_exchange")

        def is_old(leaf: LeafState) -> bool:
            same_inode = (leaf.dev, leaf.ino) == (current.dev, current.ino)
            return same_inode and leaf.matches(expected_old)

        try:
            done, displaced = remove_if(self.chain, temp, is_old)
        except PromoterError:
            done, displaced = "left", LeafState(kind="special")
        if done != "left":
            return
        faults.point("before_swap_back")
        try:
            renameat2(self.chain.fd, temp, self.chain.fd, self.chain.name, RENAME_EXCHANGE)
        except OSError as exc:
            held = Kept(
                self.chain.rel,
                beside(self.chain, temp),
                displaced.kind,
                displaced.sha256,
                displaced.size,
            )
            raise with_kept(
                WriteFailed(
                    "could not put the displaced file back; it is kept under the temp name",
                    path=self.chain.rel,
                    errno=exc.errno,
                ),
                [held],
            ) from exc
        kept = self.temps.drop_temp(temp, new)
        error: PromoterError
        if displaced.kind in ("file", "symlink") and displaced.matches(expected_old):
            error = TargetDrift(
                "target was replaced between the check and the exchange",
                path=self.chain.rel,
                expected=expected_old.to_dict(),
                found=displaced.to_dict(),
                reason="swapped",
            )
        elif displaced.kind in ("file", "symlink", "missing"):
            error = refusal(self.chain.rel, expected_old, displaced)
        else:
            error = PathUnsafe("the displaced file could not be verified", path=self.chain.rel)
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
        again = self.chain.leaf_state()
        if not again.matches(expected_old) or (again.dev, again.ino) != (current.dev, current.ino):
            raise with_kept(
                refusal(self.chain.rel, expected_old, again), self.temps.drop_temp(temp, new)
            ) from cause
        os.rename(temp, self.chain.name, src_dir_fd=self.chain.fd, dst_dir_fd=self.chain.fd)


def _forward(
    part: str, method: Callable[Concatenate[Any, P], R]
) -> Callable[Concatenate[Parent, P], R]:
    """``Parent.<name>`` as the ``part`` collaborator's own ``<name>``: its signature and
    documentation, looked up on the collaborator at each call."""
    name = method.__name__

    def forward(self: Parent, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(getattr(self, part), name)
        return bound(*args, **kwargs)

    functools.update_wrapper(forward, method)
    return forward


class Parent(Closing):
    """The held parent directory of one target, with the operations that change it.

    It holds the ``ParentChain`` (the descriptor, its identities, ``verify_chain``,
    ``leaf_state``) and delegates each change to a collaborator sharing that chain: temp
    files to ``Temps``, the delete to ``Deletion``, putting a temp in place to ``Swap``.
    Those methods are the collaborators' own (``_forward``: same signature and text).
    """

    def __init__(self, chain: ParentChain) -> None:
        self.chain = chain
        self.temps = Temps(chain)
        self.deletion = Deletion(chain)
        self.swap = Swap(chain, self.temps)
        # set by ``Directories.open_parent`` when it re-checked the held chain just now
        # (``HeldDir.still_in_place`` and the nested-repository check); the caller that
        # changes nothing before its first write passes it on as ``chain_checked`` once
        self.checked_at_open = False

    # -- the held chain -----------------------------------------------------------------

    @property
    def root(self) -> ChainRoot:
        return self.chain.root

    @property
    def fd(self) -> int:
        return self.chain.fd

    @property
    def rel(self) -> str:
        return self.chain.rel

    @property
    def name(self) -> str:
        return self.chain.name

    @property
    def dir_parts(self) -> list[str]:
        return self.chain.dir_parts

    @property
    def created_dirs(self) -> list[str]:
        return self.chain.created_dirs

    @property
    def held(self) -> InPlace | None:
        """The pass's held directory whose descriptor this view borrows (``held.py``)."""
        return self.chain.held

    def verify_chain(self) -> None:
        self.chain.verify_chain()

    def leaf_state(self) -> LeafState:
        return self.chain.leaf_state()

    def close(self) -> None:
        self.chain.close()

    # -- temps (``temps.py``) -------------------------------------------------------------

    @property
    def written(self) -> dict[str, tuple[int, int]]:
        return self.temps.written

    write_temp = _forward("temps", Temps.write_temp)
    begin_temp = _forward("temps", Temps.begin_temp)
    sync_begun = _forward("temps", Temps.sync_begun)
    end_temp = _forward("temps", Temps.end_temp)
    fail_begun = _forward("temps", Temps.fail_begun)
    abort_temp = _forward("temps", Temps.abort_temp)
    drop_temp = _forward("temps", Temps.drop_temp)

    # -- changing the target ----------------------------------------------------------------

    replace = _forward("swap", Swap.replace)
    unlink_checked = _forward("deletion", Deletion.unlink_checked)

    def fsync(self) -> None:
        """fsync the held parent directory (once per batch); a failure is raised, never retried."""
        try:
            flush.fsync(self.chain.fd)
            faults.point("after_parent_fsync")
        except OSError as exc:
            raise os_error("syncing the parent directory", self.rel, exc) from exc
