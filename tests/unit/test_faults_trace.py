"""``PROMOTER_FAULTS_TRACE`` records every fault point passed, in order, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter import faults


def test_points_are_recorded_in_order_without_any_fault_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.delenv(faults.ENV, raising=False)
    monkeypatch.setenv(faults.TRACE_ENV, str(trace))
    for name in ("before_replace", "after_exchange", "after_replace"):
        faults.point(name)
    assert trace.read_bytes() == b"before_replace\nafter_exchange\nafter_replace\n"


def test_a_point_that_fires_is_recorded_before_it_fires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv(faults.TRACE_ENV, str(trace))
    monkeypatch.setenv(faults.ENV, "after_exchange=EIO")
    faults.reset()
    with pytest.raises(OSError, match="injected fault at after_exchange"):
        faults.point("after_exchange")
    assert trace.read_bytes() == b"after_exchange\n"


def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(faults.TRACE_ENV, raising=False)
    monkeypatch.delenv(faults.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    faults.point("before_replace")
    assert list(tmp_path.iterdir()) == []
