"""``tune_for_serving`` freezes start-up objects and raises the collector's thresholds."""

from __future__ import annotations

import gc

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
