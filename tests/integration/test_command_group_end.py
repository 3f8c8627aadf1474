"""A command's process group is killed once, when the command ends: while its first
process is still unreaped (its number its own), never after the reap, when the number
may already be another process's group (protocol: runs#confinement).

The stem and ``_wait`` run real processes on a real pane; the kill is watched by a
wrapper around ``os.killpg`` that reads the leader's state in ``/proc`` at each call.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from promoter.executor import confine, pane
from tests.integration.test_confine_stem import _env, _limited

_BOUND = 60.0  # seconds the left process may take to end before the test fails


def _state(pid: int) -> str | None:
    """The process's state letter in ``/proc`` (``Z`` for an unreaped one), None once reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rpartition(")")[2].split()[0]


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str | None]]:
    """Each ``killpg`` made: the group and its leader's state at that moment."""
    made: list[tuple[int, str | None]] = []
    real = os.killpg

    def watched(pgid: int, number: int) -> None:
        made.append((pgid, _state(pgid)))
        real(pgid, number)

    monkeypatch.setattr(os, "killpg", watched)
    return made


def _gone(pid: int) -> None:
    deadline = time.monotonic() + _BOUND
    while _state(pid) not in (None, "Z"):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.01)  # polls a condition that only grows


SCRIPT = "sleep 300 & echo $! > left; exit 3"  # leaves a process in its group


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_a_command_s_group_is_killed_once_before_its_first_process_is_reaped(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kills: list[tuple[int, str | None]],
    pidfd: bool,
) -> None:
    if not pidfd:  # a kernel without pidfd_open: the end is polled, never reaped by the poll
        monkeypatch.setattr(pane, "_pidfd", lambda pid: None)
    code = confine._wait(["/bin/sh", "-c", SCRIPT], _env(), tmp_path, 60)
    assert code == 3
    [(group, state)] = kills
    assert state == "Z"  # ended, not yet reaped: the number still its own
    _gone(int((tmp_path / "left").read_text()))  # what it left in its group was killed


def test_a_stem_s_group_is_killed_once_before_its_first_process_is_reaped(
    tmp_path: Path, kills: list[tuple[int, str | None]]
) -> None:
    with confine.Stem(confine.Limits().procs) as stem:
        code = stem.run(_limited(stem.go, SCRIPT), _env(), tmp_path, 60)
    assert code == 3
    [(group, state)] = kills
    assert state == "Z"
    _gone(int((tmp_path / "left").read_text()))
