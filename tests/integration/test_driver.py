"""The one driver of every pass that writes a worktree (``promoter.engine.operation.driver``).

A pass holds each directory once across all its steps, whichever the ordering (a
rollback and a restore now too, not one walk per step); a promotion's pass stops
between two steps when the daemon stops and drops the temps it staged; the
directories a pass made or emptied are removed once, deepest first, only when empty;
``errors.translated`` lets a promoter error through and wraps an ``OSError``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from pathlib import Path

import pytest

from promoter.domain.path_state import MISSING, State
from promoter.domain.paths import temp_name
from promoter.domain.plan import Move, Ordering
from promoter.engine.operation.driver import Driver, Step, remove_empty_dirs
from promoter.errors import PromoterError, TargetDrift, WriteFailed, translated
from promoter.fs.leaf import TEMP_PREFIX
from promoter.fs.root import Root


def state(data: bytes) -> State:
    return State(True, hashlib.sha256(data).hexdigest(), "100644")


def write(seq: int, path: str, data: bytes, old: State = MISSING) -> Step:
    return Step.between(seq, path, old, state(data), temp_name("op_drv", 1, seq), lambda: data)


def _no_temps(work: Path) -> None:
    assert not [p for p in work.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def test_a_step_by_step_pass_walks_to_each_directory_once(root: Root, work: Path) -> None:
    (work / "pkg").mkdir()
    (work / "pkg/gone.txt").write_bytes(b"gone")
    with Driver(root, Ordering.STEP_BY_STEP) as driver:
        assert driver.step(write(0, "pkg/a.txt", b"a"))
        assert driver.step(write(1, "pkg/b.txt", b"b"))
        removal = Step.between(
            2, "pkg/gone.txt", state(b"gone"), MISSING, temp_name("op_drv", 1, 9)
        )
        assert removal.move is Move.REMOVE
        assert driver.step(removal)
    assert root.walks == 1  # before: one Applier, and one walk, per step
    assert sorted(os.listdir(work / "pkg")) == ["a.txt", "b.txt"]
    _no_temps(work)


def test_a_step_by_step_pass_reports_the_directories_a_step_made(root: Root, work: Path) -> None:
    with Driver(root, Ordering.STEP_BY_STEP) as driver:
        driver.step(write(0, "x/y/new.txt", b"n"), sync=False)
        driver.step(write(1, "x/y/other.txt", b"o"), sync=False)
        assert driver.created_at(0) == ["x", "x/y"]
        assert driver.created_at(1) == []
        assert driver.created_dirs == ["x", "x/y"]
    assert (work / "x/y/new.txt").read_bytes() == b"n"


def test_a_removal_of_what_is_already_gone_changes_nothing(root: Root) -> None:
    with Driver(root, Ordering.STEP_BY_STEP) as driver:
        gone = Step.between(0, "no/such.txt", state(b"x"), MISSING, temp_name("op_drv", 1, 9))
        assert not driver.step(gone, gone_ok=True)


def test_a_failed_step_raises_as_it_was_raised(root: Root, work: Path) -> None:
    (work / "a.txt").write_bytes(b"someone else's")
    with Driver(root, Ordering.STEP_BY_STEP) as driver, pytest.raises(TargetDrift):
        driver.step(write(0, "a.txt", b"new", old=state(b"old")))
    assert (work / "a.txt").read_bytes() == b"someone else's"
    _no_temps(work)


def test_stage_then_place_in_order(root: Root, work: Path) -> None:
    steps = [write(0, "d/a.txt", b"a"), write(1, "d/b.txt", b"b")]
    driver = Driver(root, Ordering.STAGE_THEN_PLACE)
    for step in steps:
        driver.stage(step)
    driver.end_staging()
    passed = driver.place_all(steps, check=lambda: None, stopping=threading.Event())
    assert (passed.applied, passed.failure, passed.stopped) == ([0, 1], None, False)
    assert (work / "d/a.txt").read_bytes() == b"a" and (work / "d/b.txt").read_bytes() == b"b"
    _no_temps(work)


def test_a_stop_between_two_steps_drops_what_was_staged(root: Root, work: Path) -> None:
    steps = [write(0, "a.txt", b"a"), write(1, "b.txt", b"b")]
    driver = Driver(root, Ordering.STAGE_THEN_PLACE)
    for step in steps:
        driver.stage(step)
    driver.end_staging()
    stopping = threading.Event()
    stopping.set()
    passed = driver.place_all(steps, check=lambda: None, stopping=stopping)
    assert (passed.applied, passed.failure, passed.stopped) == ([], None, True)
    assert not (work / "a.txt").exists() and not (work / "b.txt").exists()
    _no_temps(work)


def test_a_failed_place_is_the_failure_of_its_step(root: Root, work: Path) -> None:
    steps = [write(0, "a.txt", b"a"), write(1, "b.txt", b"b")]
    driver = Driver(root, Ordering.STAGE_THEN_PLACE)
    for step in steps:
        driver.stage(step)
    driver.end_staging()
    (work / "b.txt").write_bytes(b"the person's")  # b.txt was expected missing
    passed = driver.place_all(steps, check=lambda: None, stopping=threading.Event())
    assert passed.applied == [0]
    assert passed.failure is not None and passed.failure[0] == 1
    assert isinstance(passed.failure[1], TargetDrift)
    assert (work / "b.txt").read_bytes() == b"the person's"
    _no_temps(work)


def test_empty_directories_are_removed_deepest_first_and_only_when_empty(
    root: Root, work: Path
) -> None:
    (work / "a/b/c").mkdir(parents=True)
    (work / "keep/inner").mkdir(parents=True)
    (work / "keep/file.txt").write_bytes(b"kept")
    removed = remove_empty_dirs(root, ["a", "a/b/c", "a/b", "keep", "keep/inner", "missing"])
    assert removed == ["a/b/c", "keep/inner", "a/b", "a"]
    assert sorted(os.listdir(work)) == ["keep"]
    assert (work / "keep/file.txt").read_bytes() == b"kept"


def test_translated_lets_promoter_errors_through_and_wraps_os_errors() -> None:
    drift = TargetDrift("changed")
    with pytest.raises(TargetDrift) as through, translated():
        raise drift
    assert through.value is drift
    with pytest.raises(WriteFailed) as wrapped, translated():
        raise OSError(errno.EIO, "input/output error")
    assert isinstance(wrapped.value.__cause__, OSError)
    with pytest.raises(ValueError), translated():
        raise ValueError("not translated")
    with pytest.raises(PromoterError), translated(default=PromoterError):
        raise OSError(errno.EIO, "input/output error")
