"""The one driver of every pass that writes a worktree: promotion, recovery, rollback, restore.

A planner turns its journal into typed ``Step``s (seq, path, old and new ``State``, a
``Move``, the journaled temp name, the bytes' source); a ``Driver`` carries them out
through one ``Applier`` for the whole pass, in the pass's ``Ordering``:
``STAGE_THEN_PLACE`` (a promotion, a recovery that applies again: stage every temp, then
``place_all`` in bundle order, ``abandon`` on a failed staging) or ``STEP_BY_STEP`` (a
rollback, a restore: ``step``, or ``write_grouped`` then ``put``). ``between_groups`` is
the host's epoch check, and ``before_temp`` the same check once the host lease may have
run out, before every temp, name, replace and delete of a group but its first, in either
ordering (protocol: promotion#fence-stops-every-write). Bytes that are not
promoter's are gathered in ``kept``; what a pass reads back is a ``Target`` per path;
``remove_empty_dirs`` removes directories a pass made or emptied, deepest first, only when
empty.

Not here: planning, journaling and receipts (each kind's module), and the write rules
(``promoter.engine.operation.apply``, ``promoter.fs``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from promoter import faults
from promoter.domain.path_state import State, Verdict
from promoter.domain.paths import wire_all
from promoter.domain.plan import Move, Ordering
from promoter.engine.operation.apply import Applier
from promoter.errors import PromoterError, as_promoter_error, translated
from promoter.fs.aside import KeptEntry
from promoter.fs.chain import LeafState
from promoter.fs.root import Root
from promoter.fs.temps import Source

__all__ = ["TEMPS_TOGETHER", "Driver", "Passed", "Step", "Target", "remove_empty_dirs"]

log = logging.getLogger("promoter.driver")

TEMPS_TOGETHER = 64  # temps begun before the first of them is fsynced (``Driver.stage``)


@dataclass(frozen=True)
class Step:
    """One planned step: ``path`` is the name on disk, ``temp`` its journaled temp name,
    ``data`` opens the new bytes (given whole or as a checked stream) for a write."""

    seq: int
    path: str
    old: State
    new: State
    move: Move
    temp: str
    data: Callable[[], bytes | Source] | None = None

    @classmethod
    def between(
        cls,
        seq: int,
        path: str,
        old: State,
        new: State,
        temp: str,
        data: Callable[[], bytes | Source] | None = None,
    ) -> Step:
        """The step from ``old`` to ``new``: a write when ``new`` exists, else a removal."""
        return cls(seq, path, old, new, Move.to(new.exists), temp, data)

    def source(self) -> bytes | Source:
        assert self.data is not None, "a write needs its bytes"
        return self.data()


@dataclass
class Passed:
    """How a ``place_all`` ended: the seqs done, the first failure (seq, or -1 for one
    outside any step), whether the daemon's stop ended it between two steps, and what
    the epoch check raised when it ended it before a replace."""

    applied: list[int] = field(default_factory=list)
    failure: tuple[int, PromoterError] | None = None
    stopped: bool = False
    halted: PromoterError | None = None  # what the epoch check before a replace raised


def _with_kept(error: PromoterError, kept: list[KeptEntry]) -> PromoterError:
    """``error`` naming the ``kept`` entries too (wire form), after any it named already."""
    if kept:
        error.context["kept"] = [*error.context.get("kept", []), *wire_all(kept)]
    return error


class TargetWire(TypedDict):
    """``Target.wire``: one path of an operation's report."""

    path: str
    verdict: str
    actual: Mapping[str, Any]
    expected_old: NotRequired[Mapping[str, Any]]
    expected_new: NotRequired[Mapping[str, Any]]


