"""``make demo`` (``python -m scripts.demo run``) runs the whole flow on a scratch
repository of its own, and leaves nothing of the person's changed: its daemon, stopped
and removed when it ends, never becomes the one the person's CLI reaches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitutil import git_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_make_demo_leaves_the_persons_recorded_daemon_as_it_was(tmp_path: Path) -> None:
    config = tmp_path / ".config" / "promoter"
    config.mkdir(parents=True, mode=0o700)
    recorded = (
        b'{"schema": "PromoterUserConfigV1", "state_dir": "/srv/promoter", '
        b'"token_file": "/srv/promoter/credentials/operator.token", '
        b'"url": "http://127.0.0.1:8787"}\n'
    )
    (config / "daemon.json").write_bytes(recorded)
    (config / "daemon.json").chmod(0o600)
    env = {**git_env(), "HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.pop("XDG_CONFIG_HOME", None)
    done = subprocess.run(
        [sys.executable, "-m", "scripts.demo", "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in config.iterdir()) == ["daemon.json"]
    assert (config / "daemon.json").read_bytes() == recorded
