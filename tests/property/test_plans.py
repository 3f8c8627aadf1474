"""The planners of ``promoter.domain.plan`` against the tables of recovery and rollback
(protocol: recovery#recovery, recovery#rollback).

Exhaustive over every combination of observed verdict, journaled step status and kept
bytes (hypothesis draws whole operations of up to eight steps), checked against the table
written out independently here, plus the CAS rule of a rollback for every observed state.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from promoter.domain.path_state import MISSING, State, Verdict, classify
from promoter.domain.plan import (
    Action,
    Observation,
    RollbackMove,
    journal_steps,
    recover_promotion,
    recover_restore,
    rollback_target,
)
from promoter.domain.status import StepStatus

observations = st.builds(
    Observation, st.sampled_from(Verdict), st.sampled_from(StepStatus), st.booleans()
)

# recovery of a promotion (protocol: recovery#recovery): (found, journaled step) -> action
PROMOTION_TABLE = {
    (Verdict.NEW, StepStatus.PENDING): Action.CONFIRM,
    (Verdict.NEW, StepStatus.COMPLETED): Action.CONFIRM,
    (Verdict.NEW, StepStatus.FAILED): Action.CONFIRM,
    (Verdict.OLD, StepStatus.PENDING): Action.APPLY,
    (Verdict.OLD, StepStatus.FAILED): Action.APPLY,
    (Verdict.OLD, StepStatus.COMPLETED): Action.FAIL_CLOSED,  # changed back by someone
    (Verdict.NEITHER, StepStatus.PENDING): Action.FAIL_CLOSED,
    (Verdict.NEITHER, StepStatus.COMPLETED): Action.FAIL_CLOSED,
    (Verdict.NEITHER, StepStatus.FAILED): Action.FAIL_CLOSED,
}


@given(st.lists(observations, max_size=8))
def test_promotion_recovery_follows_the_table(seen: list[Observation]) -> None:
    plan = recover_promotion(seen)
    for obs, action in zip(seen, plan.actions, strict=True):
        expected = Action.FAIL_CLOSED if obs.kept else PROMOTION_TABLE[(obs.verdict, obs.step)]
        assert action is expected
    assert plan.blocked == any(a is Action.FAIL_CLOSED for a in plan.actions)
    assert plan.todo == {i for i, a in enumerate(plan.actions) if a is Action.APPLY}


@given(st.lists(observations, max_size=8))
def test_restore_recovery_writes_nothing_when_anything_blocks(seen: list[Observation]) -> None:
    plan = recover_restore(seen)
    blocked = any(o.kept or o.verdict is Verdict.NEITHER for o in seen)
    assert plan.blocked == blocked
    if blocked:
        assert plan.todo == set()
    else:
        assert plan.todo == {i for i, o in enumerate(seen) if o.verdict is not Verdict.NEW}


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_rollback_cas_touches_only_promoters_own_new_state(
    at_old: bool, at_new: bool, held: bool, completed: bool
) -> None:
    move = rollback_target(at_old, at_new, held=held, completed=completed)
    if held:
        assert move is RollbackMove.CONFLICT
    elif at_old:
        assert move is (RollbackMove.RESTORED if completed else RollbackMove.ALREADY_OLD)
    elif at_new:
        assert move is RollbackMove.WRITE_OLD
    else:
        assert move is RollbackMove.CONFLICT
    # the only move that writes is from exactly the promotion's new state
    assert (move is RollbackMove.WRITE_OLD) == (at_new and not at_old and not held)


class _Leaf:
    def __init__(self, kind: str, sha256: str | None = None, mode: str | None = None) -> None:
        self.kind, self.sha256, self.mode = kind, sha256, mode


shas = st.sampled_from(["a" * 64, "b" * 64, "c" * 64])
modes = st.sampled_from(["100644", "100755"])
states = st.one_of(st.just(MISSING), st.builds(State, st.just(True), shas, modes))
leaves = st.one_of(
    st.builds(_Leaf, st.sampled_from(["missing", "directory", "symlink", "special"])),
    st.builds(_Leaf, st.just("file"), shas, modes),
)


@given(leaves, states, states)
def test_classify_is_exact_and_new_wins(leaf: _Leaf, old: State, new: State) -> None:
    reading = classify(leaf, old, new)

    def exactly(state: State) -> bool:
        if not state.exists:
            return leaf.kind == "missing"
        return (leaf.kind, leaf.sha256, leaf.mode) == ("file", state.sha256, state.mode)

    if exactly(new):
        assert reading.verdict is Verdict.NEW
    elif exactly(old):
        assert reading.verdict is Verdict.OLD
    else:
        assert reading.verdict is Verdict.NEITHER
        assert reading.reason


def test_state_of_every_form_is_the_same_state() -> None:
    wire = {"exists": True, "sha256": "a" * 64, "mode": "100644", "bytes": 3, "blob_ref": None}
    assert State.of(wire) == State(True, "a" * 64, "100644") == State.of(State.of(wire))
    assert State.of(wire).wire() == {"exists": True, "sha256": "a" * 64, "mode": "100644"}


def test_journal_steps_name_each_temp_by_operation_attempt_and_seq() -> None:
    rows = journal_steps("op_" + "1" * 32, 3, [("a", "create", MISSING, MISSING)] * 2)
    assert [r["temp_name"] for r in rows] == [
        ".promoter-tmp-op_" + "1" * 32 + "-3-0",
        ".promoter-tmp-op_" + "1" * 32 + "-3-1",
    ]
