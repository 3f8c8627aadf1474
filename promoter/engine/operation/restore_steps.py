"""Carrying out the per-file steps of a snapshot restore, and journaling how it ended.

This module owns ``Step`` (one path: its journaled old and new FileState and the target
blob in the shadow repository) and ``StepRun``: the writes of one pass, step by step
through the one driver (``promoter.engine.operation.driver``, one ``Applier`` for the
pass) with a per-file compare-and-swap, in this order: checked unlinks,
then the directories those unlinks left empty that the target tree does not hold (only
those: ``rmdir`` removes nothing that is not empty), then the directories the writes
will create are journaled (``promoter.engine.operation.dirs``), then creations and
modifications (a temp file with the blob's bytes, the temps of up to ``TEMPS_TOGETHER``
consecutive ones made durable together before the first is named, each atomically put in
place only over the expected old state), then every directory they touched synced once.
``finish`` reads every step back (one reading pass through held directories) and
journals the outcome: ``completed`` when every path is exactly new, ``refused`` when a
compare-and-swap failed before anything changed, else ``needs_reconciliation`` with a
per-path report.

Deliberately not here: deciding what to restore, the lock and the stale check
(``promoter.engine.operation.restore``), and git (``promoter.git.shadow`` supplies blobs).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypedDict

from promoter.domain.path_state import State, Verdict, classify
from promoter.domain.paths import temp_name, wire_all, wire_path
from promoter.domain.plan import Ordering
from promoter.domain.status import OperationStatus, StepStatus
from promoter.engine import fencing
from promoter.engine.operation import fenced
from promoter.engine.operation.dirs import journal_intent
from promoter.engine.operation.driver import TEMPS_TOGETHER, Driver, Target, remove_empty_dirs
from promoter.engine.operation.driver import Step as Planned
from promoter.engine.operation.settle import newly_kept
from promoter.engine.ports import Writing
from promoter.errors import HostFenced, PromoterError, TargetDrift, translated
from promoter.fs.aside import KeptEntry
from promoter.fs.chain import LeafState
from promoter.fs.held import Directories
from promoter.fs.leaf import LeafReport
from promoter.fs.lock import RepoLock
from promoter.fs.root import Root
from promoter.git.objects import CatFile
from promoter.git.shadow import ShadowRepository
from promoter.store import journal

__all__ = ["Step", "StepRun", "dir_key", "verdict_of"]

log = logging.getLogger("promoter.restore")


class RestoreState(TypedDict):
    """A restore step's old or new state, from the git trees (no blob reference)."""

    exists: bool
    sha256: str | None
    mode: str | None
    bytes: int | None
    blob_ref: None


@dataclass(frozen=True)
class Step:
    path: str
    operation: str
    old: RestoreState
    new: RestoreState
    oid: str | None  # the target blob; None for a delete

    @property
    def shown(self) -> str:
        """The path as journals and reports carry it (bytes that are not UTF-8 as ``\\xNN``)."""
        return wire_path(self.path)


def dir_key(path: str) -> tuple[bytes, bytes]:
    directory, _, name = path.rpartition("/")
    return os.fsencode(directory), os.fsencode(name)


def verdict_of(leaf: LeafState, step: Step) -> Verdict:
    return classify(leaf, step.old, step.new).verdict


_GONE: LeafReport = {"kind": "missing", "sha256": None, "mode": None, "size": None}


