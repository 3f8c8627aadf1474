"""A command whose request the daemon dies in says so, not that the daemon was unreachable.

The daemon is killed at a fault point after it replaced a target: the promotion began and
its journal is the record. ``promoter promote`` must say that the server dropped the
request it had begun, and name the command that shows the operation once the daemon is
back, never "cannot reach" (which reads as: nothing was sent).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion

FILES = {"src/a.py": b"a = 1\n"}


def test_a_daemon_killed_inside_a_promotion_is_named_as_dropping_it(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    daemon = DaemonProcess(tmp_path / "state", {"work": repo}, faults="after_replace=kill")
    try:
        request = prepare_promotion(daemon, repo, [("src/a.py", b"a = 1\n", b"a = 2\n")])
        token = daemon.state_dir / "credentials" / "orchestrator.token"
        argv = [sys.executable, "-m", "promoter.cli.main", "promote", request["bundle_id"]]
        argv += ["--fence", "7", "--wait", "--url", daemon.url, "--token-file", str(token)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert daemon.wait_exit() == 137
    finally:
        daemon.kill()
    assert done.returncode == 69, done.stderr
    said = " ".join(done.stderr.split())
    assert said.startswith(
        f"error [server_unavailable] the promoter server at {daemon.url} closed the connection "
        "before answering POST /v1/promotions ("
    ), said
    assert said.endswith(
        "it may have stopped in the middle of it. What it began is journaled: once it serves "
        "again, `promoter ops list` shows the operation"
    ), said
    assert "cannot reach" not in said
    assert (repo / "src" / "a.py").read_bytes() == b"a = 2\n"  # it had begun: kept, not undone
