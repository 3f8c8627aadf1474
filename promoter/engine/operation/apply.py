"""The one applier: how a planned step becomes fs calls, for every operation kind.

A step puts a new leaf in place or removes one, always by compare-and-swap against the
state the journal expects (protocol: promotion#step-apply, recovery#removal-provably-ours):
``stage`` writes the new bytes to the step's journaled temp name (``begin`` and
``end_begun`` do it for a group, flushed together: protocol: promotion#flush-order),
``place`` swaps the temp in over exactly the old state, ``remove`` moves the old state
aside and unlinks it only while it is promoter's, ``fsync`` flushes each touched
directory once. One ``Applier`` serves a whole pass of any kind (through
``promoter.engine.operation.driver``), walking to each directory once and re-verifying it
around every change (protocol: promotion#chain-checks), so a write rule changes here and
in ``promoter.fs`` only.

Not here: deciding what to write (``promoter.domain.plan``), journaling, opening blobs,
and the fs-level checks themselves (``promoter.fs.atomic``, ``promoter.fs.delete``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from promoter import faults
from promoter.domain.path_state import State
from promoter.errors import PromoterError, TargetDrift
from promoter.fs.aside import KeptEntry
from promoter.fs.atomic import Parent
from promoter.fs.chain import InPlace, LeafState
from promoter.fs.group_sync import GroupSync
from promoter.fs.held import Directories, HeldDir
from promoter.fs.leaf import os_error, split_rel
from promoter.fs.root import Root
from promoter.fs.shares import first_failure, in_shares
from promoter.fs.syscalls import current_umask
from promoter.fs.temps import PendingTemp, Source

__all__ = ["Applier"]

log = logging.getLogger("promoter.apply")

# the fsyncs of a group of temps, or of a pass's directories, run at once where no group
# sync stands for them (concurrent fsyncs share the disk's journal commits and flushes)
FSYNCS_AT_ONCE = 16


def _how(count: int, *, grouped: bool) -> str:
    """The flush path a pass takes for ``count`` files or directories, as its debug log
    line names it."""
    if grouped:
        return "one group syncfs"
    if count > 1:
        return f"an fsync each, up to {min(count, FSYNCS_AT_ONCE)} at once"
    return "an fsync each"


@dataclass
class Applier:
    """The held directories, staged temps, created directories and kept bytes of one pass."""

    root: Root
    parents: dict[int, Parent] = field(default_factory=dict)  # seq -> its view of a directory
    staged: dict[int, tuple[str, State]] = field(default_factory=dict)  # seq -> (temp, new)
    begun: dict[int, tuple[PendingTemp, State]] = field(default_factory=dict)  # not yet named
    created_dirs: list[str] = field(default_factory=list)
    kept: list[KeptEntry] = field(default_factory=list)
    # the temps this pass named and then removed as its own (``drop_staged``), on disk
    removed: list[str] = field(default_factory=list)
    directories: Directories = field(init=False)
    umask: int = field(init=False)
    # bytes pending system-wide under which to ask for a group sync (None: never; the
    # settings' ``group_sync_limit``)
    group_sync_limit: int | None = None
    group_sync: GroupSync | None = field(init=False)  # one syncfs per group where as good
    # the held directory whose chain the previous replace checked after its rename, when
    # that check was the last thing done in the worktree (``place``); any other step
    # forgets it
    _checked_last: InPlace | None = field(init=False, default=None)
    # the held directory whose chain was checked before the begins since, when each of
    # them wrote only an unnamed temp there (``begin``); any other step forgets it
    _unnamed_in: HeldDir | None = field(init=False, default=None)
    # the threads of the pass's fsyncs at once (``_fsyncs``), started at the first need
    _pool: ThreadPoolExecutor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.directories = Directories(self.root)
        self.umask = current_umask()  # read once per pass, not once per temp
        # started before anything is written: it samples the filesystem's errors now
        limit = self.group_sync_limit
        self.group_sync = None if limit is None else GroupSync.start(self.root.fd, limit)

    def _parent(self, seq: int, path: str, *, create: bool) -> tuple[Parent, bool]:
        """Step ``seq``'s view of its directory, and whether its chain was checked just now."""
        self._forget()  # a walk or a re-check: no longer the last thing done
        try:
            parent = self.directories.open_parent(path, create=create)
        except PromoterError as exc:  # directories made before the walk failed
            self.created_dirs.extend(exc.context.get("created_dirs", []))
            raise
        self.created_dirs.extend(parent.created_dirs)
        self._view_of(seq, parent)
        checked, parent.checked_at_open = parent.checked_at_open, False  # good for one call
        return parent, checked

    def _view_of(self, seq: int, parent: Parent) -> None:
        previous = self.parents.pop(seq, None)
        if previous is not None:
            previous.close()
        self.parents[seq] = parent

    def _forget(self) -> None:
        """Something other than the step that recorded them was done: no check stands."""
        self._checked_last = None
        self._unnamed_in = None

    def stage(self, seq: int, path: str, new: State, data: bytes | Source, temp: str) -> None:
        """Write step ``seq``'s new bytes durably to its journaled temp name ``temp``.

        ``data``: the bytes, or a ``Source`` streamed and checked against its sha256.
        """
        assert new.exists and new.mode is not None
        parent, checked = self._parent(seq, path, create=True)
        written = parent.write_temp(
            data, new.mode, temp=temp, umask=self.umask, chain_checked=checked
        )
        self.staged[seq] = (written, new)

    def begin(self, seq: int, path: str, new: State, data: bytes | Source, temp: str) -> None:
        """``stage`` up to the temp's fsync: its bytes written and its writeback started.

        ``end_begun`` finishes it (a link temp is written whole here, and staged at once).

        A begin in the directory of the begins just before it, each of which wrote only an
        unnamed (``O_TMPFILE``) temp, takes the chain check made before the first of them
        as its own: nothing in the worktree was named, moved or removed since, and each
        temp gets its name only in ``end_begun``, which checks the chain after naming it
        (and each replace checks before and after). A named temp (no ``O_TMPFILE``) or a
        link temp makes a name at once: the next begin checks again, as does any begin
        after another step.
        """
        assert new.exists and new.mode is not None
        held, self._unnamed_in = self._unnamed_in, None
        if held is not None and held.parts == tuple(split_rel(path)[:-1]):
            self._forget()
            parent, checked = self.directories.view(path, held), True
            self._view_of(seq, parent)
        else:
            parent, checked = self._parent(seq, path, create=True)
        begun = parent.begin_temp(
            data,
            new.mode,
            temp=temp,
            umask=self.umask,
            chain_checked=checked,
            writeback=self.group_sync is None,
        )
        if isinstance(begun, str):
            self.staged[seq] = (begun, new)
        else:
            self.begun[seq] = (begun, new)
            if begun.anonymous and isinstance(parent.held, HeldDir):
                self._unnamed_in = parent.held

    def end_begun(self, before_name: Callable[[], None] | None = None) -> None:
        """fsync and name every begun temp, in the order begun, each then staged. The first
        failure drops the temps not yet ended (as promoter's own) and is raised.
        ``before_name`` runs before each name, the first too: the group's fsyncs come
        between it and the check before the last begin (the host's epoch check once its
        lease may have run out); what it raises drops the temps not yet named, as a failure.

        Where the filesystem allows (``group_sync``), one ``syncfs`` makes the whole group
        durable before the first is named, instead of an fsync each. Where it does not,
        the group's fsyncs run up to ``FSYNCS_AT_ONCE`` at once (``promoter.fs.shares``)
        and every one has returned before the first temp is named; a failed one fails its
        temp as its own fsync in ``end_temp`` would (the temps before it named, it and
        the later ones dropped).
        """
        self._forget()
        synced = False
        failed: tuple[int, BaseException] | None = None
        count = len(self.begun)
        grouped = count > 1 and self.group_sync is not None
        if count:
            log.debug("flush path: %s for %d new files", _how(count, grouped=grouped), count)
        if grouped:
            assert self.group_sync is not None
            try:
                self.group_sync.sync()
            except OSError as exc:
                self._drop_begun()
                raise os_error("syncing the new files", "", exc) from exc
            synced = True
        elif count > 1:
            begun = [(self.parents[seq], pending) for seq, (pending, _) in self.begun.items()]
            failed = first_failure(
                begun,
                lambda item: item[0].sync_begun(item[1]),
                workers=FSYNCS_AT_ONCE,
                pool=self._fsyncs(),
            )
            synced = True
        index = 0
        while self.begun:
            if before_name is not None:
                try:
                    before_name()
                except BaseException:
                    self._drop_begun()
                    raise
            seq = next(iter(self.begun))
            pending, new = self.begun.pop(seq)
            try:
                if failed is not None and index == failed[0]:
                    self.parents[seq].fail_begun(pending, failed[1])
                self.staged[seq] = (self.parents[seq].end_temp(pending, synced=synced), new)
            except BaseException:
                self._drop_begun()
                raise
            index += 1

    def _fsyncs(self) -> ThreadPoolExecutor:
        """The pass's pool for fsyncs at once: made once, shut down by ``close``."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(FSYNCS_AT_ONCE, "pass-fsync")
        return self._pool

    def _drop_begun(self) -> None:
        self._forget()
        for seq, (begun, _) in list(self.begun.items()):
            parent = self.parents[seq]
            named = begun.temp in parent.written
            try:
                kept = [k.to_dict() for k in parent.abort_temp(begun)]
                self.kept += kept
                self._note_removed(parent, begun.temp, named=named, kept=kept)
            except (PromoterError, OSError):
                log.warning("could not remove temp file %s; left in place", begun.temp)
            self.begun.pop(seq, None)

    def _note_removed(
        self, parent: Parent, temp: str, *, named: bool, kept: list[KeptEntry]
    ) -> None:
        """Note ``temp`` as removed when it had a name and is no longer promoter's (gone)."""
        if named and not kept and temp not in parent.written:
            self.removed.append("/".join([*parent.dir_parts, temp]))

    def place(self, seq: int, old: State, new: State) -> None:
        """Put step ``seq``'s staged temp in place over exactly ``old``.

        When the last thing this pass did in the worktree was the check after the previous
        replace in the same held directory, that check is this replace's check before
        (nothing was done in between: one check per instant); the check after it runs.
        """
        temp, _ = self.staged.pop(seq)
        parent = self.parents[seq]
        held = self._checked_last
        self._forget()
        checked = held is not None and parent.held is held
        if parent.replace(temp, expected_old=old, new=new, chain_checked=checked):
            self._checked_last = parent.held

    def write(
        self, seq: int, path: str, old: State, new: State, data: bytes | Source, temp: str
    ) -> None:
        """``stage`` and ``place`` one step."""
        self.stage(seq, path, new, data, temp)
        self.place(seq, old, new)

    def remove(self, seq: int, path: str, old: State, aside: str, *, gone_ok: bool = False) -> bool:
        """Remove exactly ``old`` at ``path`` (moved aside to ``aside`` first).

        With ``gone_ok`` a missing parent directory means the file is already gone
        (False is returned and nothing is done).
        """
        try:
            parent, checked = self._parent(seq, path, create=False)
        except TargetDrift as exc:
            if gone_ok and exc.context.get("found") == "missing_parent":
                return False
            raise
        parent.unlink_checked(old, aside=aside, chain_checked=checked)
        return True

    def read_states(self, paths: list[str]) -> list[LeafState | PromoterError]:
        """What is at each of ``paths`` now, read through the pass's held directories
        (``Directories.read_states``: each chain re-checked, each leaf verified after
        reading). A read is not a check a later change may reuse: none stands after it."""
        self._forget()
        return self.directories.read_states(paths)

    def hold(self, seq: int, path: str) -> bool:
        """Hold step ``seq``'s directory for ``fsync`` without changing anything in it (a
        step an earlier pass carried out, whose name this pass makes durable too); False
        when the directory is gone."""
        try:
            self._parent(seq, path, create=False)
        except TargetDrift as exc:
            if exc.context.get("found") == "missing_parent":
                return False
            raise
        return True

    def created_at(self, seq: int) -> list[str]:
        """The directories step ``seq``'s walk made (none when it has no view)."""
        parent = self.parents.get(seq)
        return [] if parent is None else list(parent.created_dirs)

    def sync(self, seq: int) -> None:
        """fsync the directory of step ``seq`` now."""
        self._forget()
        self.parents[seq].fsync()

    def fsync(self) -> None:
        """fsync every directory this pass touched, once each, up to ``FSYNCS_AT_ONCE`` at
        once (or, where the filesystem allows and there are several, one ``syncfs`` for
        all of them: ``group_sync``); returns once every one has, the earliest failure
        (in the order touched) raised."""
        self._forget()
        seen: dict[str, Parent] = {}
        for parent in self.parents.values():
            seen.setdefault("/".join(parent.dir_parts), parent)
        grouped = len(seen) > 1 and self.group_sync is not None
        log.debug("flush path: %s for %d directories", _how(len(seen), grouped=grouped), len(seen))
        if grouped:
            assert self.group_sync is not None
            try:
                self.group_sync.sync()
                faults.point("after_parent_fsync")
            except OSError as exc:
                raise os_error("syncing the parent directories", "", exc) from exc
            return
        # a few at once; all have returned before this does, the earliest failure raised
        in_shares(
            list(seen.values()),
            lambda parent: parent.fsync(),
            workers=FSYNCS_AT_ONCE,
            pool=self._fsyncs(),
        )

    def drop_staged(self, from_seq: int = 0) -> None:
        """Remove the staged temps of steps ``>= from_seq`` that are still promoter's own
        (and every begun one not yet ended)."""
        self._drop_begun()
        for seq, (temp, new) in list(self.staged.items()):
            if seq < from_seq:
                continue
            parent = self.parents[seq]
            named = temp in parent.written
            try:
                kept = [k.to_dict() for k in parent.drop_temp(temp, new)]
                self.kept += kept
                self._note_removed(parent, temp, named=named, kept=kept)
            except (PromoterError, OSError):
                log.warning("could not remove temp file %s; left in place", temp)
            self.staged.pop(seq, None)

    def release(self, seq: int) -> None:
        """Forget step ``seq``'s view (its directory stays held until ``close``)."""
        parent = self.parents.pop(seq, None)
        if parent is not None:
            parent.close()

    def close(self) -> None:
        """Close every directory the pass held, each once (a begun temp is dropped first)."""
        self._drop_begun()
        for parent in self.parents.values():
            parent.close()
        if self.group_sync is not None:
            self.group_sync.close()
            self.group_sync = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.parents.clear()
        self.directories.close()
