"""``confine.probing``: bubblewrap's probe in the background (protocol: runs#confinement).

A fake bubblewrap stands in (a shell script), so these run without namespaces: the probe's
refusal is the one ``probe`` raises, an answer is awaited only when asked for, and a probe
nobody waited for is ended and reaped on the way out.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.errors import ConfinementUnavailable
from promoter.executor import confine


def _fake(tmp_path: Path, body: str) -> str:
    path = tmp_path / "bwrap"
    path.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_refusing_probe_raises_when_its_answer_is_asked_for(tmp_path: Path) -> None:
    fake = _fake(tmp_path, "echo 'setting up uid map: Permission denied' >&2; exit 1")
    with pytest.raises(ConfinementUnavailable) as refused, confine.probing(fake) as probed:
        probed()
    assert refused.value.code == "confinement_unavailable"
    assert "setting up uid map: Permission denied" in refused.value.detail
    assert fake not in confine._PROBED


def test_a_probe_nobody_waited_for_is_killed_and_reaped_on_the_way_out(tmp_path: Path) -> None:
    fake = _fake(tmp_path, "exec sleep 600")
    with pytest.raises(KeyError), confine.probing(fake):
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            os.sched_yield()
        raise KeyError("the lookup failed before anything was made")
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already: no longer this process's child
    assert not Path(f"/proc/{pid}").exists()
    assert fake not in confine._PROBED


def test_a_passing_probe_is_remembered_and_not_run_again(tmp_path: Path) -> None:
    fake = _fake(tmp_path, "exit 0")
    with confine.probing(fake) as probed:
        probed()
    assert fake in confine._PROBED
    (tmp_path / "pid").unlink()
    try:
        confine.probe(fake)
        assert not (tmp_path / "pid").exists()  # answered from memory: nothing started
    finally:
        confine._PROBED.discard(fake)


def test_a_missing_binary_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfinementUnavailable) as refused, confine.probing(str(tmp_path / "none")):
        raise AssertionError("entered without a binary")
    assert "apt-get install bubblewrap" in refused.value.detail
