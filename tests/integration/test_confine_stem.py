"""A confined command's first process started early (protocol: runs#confinement): the
stem waits on its pane, in its pids cgroup, for the chain of shims, and then runs it as
a shim started at that moment would; ended unused, it runs nothing and leaves nothing.

The chain is the limits' shim followed by ``/bin/sh`` instead of bubblewrap, so these
need no namespace: the real stem, pane, cgroup and pipes run as a confined command's do.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.errors import ConfigError
from promoter.executor import confine

_ENV = {"PATH": "/usr/bin:/bin", "AGENT_SETTING": "a value with spaces"}


def _limited(go: str, script: str) -> list[str]:
    limits = confine.Limits()
    shim = [confine._python(), "-I", "-S", "-c", confine._LIMITS_SHIM]
    shim += [str(limits.memory), str(limits.file_size), str(limits.procs), go]
    return [*shim, "/bin/sh", "-c", script]


def _env() -> dict[str, str]:
    """The command's environment: the locale as promoter's own, as ``sandbox_env`` keeps it."""
    locale = {k: os.environ[k] for k in ("LANG", "LC_ALL", "LC_CTYPE") if k in os.environ}
    return {**_ENV, **locale}


def test_a_stem_runs_the_chain_as_a_shim_started_then_would(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = "pwd; env | sort"
    with confine.Stem(confine.Limits().procs) as stem:
        assert stem.fits(confine.Limits().procs, _env())
        assert not stem.fits(7, _env())
        assert not stem.fits(confine.Limits().procs, {**_env(), "LC_ALL": "C"})
        code = stem.run(_limited(stem.go, script), _env(), tmp_path, 60)
    early = capfd.readouterr().out
    assert code == 0
    started_then = confine._wait(_limited("", script), _env(), tmp_path, 60)
    assert started_then == 0
    assert early == capfd.readouterr().out  # directory and environment byte for byte
    assert early.startswith(f"{tmp_path}\n")
    assert "AGENT_SETTING=a value with spaces\n" in early


def test_a_stem_ended_unused_runs_nothing_and_leaves_no_cgroup(tmp_path: Path) -> None:
    label = f"test-{os.urandom(4).hex()}"
    with confine.Stem(confine.Limits().procs, label=label) as stem:
        stem.ready()
        process = stem._process
        assert process is not None and process.poll() is None  # waiting for its command
        kind = stem.kind
    assert process.returncode is not None
    assert not stem.fits(confine.Limits().procs, _env())
    if kind != "rlimit":
        root = confine._PIDS_V1 if kind == "cgroup-v1" else confine._CGROUP2
        assert not (root / f"promoter-{label}-{os.getpid()}").exists()


def test_a_cgroup_that_cannot_be_joined_refuses_the_stem_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextlib.contextmanager
    def gone(name: str, limit: int) -> Iterator[tuple[str, Path | None]]:
        yield "cgroup-v1", tmp_path / "gone"

    monkeypatch.setattr(confine, "_pids_cgroup", gone)
    ran = tmp_path / "ran"
    with confine.Stem(confine.Limits().procs) as stem, pytest.raises(ConfigError) as refused:
        stem.run(_limited(stem.go, f"touch {ran}"), _env(), tmp_path, 60)
    assert "pids cgroup" in refused.value.detail
    assert not ran.exists()


def test_the_empty_cgroups_of_killed_runs_are_swept_and_nothing_else(tmp_path: Path) -> None:
    """A run killed while its stem waited leaves its cgroup; the next stem removes it once
    its maker is gone and it is empty, and leaves any other name or a live maker's."""
    if not (confine._PIDS_V1 / "cgroup.procs").exists() or not os.access(confine._PIDS_V1, os.W_OK):
        pytest.skip("no writable pids cgroup (v1) here")
    child = subprocess.Popen(["true"])  # its pid: a maker that is gone
    child.wait()
    gone_pid = child.pid
    names = {
        "left": f"promoter-{os.urandom(6).hex()}-{gone_pid}",
        "left_by_a_run": f"promoter-run_{os.urandom(8).hex()}-{gone_pid}",
        "live_maker": f"promoter-{os.urandom(6).hex()}-{os.getpid()}",
        "not_a_stem": f"promoter-keep-{gone_pid}",
    }
    for name in names.values():
        os.mkdir(confine._PIDS_V1 / name)
    try:
        with confine.Stem(confine.Limits().procs) as stem:
            stem.run(_limited(stem.go, "true"), _env(), tmp_path, 60)
        left = {key for key, name in names.items() if (confine._PIDS_V1 / name).exists()}
        assert left == {"live_maker", "not_a_stem"}
    finally:
        for name in names.values():
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(confine._PIDS_V1 / name)
