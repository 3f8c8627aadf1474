"""Carrying out the per-file steps of a snapshot restore, and journaling how it ended.

This module owns ``Step`` (one path: its journaled old and new FileState and the target
blob in the shadow repository) and ``StepRun``: the writes of one pass through the
descriptor-chain writer with a per-file compare-and-swap, in this order: checked unlinks,
then the directories those unlinks left empty that the target tree does not hold (only
those: ``rmdir`` removes nothing that is not empty), then the directories the writes
will create are journaled (``promoter.engine.operation.dirs``), then creations and modifications (a
temp file with the blob's bytes, fsynced, atomically put in place only over the expected
old state), one directory fsync per directory. ``finish`` reads every step back and
journals the outcome: ``completed`` when every path is exactly new, ``refused`` when a
compare-and-swap failed before anything changed, else ``needs_reconciliation`` with a
per-path report.

Deliberately not here: deciding what to restore, the lock and the stale check
(``promoter.engine.operation.restore``), and git (``promoter.git.shadow`` supplies blobs).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from promoter.domain.path_state import State, classify
from promoter.domain.paths import temp_name, wire_all, wire_path
from promoter.domain.status import OperationStatus, StepStatus
from promoter.engine.operation.apply import Applier
from promoter.engine.operation.dirs import journal_intent
from promoter.engine.operation.settle import newly_kept
from promoter.engine.services import Services
from promoter.errors import PromoterError, TargetDrift, WriteFailed
from promoter.fs.chain import LeafState
from promoter.fs.lock import RepoLock
from promoter.fs.root import Root
from promoter.git.objects import CatFile
from promoter.git.shadow import ShadowRepository
from promoter.store import journal, ledger, step_rows

__all__ = ["Step", "StepRun", "dir_key", "verdict_of"]

log = logging.getLogger("promoter.restore")


@dataclass(frozen=True)
class Step:
    path: str
    operation: str
    old: dict[str, Any]
    new: dict[str, Any]
    oid: str | None  # the target blob; None for a delete

    @property
    def shown(self) -> str:
        """The path as journals and reports carry it (bytes that are not UTF-8 as ``\\xNN``)."""
        return wire_path(self.path)


def dir_key(path: str) -> tuple[bytes, bytes]:
    directory, _, name = path.rpartition("/")
    return os.fsencode(directory), os.fsencode(name)


def verdict_of(leaf: LeafState, step: Step) -> str:
    return classify(leaf, step.old, step.new).verdict.value


_GONE = {"kind": "missing", "sha256": None, "mode": None, "size": None}


@dataclass
class StepRun:
    """One pass over a restore's steps under the repository lock, and its outcome."""

    services: Services
    operation_id: str
    root: Root
    lock: RepoLock
    shadow: ShadowRepository
    target: str
    steps: list[Step]
    touched: bool = False  # whether anything in the worktree may have changed
    created: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failure: PromoterError | None = None
    attempt: int = 1
    kept: list[dict[str, Any]] = field(default_factory=list)
    _target_dirs: set[str] | None = None
    _seqs: dict[str, int] | None = None

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

    def verdict(self, step: Step) -> tuple[str, dict[str, Any]]:
        """``new``, ``old`` or ``neither`` for the path now, and what was found.

        A deleted file's path that is now a directory of the target tree, or lies below
        a file of the target, holds no file: that is its new state.
        """
        try:
            leaf = self.root.read_state(step.path)
        except TargetDrift as exc:
            if not step.new["exists"] and exc.context.get("found") == "not_a_directory":
                return "new", dict(_GONE)
            raise
        verdict = verdict_of(leaf, step)
        if verdict == "neither" and leaf.kind == "directory" and not step.new["exists"]:
            verdict = "new" if step.path in self.target_dirs else verdict
        return verdict, leaf.to_dict()

    def apply(self, todo: set[int]) -> str:
        """Carry out the steps in ``todo``, read back every step, journal the outcome."""
        deletes = [s for i, s in enumerate(self.steps) if i in todo and s.operation == "delete"]
        writes = [s for i, s in enumerate(self.steps) if i in todo and s.operation != "delete"]
        try:
            self.lock.check_held()
            _grouped(deletes, self._delete)
            self._remove_emptied([s for s in self.steps if s.operation == "delete"])
            journal_intent(self.services.db, self.operation_id, self.root, [s.path for s in writes])
            with self.shadow.reader() as cat:
                _grouped(writes, lambda step, sync: self._write(cat, step, sync))
        except (PromoterError, OSError) as exc:
            self.failure = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
            if isinstance(exc, PromoterError) and exc.context.get("kept"):
                self.touched = True
        return self.finish()

    def _delete(self, step: Step, sync: bool) -> None:
        apply = Applier(self.root)
        try:
            if apply.remove(0, step.path, State.of(step.old), self.temp(step), gone_ok=True):
                self.touched = True  # already gone, with its directory, when False
                if sync:
                    apply.sync(0)
        finally:
            apply.close()

    def _remove_emptied(self, deletes: list[Step]) -> None:
        """rmdir the deleted files' directories that are now empty and not in the target.

        All delete steps count, also those a crashed earlier pass carried out.
        """
        parts = [step.path.split("/")[:-1] for step in deletes]
        candidates = {"/".join(p[: i + 1]) for p in parts for i in range(len(p))}
        candidates -= self.target_dirs if candidates else set()
        for directory in sorted(candidates, key=lambda d: (d.count("/"), d), reverse=True):
            try:
                if self.root.remove_dir_if_empty(directory):
                    self.removed.append(directory)
                    self.touched = True
            except PromoterError as exc:
                log.warning("could not remove emptied directory %s: %s", directory, exc.detail)

    def _write(self, cat: CatFile, step: Step, sync: bool) -> None:
        assert step.oid is not None
        apply = Applier(self.root)
        old, new = State.of(step.old), State.of(step.new)
        try:
            apply.stage(0, step.path, new, cat.read_blob(step.oid), self.temp(step))
            apply.place(0, old, new)
            self.touched = True
            if sync:
                apply.sync(0)
        finally:
            held = apply.parents.get(0)
            self.touched = self.touched or bool(held is not None and held.created_dirs)
            self.created.extend(apply.created_dirs)
            apply.close()

    def finish(self) -> str:
        """Read every step back; ``completed``, ``refused`` or ``needs_reconciliation``."""
        verdicts: list[str] = []
        problems: list[dict[str, Any]] = []
        for step in self.steps:
            try:
                verdict, actual = self.verdict(step)
            except PromoterError as exc:
                verdict, actual = "neither", {"error": exc.code, "detail": exc.detail}
            verdicts.append(verdict)
            if verdict != "new":
                problems.append(
                    {
                        "path": step.shown,
                        "verdict": verdict,
                        "actual": actual,
                        "expected_old": step.old,
                        "expected_new": step.new,
                    }
                )
        ok = self.failure is None and not problems and not newly_kept(self.kept)
        # a step that reads back as new was written by this pass (a fresh restore plans
        # only paths that differ), even when the write then failed after its rename
        touched = self.touched or "new" in verdicts
        status = (
            OperationStatus.COMPLETED
            if ok
            else OperationStatus.NEEDS_RECONCILIATION
            if touched
            else OperationStatus.REFUSED
        )
        error = None if ok else self.failure or TargetDrift("a target did not read back as new")
        with self.services.db.session() as session:
            row = journal.get_operation(session, self.operation_id)
            assert row is not None
            statuses = {
                step.seq: {"new": StepStatus.COMPLETED, "old": StepStatus.PENDING}.get(
                    verdict, StepStatus.FAILED
                )
                for step, verdict in zip(
                    step_rows.steps(session, row.operation_id), verdicts, strict=True
                )
            }
            step_rows.set_steps(session, row.operation_id, statuses)
            created, removed = wire_all(self.created), wire_all(self.removed)
            step_rows.add_created_dirs(session, row.operation_id, created)
            dirs = {"removed_directories": removed, "created_directories": created}
            code, detail = (error.code, wire_path(error.detail)) if error else (None, None)
            payload = {"status": status, "code": code, **dirs}
            outcome = ledger.append(session, row.operation_id, "outcome", payload)
            report = {**(row.report or {}), "paths": problems, **dirs}
            journal.set_outcome_event(session, row.operation_id, outcome)
            if error is not None:
                report["error"] = {"code": code, "detail": detail}
            kept = [*self.kept, *(self.failure.context.get("kept", []) if self.failure else [])]
            if kept:
                report["kept"] = wire_all(kept)
            report = wire_all(report)
            journal.set_status(
                session, row.operation_id, status, code=code, detail=detail, report=report
            )
        return status


def _grouped(steps: list[Step], run: Callable[[Step, bool], None]) -> None:
    """Run each step; ``sync`` is true on the last step in each directory (one fsync)."""
    for index, step in enumerate(steps):
        nxt = steps[index + 1] if index + 1 < len(steps) else None
        run(step, nxt is None or dir_key(nxt.path)[0] != dir_key(step.path)[0])
