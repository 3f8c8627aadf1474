"""The planners: what to do with each step, from the journal and what the disk holds now.

Pure functions, no I/O. The engine observes (reads every target through the fs layer,
settles the journaled temp names), hands the facts to a planner, and carries the plan out
(``promoter.engine.operation.apply`` and the kind's own module). The rules
(protocol: recovery#recovery, recovery#rollback) are written once, here:

- ``journal_steps``: the steps an attempt journals before anything is written, each with
  its temp name (``.promoter-tmp-<operation>-<attempt>-<seq>``); the same for every kind.
- ``recover_promotion``: a target exactly new is confirmed; exactly old and not yet
  completed is applied; anything else (neither, or old although the journal says the step
  completed: someone changed it back) fails closed, and so does a path at whose temp name
  someone else's bytes were kept. One failing step blocks the whole plan.
- ``recover_restore``: exactly new is confirmed and everything else is applied again, but
  any path that is neither, or any kept bytes, blocks the whole plan (nothing is written).
- ``Move`` and ``Ordering``: the typed move of one step and how a pass orders its
  writes, which the one driver (``promoter.engine.operation.driver``) carries out.
- ``rollback_target``: a compare-and-swap back to the promotion's old state: already old
  is ``restored`` (this rollback did it before a crash) or ``already_old``; exactly the
  promotion's new state is written back; anything else is a ``conflict`` and untouched.

Deliberately not here: reading, writing or journaling (the engine's), and whether an
operation may be recovered at all (``promoter.domain.status.guard``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from promoter.domain.path_state import Verdict
from promoter.domain.paths import temp_name
from promoter.domain.status import StepStatus

__all__ = [
    "Action",
    "Decision",
    "Move",
    "Observation",
    "Ordering",
    "Plan",
    "RollbackMove",
    "journal_steps",
    "recover_promotion",
    "recover_restore",
    "rollback_target",
]


class Move(StrEnum):
    """What the driver does at one step's path (``promoter.engine.operation.driver``)."""

    WRITE = "write"  # the new bytes in place over exactly the old state
    REMOVE = "remove"  # exactly the old state moved aside and unlinked

    @classmethod
    def to(cls, new_exists: bool) -> Move:
        """The move that reaches a new state that exists (a write) or does not (a removal)."""
        return cls.WRITE if new_exists else cls.REMOVE


class Ordering(StrEnum):
    """How one pass orders its writes."""

    STAGE_THEN_PLACE = "stage_then_place"  # a promotion: every temp first, then in order
    STEP_BY_STEP = "step_by_step"  # a rollback, a restore: each step written, then read back


class Decision(StrEnum):
    """An operator's decision on a ``needs_reconciliation`` operation
    (protocol: recovery#reconciliation)."""

    CONTINUE = "continue"
    ROLLBACK = "rollback"
    ABANDON = "abandon"


class Action(StrEnum):
    CONFIRM = "confirm"
    APPLY = "apply"
    FAIL_CLOSED = "fail_closed"


@dataclass(frozen=True)
class Observation:
    """One step as recovery finds it: what the path reads as, the journal, kept bytes."""

    verdict: Verdict  # a path that could not be read is NEITHER
    step: StepStatus
    kept: bool = False  # someone else's bytes were kept at this step's temp name


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]

    @property
    def blocked(self) -> bool:
        return Action.FAIL_CLOSED in self.actions

    @property
    def todo(self) -> set[int]:
        return {seq for seq, action in enumerate(self.actions) if action is Action.APPLY}


def journal_steps(
    operation_id: str, attempt: int, steps: Iterable[tuple[str, str, Any, Any]]
) -> list[dict[str, Any]]:
    """The journal rows of an attempt: ``(path, operation, old, new)`` plus each temp name."""
    return [
        {
            "path": path,
            "operation": operation,
            "old": old,
            "new": new,
            "temp_name": temp_name(operation_id, attempt, seq),
        }
        for seq, (path, operation, old, new) in enumerate(steps)
    ]


def _recover_one(seen: Observation) -> Action:
    if seen.kept:
        return Action.FAIL_CLOSED
    if seen.verdict is Verdict.NEW:
        return Action.CONFIRM
    if seen.verdict is Verdict.OLD and seen.step is not StepStatus.COMPLETED:
        return Action.APPLY
    return Action.FAIL_CLOSED


def recover_promotion(observations: Sequence[Observation]) -> Plan:
    """The recovery table for a promotion, per step (protocol: recovery#recovery)."""
    return Plan(tuple(_recover_one(seen) for seen in observations))


def _blocks_restore(seen: Observation) -> bool:
    return seen.kept or seen.verdict is Verdict.NEITHER


def recover_restore(observations: Sequence[Observation]) -> Plan:
    """A restore: everything not new is applied again, unless anything blocks."""
    blocked = any(_blocks_restore(seen) for seen in observations)

    def action(seen: Observation) -> Action:
        if _blocks_restore(seen):
            return Action.FAIL_CLOSED
        if seen.verdict is Verdict.NEW or blocked:
            return Action.CONFIRM
        return Action.APPLY

    return Plan(tuple(action(seen) for seen in observations))


class RollbackMove(StrEnum):
    RESTORED = "restored"
    ALREADY_OLD = "already_old"
    WRITE_OLD = "write_old"
    CONFLICT = "conflict"


def rollback_target(at_old: bool, at_new: bool, *, held: bool, completed: bool) -> RollbackMove:
    """One target of a rollback: ``at_old``/``at_new`` say what it reads as exactly now.

    ``held``: someone else's bytes were kept at this target's temp name (a conflict);
    ``completed``: the rollback's journal says an earlier pass restored it, or journaled
    it as about to be written back.
    """
    if held:
        return RollbackMove.CONFLICT
    if at_old:
        return RollbackMove.RESTORED if completed else RollbackMove.ALREADY_OLD
    if at_new:
        return RollbackMove.WRITE_OLD
    return RollbackMove.CONFLICT