@dataclass
class StepRun:
    """One pass over a restore's steps under the repository lock, and its outcome."""

    services: Writing
    operation_id: str
    root: Root
    lock: RepoLock
    shadow: ShadowRepository
    target: str
    steps: list[Step]
    touched: bool = False  # whether anything in the worktree may have changed
    done: int = 0  # the steps this pass carried out (deleted, or put in place)
    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failure: PromoterError | None = None
    attempt: int = 1
    kept: list[KeptEntry] = field(default_factory=list)
    _target_dirs: set[str] | None = None
    _seqs: dict[str, int] | None = None
    _driver: Driver | None = None  # the pass's, while one is open
    _reads: Directories | None = None  # the held directories of ``reading``, while open

    def temp(self, step: Step) -> str:
        """The journaled temp name of ``step`` (its index among the steps) in this attempt."""
        if self._seqs is None:
            self._seqs = {s.path: i for i, s in enumerate(self.steps)}
        return temp_name(self.operation_id, self.attempt, self._seqs[step.path])

    @property
    def target_dirs(self) -> set[str]:
        """Every directory of the target tree (read once)."""
        if self._target_dirs is None:
            self._target_dirs = self.shadow.tree_dirs(self.target)
        return self._target_dirs

    def verdict(self, step: Step) -> tuple[Verdict, LeafReport]:
        """``new``, ``old`` or ``neither`` for the path now, and what was found.

        A deleted file's path that is now a directory of the target tree, or lies below
        a file of the target, holds no file: that is its new state.
        """
        try:
            leaf = self._read(step.path)
        except TargetDrift as exc:
            if not step.new["exists"] and exc.context.get("found") == "not_a_directory":
                return Verdict.NEW, _GONE.copy()
            raise
        verdict = verdict_of(leaf, step)
        if verdict is Verdict.NEITHER and leaf.kind == "directory" and not step.new["exists"]:
            verdict = Verdict.NEW if step.path in self.target_dirs else verdict
        return verdict, leaf.to_dict()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Every read of ``verdict`` in the block goes through one reading pass (each
        directory walked to once, every chain re-checked, every leaf verified after
        reading: ``promoter.fs.held.Directories``)."""
        if self._reads is not None:
            yield
            return
        with closing(Directories.for_reads(self.root)) as held:
            self._reads = held
            try:
                yield
            finally:
                self._reads = None

    def _read(self, path: str) -> LeafState:
        return (self.root if self._reads is None else self._reads).read_state(path)

    def _planned(self, step: Step, data: Callable[[], bytes] | None = None) -> Planned:
        """``step`` as the driver's typed step (its seq: its index among the steps)."""
        self.temp(step)
        assert self._seqs is not None
        seq = self._seqs[step.path]
        old, new = State.of(step.old), State.of(step.new)
        return Planned.between(seq, step.path, old, new, self.temp(step), data)

    @contextmanager
    def _pass(self) -> Iterator[Driver]:
        """The driver of this pass: the one open, or one opened (and closed) here."""
        if self._driver is not None:
            yield self._driver
            return
        limit = self.services.settings.group_sync_limit
        driver = self._driver = Driver(
            self.root,
            Ordering.STEP_BY_STEP,
            group_sync_limit=limit,
            # protocol: promotion#fence-stops-every-write
            between_groups=functools.partial(fencing.check, self.services.db),
            before_temp=functools.partial(
                fencing.check_unless_leased, self.services.db, self.services.host
            ),
        )
        try:
            yield driver
        finally:
            self._driver = None
            driver.close()
            self.created.extend(driver.created_dirs)

    def apply(self, todo: set[int]) -> str:
        """Carry out the steps in ``todo``, read back every step, journal the outcome.

        One driver pass for all of them: each directory is walked to once.
        """
        deletes = [s for i, s in enumerate(self.steps) if i in todo and s.operation == "delete"]
        writes = [s for i, s in enumerate(self.steps) if i in todo and s.operation != "delete"]
        driver: Driver | None = None
        try:
            with self._pass() as driver, translated():
                self.lock.check_held()
                _grouped(deletes, self._delete, self._open_group, self._next_in_group)
                self._remove_emptied([s for s in self.steps if s.operation == "delete"])
                paths = [s.path for s in writes]
                journal_intent(self.services.db, self.operation_id, self.root, paths)
                self._hold_confirmed(todo)
                with self.shadow.reader() as cat:
                    self._write_all(cat, writes)
        except HostFenced as exc:  # its own temps removed, said in the answer as a promotion's
            assert driver is not None
            raise fenced.stand_down(
                log,
                self.operation_id,
                driver,
                exc,
                doing="restoring",
                done=f"restored {self.done} of its targets",
            ) from None
        except PromoterError as exc:
            self.failure = exc
            if exc.context.get("kept"):
                self.touched = True
        return self.finish()

    def _open_group(self) -> None:
        with self._pass() as driver:
            driver.open_group()

    def _next_in_group(self) -> None:
        with self._pass() as driver:
            driver.next_in_group()

    def _delete(self, step: Step, sync: bool) -> None:
        with self._pass() as driver:
            planned = self._planned(step)
            if driver.step(planned, sync=False, gone_ok=True):
                self.touched = True  # already gone, with its directory, when False
                if sync:
                    driver.sync(planned.seq)
            self.done += 1

    def _remove_emptied(self, deletes: list[Step]) -> None:
        """rmdir the deleted files' directories that are now empty and not in the target.

        All delete steps count, also those a crashed earlier pass carried out.
        """
        parts = [step.path.split("/")[:-1] for step in deletes]
        candidates = {"/".join(p[: i + 1]) for p in parts for i in range(len(p))}
        candidates -= self.target_dirs if candidates else set()
        removed = remove_empty_dirs(self.root, candidates)
        self.removed.extend(removed)
        self.touched = self.touched or bool(removed)

    def _hold_confirmed(self, todo: set[int]) -> None:
        """Hold the directories of the steps not in ``todo`` (a recovery confirms them: an
        earlier pass put them in place, and its sync may never have run), so the pass's
        one sync of every directory covers them; a directory that is gone, or cannot be
        held safely, is left to the read-back."""
        with self._pass() as driver:
            for index, step in enumerate(self.steps):
                if index not in todo:
                    with contextlib.suppress(PromoterError):
                        driver.hold(self._planned(step))

    def _write_all(self, cat: CatFile, writes: list[Step]) -> None:
        """Every write, in order, each put in place over exactly its old state, their temps
        staged in groups (``Driver.write_grouped``), then every touched directory synced
        once. The first failure stops the pass; no temp of promoter's is left staged."""
        planned = [self._planned(step, _blob(cat, step)) for step in writes]
        with self._pass() as driver:

            def each(step: Planned) -> None:
                driver.put(step)
                self.touched = True
                self.done += 1

            try:
                driver.write_grouped(planned, each)
            finally:  # a directory a staged temp made counts, even when its step never ran
                made = any(driver.created_at(step.seq) for step in planned)
                self.touched = self.touched or made
            driver.sync_touched()

    def finish(self) -> str:
        """Read every step back; ``completed``, ``refused`` or ``needs_reconciliation``."""
        verdicts: list[Verdict] = []
        problems: list[Target] = []
        with self.reading():
            for step in self.steps:
                actual: Mapping[str, Any]
                try:
                    verdict, actual = self.verdict(step)
                except PromoterError as exc:
                    verdict, actual = Verdict.NEITHER, {"error": exc.code, "detail": exc.detail}
                verdicts.append(verdict)
                if verdict is not Verdict.NEW:
                    problems.append(Target(step.shown, verdict, actual, step.old, step.new))
        ok = self.failure is None and not problems and not newly_kept(self.kept)
        # a step that reads back as new was written by this pass (a fresh restore plans
        # only paths that differ), even when the write then failed after its rename
        touched = self.touched or Verdict.NEW in verdicts
        status = (
            OperationStatus.COMPLETED
            if ok
            else OperationStatus.NEEDS_RECONCILIATION
            if touched
            else OperationStatus.REFUSED
        )
        error = None if ok else self.failure or TargetDrift("a target did not read back as new")
        with journal.attempt(self.services.db, self.operation_id) as j:
            row = j.row
            statuses = {
                step.seq: {Verdict.NEW: StepStatus.COMPLETED, Verdict.OLD: StepStatus.PENDING}.get(
                    verdict, StepStatus.FAILED
                )
                for step, verdict in zip(j.steps(), verdicts, strict=True)
            }
            j.set_steps(statuses)
            created, removed = wire_all(self.created), wire_all(self.removed)
            j.add_created_dirs(created)
            dirs = {"removed_directories": removed, "created_directories": created}
            code, detail = (error.code, wire_path(error.detail)) if error else (None, None)
            payload = {"status": status, "code": code, **dirs}
            outcome = j.event("outcome", payload)
            paths = [p.wire() for p in problems]
            report = {**(row.report or {}), "paths": paths, **dirs}
            j.set_outcome_event(outcome)
            if error is not None:
                report["error"] = {"code": code, "detail": detail}
            kept = [*self.kept, *(self.failure.context.get("kept", []) if self.failure else [])]
            if kept:
                report["kept"] = wire_all(kept)
            report = wire_all(report)
            j.set_status(status, code=code, detail=detail, report=report)
        return status


def _grouped(
    steps: list[Step],
    run: Callable[[Step, bool], None],
    open_group: Callable[[], None],
    next_in_group: Callable[[], None],
) -> None:
    """Run each step; ``sync`` is true on the last step in each directory (one fsync).
    ``open_group`` runs before every ``TEMPS_TOGETHER`` steps (the host's epoch check from
    the second group on), ``next_in_group`` before every other step (the same check once
    the host lease may have run out; protocol: promotion#fence-stops-every-write)."""
    for index, step in enumerate(steps):
        if not index % TEMPS_TOGETHER:
            open_group()
        else:
            next_in_group()
        nxt = steps[index + 1] if index + 1 < len(steps) else None
        run(step, nxt is None or dir_key(nxt.path)[0] != dir_key(step.path)[0])


def _blob(cat: CatFile, step: Step) -> Callable[[], bytes]:
    """The target blob of ``step``, read when its temp is written."""
    oid = step.oid
    assert oid is not None
    return lambda: cat.read_blob(oid)
