"""``LiveAttempts``: which operations a thread of this process runs; nothing leaks."""

from __future__ import annotations

import pytest

from promoter.engine.liveness import LiveAttempts


def test_nested_runs_of_one_operation_keep_it_live_until_the_last_ends() -> None:
    live = LiveAttempts()
    with live.running("op_a"):
        live.enter("op_a")  # the attempt's own entry, left when it ends
        assert live.now() == frozenset({"op_a"})
    assert live.has("op_a")
    live.leave("op_a")
    assert live.now() == frozenset()


def test_an_error_in_the_block_never_leaves_an_operation_live() -> None:
    live = LiveAttempts()
    with pytest.raises(RuntimeError), live.running("op_a"):
        raise RuntimeError("the request failed")
    assert not live.has("op_a")


def test_handed_on_operations_stay_live_for_their_starter_unless_the_block_fails() -> None:
    live = LiveAttempts()
    with live.handed_on() as adopt:
        adopt("op_started")
    assert live.has("op_started")  # the caller submits its attempt, then leaves it
    live.leave("op_started")
    with pytest.raises(RuntimeError), live.handed_on() as adopt:
        adopt("op_never_committed")
        raise RuntimeError("the commit failed")
    assert live.now() == frozenset()