@dataclass(frozen=True)
class Target:
    """One target as read back from disk: its verdict and what was found (``actual``),
    with the states it was expected in when the read-back knows them."""

    path: str  # wire form
    verdict: Verdict
    actual: Mapping[str, Any]
    expected_old: Mapping[str, Any] | None = None
    expected_new: Mapping[str, Any] | None = None

    @property
    def new(self) -> bool:
        return self.verdict is Verdict.NEW

    def wire(self) -> TargetWire:
        """The per-path report, as journaled (the expected states only when known)."""
        wired: TargetWire = {
            "path": self.path,
            "verdict": self.verdict.value,
            "actual": self.actual,
        }
        if self.expected_old is not None:
            wired["expected_old"] = self.expected_old
        if self.expected_new is not None:
            wired["expected_new"] = self.expected_new
        return wired


class Driver:
    """One pass of writes over one worktree through one ``Applier``."""

    def __init__(
        self,
        root: Root,
        ordering: Ordering,
        *,
        group_sync_limit: int | None = None,
        between_groups: Callable[[], None] | None = None,
        before_temp: Callable[[], None] | None = None,
    ) -> None:
        """``between_groups`` runs before the first temp of every group of temps after the
        first, and before every group of replaces after the first (the host's epoch check,
        ``engine.fencing``): what it raises stops the pass before that group makes a temp,
        a directory or a name. ``before_temp`` runs before every other temp of a group is
        begun, before every name of a group's temps, and step by step before
        every step of a group after its first (``write_grouped``, ``next_in_group``;
        ``fencing.check_unless_leased``): what it raises stops the pass before that temp,
        name, replace or delete."""
        self.root = root
        self.ordering = ordering
        self.apply = Applier(root, group_sync_limit=group_sync_limit)
        self.kept: list[KeptEntry] = self.apply.kept  # found at temp names, this pass
        self.removed_dirs: list[str] = []  # the directories ``abandon`` removed
        self._between_groups = between_groups
        self._before_temp = before_temp
        self._in_group = 0  # temps begun in the group now open (``stage``)
        self._groups = 0  # groups of temps opened so far
        self._closed = False

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def created_dirs(self) -> list[str]:
        """The directories this pass made (also those made by a step that then failed)."""
        return self.apply.created_dirs

    def created_at(self, seq: int) -> list[str]:
        """The directories step ``seq``'s own walk made."""
        return self.apply.created_at(seq)

    # -- stage then place (a promotion) -------------------------------------------------

    def stage(self, step: Step) -> None:
        """Begin staging one write; every ``TEMPS_TOGETHER`` begun are ended together.
        Before the first temp of each group after the first, ``between_groups`` runs."""
        assert self.ordering is Ordering.STAGE_THEN_PLACE and step.move is Move.WRITE
        if not self._in_group:
            self._open_group()
        elif self._before_temp is not None:
            self._before_temp()
        self.apply.begin(step.seq, step.path, step.new, step.source(), step.temp)
        self._in_group += 1
        if self._in_group >= TEMPS_TOGETHER:  # a link temp counts, though staged at once
            self.apply.end_begun(self._before_temp)
            self._in_group = 0

    def _open_group(self) -> None:
        if self._groups and self._between_groups is not None:
            self._between_groups()
        self._groups += 1

    def open_group(self) -> None:
        """Begin the next group of steps a pass carries out one by one (a restore's
        deletes, ``TEMPS_TOGETHER`` a group): ``between_groups`` runs before every group
        after the first, as before a group of temps."""
        self._open_group()

    def next_in_group(self) -> None:
        """Before a step of the open group after its first (``step``, ``put``):
        ``before_temp``, whose error stops the pass before that step makes a temp or a
        name, replaces or deletes."""
        if self._before_temp is not None:
            self._before_temp()

    def end_staging(self) -> None:
        """Every begun temp fsynced and named."""
        self.apply.end_begun(self._before_temp)
        self._in_group = 0

    @property
    def removed_temps(self) -> list[str]:
        """The temps this pass named and then removed as its own (names on disk)."""
        return self.apply.removed

    def abandon(self, exc: BaseException) -> PromoterError:
        """Undo a staging that ``exc`` stopped: the staged temps still promoter's own
        dropped, the directories the pass made removed when empty, the pass closed.
        Returns the error it stands for, naming anything kept."""
        self.apply.drop_staged()
        self.removed_dirs = remove_empty_dirs(self.root, self.created_dirs)
        self.close()
        return _with_kept(as_promoter_error(exc), self.kept)

    def place_all(
        self, steps: Sequence[Step], *, check: Callable[[], None], stopping: threading.Event
    ) -> Passed:
        """Put every staged step in place (or remove it) in order, then sync each directory
        once; ``check`` runs first (the lock still held), ``between_groups`` before every
        ``TEMPS_TOGETHER`` steps after the first ones and ``before_temp`` before every
        other step but the first (what either raises ends the pass there, in ``halted``,
        the temps not placed dropped as promoter's own). Closes the pass."""
        passed = Passed()
        try:
            with translated():
                check()
                for at, step in enumerate(steps):
                    if stopping.is_set():  # SIGTERM: stop between two steps
                        passed.stopped = True
                        self.apply.drop_staged(step.seq)
                        break
                    # every group after the first asks the ledger; a replace within a
                    # group, once the host lease may have run out
                    ask = self._between_groups if not at % TEMPS_TOGETHER else self._before_temp
                    if at and ask is not None:
                        try:
                            ask()
                        except PromoterError as error:
                            passed.halted = error
                            self.apply.drop_staged(step.seq)
                            break
                    try:
                        with translated():
                            self._place(step)
                    except PromoterError as error:
                        self.apply.drop_staged(step.seq)
                        passed.failure = (step.seq, _with_kept(error, self.kept))
                        break
                    passed.applied.append(step.seq)
                faults.point("after_replaces")
                self.apply.fsync()
        except PromoterError as error:
            passed.failure = passed.failure or (-1, error)
        finally:
            self.close()
        return passed

    def _place(self, step: Step) -> None:
        if step.move is Move.WRITE:
            self.apply.place(step.seq, step.old, step.new)
        else:
            self.apply.remove(step.seq, step.path, step.old, step.temp)

    # -- step by step (a rollback, a restore) -------------------------------------------

    def step(self, step: Step, *, sync: bool = True, gone_ok: bool = False) -> bool:
        """Write or remove one step now, its directory synced when ``sync``; whether
        anything changed (False: ``gone_ok`` and its directory is already gone).

        Raises what stopped it, as it was raised; bytes kept on the way are in ``kept``.
        """
        try:
            if step.move is Move.WRITE:
                self.apply.write(step.seq, step.path, step.old, step.new, step.source(), step.temp)
            elif not self.apply.remove(step.seq, step.path, step.old, step.temp, gone_ok=gone_ok):
                return False
            if sync:
                self.apply.sync(step.seq)
        except PromoterError as exc:
            self.kept.extend(exc.context.get("kept", []))
            raise
        return True

    def write_grouped(self, steps: Sequence[Step], each: Callable[[Step], None]) -> None:
        """``each(step)`` for every step in order, each expected to ``put`` its step; the
        temps of up to ``TEMPS_TOGETHER`` consecutive writes staged together first (each
        begun, then all ended at once: one ``syncfs`` where the pass has a group sync, else
        their fsyncs at once, every temp durable before the first is named). A write the
        group could not stage (its begin, its end or the group's sync failed; the temps
        not yet named dropped as promoter's own) is written on its own by ``put``, as if
        never grouped, so it says what stops it. ``before_temp`` runs before every temp,
        name and ``each`` of a group but its first (``next_in_group``). Whatever it or
        ``each`` raises drops the staged temps not yet placed (anything not promoter's is
        kept, in ``kept``) and is raised.
        """
        assert self.ordering is Ordering.STEP_BY_STEP
        try:
            for at in range(0, len(steps), TEMPS_TOGETHER):
                group = steps[at : at + TEMPS_TOGETHER]
                self._open_group()
                writes = [step for step in group if step.move is Move.WRITE]
                self._stage_together(writes)
                for index, step in enumerate(group):
                    if index or writes:  # the group made its temps: not its first step
                        self.next_in_group()
                    each(step)
        except BaseException:
            self.apply.drop_staged()
            raise

    def _stage_together(self, writes: Sequence[Step]) -> None:
        """Begin every one of ``writes`` (``before_temp`` before each but the first), then
        end them together (``before_temp`` before each name). A write that
        fails is left to ``put``; what ``before_temp`` raises stops the pass, the temps
        not yet named dropped."""
        halted: list[BaseException] = []

        def before_name() -> None:
            try:
                self.next_in_group()
            except BaseException as exc:
                halted.append(exc)  # not a failed write: raised past the suppression below
                raise

        for index, step in enumerate(writes):
            if index:
                self.next_in_group()
            # a failed begin is left to ``put``, which writes the step on its own
            with contextlib.suppress(PromoterError, OSError):
                self.apply.begin(step.seq, step.path, step.new, step.source(), step.temp)
        with contextlib.suppress(PromoterError, OSError):  # named before it: still staged
            self.apply.end_begun(before_name)
        if halted:
            raise halted[0]

    def put(self, step: Step) -> None:
        """Put ``step`` in place over exactly ``step.old``: its temp staged by
        ``write_grouped`` when it has one, else written or removed on its own now
        (``step``); its directory is synced later (``sync_touched``).

        Raises what stopped it, as it was raised; bytes kept on the way are in ``kept``.
        """
        if step.seq not in self.apply.staged:
            self.step(step, sync=False)
            return
        try:
            self.apply.place(step.seq, step.old, step.new)
        except PromoterError as exc:
            self.kept.extend(exc.context.get("kept", []))
            raise

    def sync(self, seq: int) -> None:
        """fsync the directory of step ``seq`` now."""
        self.apply.sync(seq)

    def read_states(self, paths: list[str]) -> list[LeafState | PromoterError]:
        """What is at each of ``paths`` (names on disk) now, through the pass's held
        directories: as ``Root.read_state`` reads it, a refusal in the path's place."""
        return self.apply.read_states(paths)

    def read_state(self, path: str) -> LeafState:
        """What is at ``path`` now, as ``read_states``; a refusal is raised."""
        [found] = self.apply.read_states([path])
        if isinstance(found, PromoterError):
            raise found
        return found

    def hold(self, step: Step) -> bool:
        """Hold ``step``'s directory, unchanged, for ``sync_touched`` (a step an earlier pass
        carried out); False when the directory is gone."""
        return self.apply.hold(step.seq, step.path)

    def sync_touched(self) -> None:
        """Sync every directory the pass touched, once each (``Applier.fsync``: one
        ``syncfs`` where the pass has a group sync); a failure is raised."""
        self.apply.fsync()

    def close(self) -> None:
        """Close every directory the pass held, once."""
        if not self._closed:
            self._closed = True
            self.apply.close()


def remove_empty_dirs(
    root: Root, directories: Iterable[str], *, disk: Callable[[str], str] | None = None
) -> list[str]:
    """Remove each directory that is empty now, deepest first; the ones removed, as given.

    ``disk`` maps a directory as given (e.g. journaled, in wire form) to its name on
    disk. Nothing that is not empty is ever removed; a failure is logged and skipped.
    """
    removed: list[str] = []
    for directory in sorted(set(directories), key=lambda d: (d.count("/"), d), reverse=True):
        try:
            if root.remove_dir_if_empty(directory if disk is None else disk(directory)):
                removed.append(directory)
        except (PromoterError, OSError) as exc:
            log.warning("could not remove directory %s: %s", directory, exc)
    return removed
