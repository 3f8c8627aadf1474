"""The README's quickstart (``scripts/quickstart.sh``) runs top to bottom and works.

The script is run as a newcomer would run it, in a scratch directory under ``tmp_path``:
it creates its own repository, starts a real daemon on a free loopback port, drives one
promotion through the command line and stops the daemon. The test checks its exit code,
its key lines, and the worktree it leaves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitutil import git_env

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "quickstart.sh"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the quickstart shows metrics with curl")
def test_quickstart_script_promotes_into_its_own_scratch_repository(tmp_path: Path) -> None:
    env = {
        **git_env(),
        "HOME": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "qs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "verification passed for bnd_" in out
    assert "preflight bnd_" in out and ": passed" in out
    assert " completed (attempt 1)" in out
    assert "completed  create  src/util/consts.py" in out
    assert " M src/app.py\n?? src/util/\n" in out
    assert 'promoter_promotions_total{code="",outcome="completed"} 1.0' in out
    assert out.rstrip().splitlines()[-1].startswith("quickstart done: operation op_")
    project = tmp_path / "qs" / "project"
    assert (
        project / "src" / "app.py"
    ).read_bytes() == b'def greet(name):\n    return f"hello, {name}!"\n'
    assert (project / "src" / "util" / "consts.py").read_bytes() == b'GREETING = "hello"\n'
    log = (tmp_path / "qs" / "daemon.log").read_text()
    assert "promoter.outcome promotion completed" in log
    token = (tmp_path / "qs" / "state" / "credentials" / "orchestrator.token").read_text().strip()
    assert token not in log and token not in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the quickstart shows metrics with curl")
def test_quickstart_leaves_the_persons_recorded_daemon_as_it_was(tmp_path: Path) -> None:
    """The README: the quickstart never touches anything of the person's. Its daemon,
    stopped when the script ends, must not become the one the person's CLI reaches."""
    config = tmp_path / ".config" / "promoter"
    config.mkdir(parents=True, mode=0o700)
    recorded = (
        b'{"schema": "PromoterUserConfigV1", "state_dir": "/srv/promoter", '
        b'"token_file": "/srv/promoter/credentials/operator.token", '
        b'"url": "http://127.0.0.1:8787"}\n'
    )
    (config / "daemon.json").write_bytes(recorded)
    (config / "daemon.json").chmod(0o600)
    env = {
        **git_env(),
        "HOME": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("XDG_CONFIG_HOME", None)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "qs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in config.iterdir()) == ["daemon.json"]
    assert (config / "daemon.json").read_bytes() == recorded


def test_quickstart_refuses_a_directory_that_already_holds_one(tmp_path: Path) -> None:
    (tmp_path / "qs" / "project").mkdir(parents=True)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "qs")],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        timeout=60,
        check=False,
    )
    assert done.returncode == 64
    assert "already holds a quickstart" in done.stderr
    assert list((tmp_path / "qs").iterdir()) == [tmp_path / "qs" / "project"]
