"""``confine.probing``: bubblewrap's probe in the background (protocol: runs#confinement).

A fake bubblewrap stands in (a shell script), so these run without namespaces: the probe's
refusal is the one ``probe`` raises, an answer is awaited only when asked for, and a probe
nobody waited for is ended and reaped on the way out. A passing answer kept for later
processes is taken only under the conditions it was found in (the same binary above all),
never through a link, and never after it was forgotten.
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


def _kept_dir(tmp_path: Path) -> Path:
    kept = tmp_path / "runs"
    kept.mkdir()
    return kept


def _probed_now(fake: str, kept: Path, tmp_path: Path) -> bool:
    """A new process's probe with ``kept``: whether bubblewrap was started for it."""
    confine._PROBED.discard(fake)  # as a new command line starts
    (tmp_path / "pid").unlink(missing_ok=True)
    try:
        with confine.probing(fake, kept) as probed:
            probed()
    finally:
        confine._PROBED.discard(fake)
    return (tmp_path / "pid").exists()


def test_a_passing_answer_kept_spares_the_next_process_its_probe(tmp_path: Path) -> None:
    fake, kept = _fake(tmp_path, "exit 0"), _kept_dir(tmp_path)
    assert _probed_now(fake, kept, tmp_path)
    conditions = confine._probe_conditions(fake)
    assert conditions is not None
    assert (kept / confine.KEPT_PROBE).read_bytes() == conditions + b"yes\n"
    assert sorted(p.name for p in kept.iterdir()) == [confine.KEPT_PROBE]  # no temp left
    assert not _probed_now(fake, kept, tmp_path)


def test_a_kept_answer_is_refused_when_bubblewrap_changes(tmp_path: Path) -> None:
    fake, kept = _fake(tmp_path, "exit 0"), _kept_dir(tmp_path)
    assert _probed_now(fake, kept, tmp_path)
    _fake(tmp_path, "exit 0  # another build of bubblewrap")
    assert _probed_now(fake, kept, tmp_path)
    assert not _probed_now(fake, kept, tmp_path)  # the new one's answer, kept in turn


def test_a_kept_answer_is_refused_when_a_namespace_switch_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, kept = _fake(tmp_path, "exit 0"), _kept_dir(tmp_path)
    switch = tmp_path / "max_net_namespaces"
    switch.write_text("64\n")
    monkeypatch.setattr(confine, "_NAMESPACE_SWITCHES", (str(switch),))
    assert _probed_now(fake, kept, tmp_path)
    switch.write_text("0\n")  # as if network namespaces had been turned off since
    assert _probed_now(fake, kept, tmp_path)


def test_a_refusal_is_never_kept(tmp_path: Path) -> None:
    fake, kept = _fake(tmp_path, "exit 1"), _kept_dir(tmp_path)
    with pytest.raises(ConfinementUnavailable):
        _probed_now(fake, kept, tmp_path)
    assert list(kept.iterdir()) == []


def test_a_forgotten_or_linked_answer_probes_again(tmp_path: Path) -> None:
    fake, kept = _fake(tmp_path, "exit 0"), _kept_dir(tmp_path)
    assert _probed_now(fake, kept, tmp_path)
    confine.forget_probe(kept)
    assert (kept / confine.KEPT_PROBE).read_bytes() == b""
    assert _probed_now(fake, kept, tmp_path)
    answer = tmp_path / "answer"
    answer.write_bytes((kept / confine.KEPT_PROBE).read_bytes())
    (kept / confine.KEPT_PROBE).unlink()
    (kept / confine.KEPT_PROBE).symlink_to(answer)
    assert _probed_now(fake, kept, tmp_path)  # a link is never read
    assert not (kept / confine.KEPT_PROBE).is_symlink()  # replaced by the answer found
