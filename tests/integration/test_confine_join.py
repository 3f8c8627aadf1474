"""The limits' shim and its pids cgroup (protocol: runs#confinement): promoter writes the
shim's process into the cgroup while the shim's interpreter starts, and the shim goes on
to what follows it only once promoter says so.

A plain file stands in for ``cgroup.procs`` (what is written there is what the kernel
would read), and the shim is followed by ``/bin/sh`` instead of bubblewrap, so these need no
namespace: the real shim, pane and pipe run as a confined command's do.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from promoter import faults
from promoter.errors import ConfigError
from promoter.executor import confine
from tests.support.pause import Pause


def _argv(join: confine._Join, script: str) -> list[str]:
    limits = confine.Limits()
    shim = [confine._python(), "-I", "-S", "-c", confine._LIMITS_SHIM]
    shim += [str(limits.memory), str(limits.file_size), str(limits.procs), str(join.go)]
    return [*shim, "/bin/sh", "-c", script]


def test_the_shim_goes_on_only_after_its_process_is_written_into_the_cgroup(
    tmp_path: Path,
) -> None:
    procs = tmp_path / "cgroup.procs"
    procs.write_bytes(b"")
    seen = tmp_path / "seen"
    with confine._Join(procs) as join:
        # the command reads what the cgroup was told, as the kernel had it before exec
        script = f'echo "$(cat {procs})" $$ > {seen}'
        code = confine._wait(_argv(join, script), {"PATH": "/usr/bin:/bin"}, tmp_path, 60, join)
    assert code == 0
    told, shell = seen.read_text().split()
    assert told == shell  # the very process that then ran the command


def test_a_cgroup_that_cannot_be_joined_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    procs = tmp_path / "gone" / "cgroup.procs"
    ran = tmp_path / "ran"
    with confine._Join(procs) as join, pytest.raises(ConfigError) as refused:
        confine._wait(_argv(join, f"touch {ran}"), {"PATH": "/usr/bin:/bin"}, tmp_path, 60, join)
    assert "pids cgroup" in refused.value.detail
    assert not ran.exists()


def test_a_shim_gone_before_it_is_let_go_ends_with_its_own_exit_and_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """What starts before the limits' shim (the overlay's mount) may fail and exit before
    promoter lets the shim go: the command ends as that failure ended it (its status,
    its words on the pane), not as a refusal of promoter's own about a broken pipe."""
    procs = tmp_path / "cgroup.procs"
    procs.write_bytes(b"")
    pause = Pause(tmp_path, "pids_cgroup_joined")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()

    def exited() -> None:  # the process is written into the cgroup, then ends unread
        pause.reached()
        os.waitid(os.P_PID, int(procs.read_text()), os.WEXITED | os.WNOWAIT)
        pause.release()

    failing = ["/bin/sh", "-c", "echo 'promoter: overlay mount: refused' >&2; exit 125"]
    waiter = threading.Thread(target=exited)
    waiter.start()
    try:
        with confine._Join(procs) as join:
            code = confine._wait(failing, {"PATH": "/usr/bin:/bin"}, tmp_path, 60, join)
    finally:
        waiter.join()
        faults.reset()
    assert code == 125
    assert "overlay mount: refused" in capfd.readouterr().out
