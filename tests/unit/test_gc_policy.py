"""``tune_for_serving`` freezes start-up objects and raises the collector's thresholds."""

from __future__ import annotations

import gc

import pytest

from promoter.api import gc_policy


def test_tune_for_serving_freezes_and_restore_undoes_it() -> None:
    before = gc.get_threshold()
    previous = gc_policy.tune_for_serving()
    try:
        assert previous == before
        assert gc.get_threshold() == gc_policy.THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc_policy.restore(previous)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_pauses_nest_and_overlap_and_collection_resumes_after_the_last() -> None:
    assert gc.isenabled()
    first = gc_policy.paused()
    second = gc_policy.paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()  # a second submission begins while the first runs
    first.__exit__(None, None, None)  # the first ends before the second
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_pause_ended_by_an_error_still_resumes_collection() -> None:
    with pytest.raises(RuntimeError), gc_policy.paused():
        assert not gc.isenabled()
        raise RuntimeError("verification failed")
    assert gc.isenabled()


def test_a_pause_leaves_collection_off_when_it_was_off() -> None:
    gc.disable()
    try:
        with gc_policy.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
