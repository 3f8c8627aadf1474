"""The README's Python client example runs as printed, against a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import Daemon
from tests.support.promotion import submit

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- client-example:"


def client_example() -> str:
    after = README.read_text().split(MARKER, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def run_example(daemon: Daemon, tmp_path: Path, bundle_id: str) -> subprocess.CompletedProcess[str]:
    token_file = tmp_path / "orchestrator.token"
    token_file.write_text(daemon.orchestrator_token)
    env = {
        **os.environ,
        "PROMOTER_URL": daemon.url,
        "ORCH_TOKEN_FILE": str(token_file),
        "BUNDLE_ID": bundle_id,
    }
    return subprocess.run(
        [sys.executable, "-c", client_example()],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def test_readme_client_example_promotes_a_verified_bundle(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    changes = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    done = run_example(daemon, tmp_path, bundle["bundle_id"])
    assert done.returncode == 0, done.stderr
    operation_id, status, paths = done.stdout.split(" ", 2)
    assert operation_id.startswith("op_") and status == "completed"
    assert paths.strip() == "['src/app.py']"
    assert (repo / "src" / "app.py").read_bytes() == b"print('v2')\n"


def test_readme_client_example_stops_at_a_drifted_preflight(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    changes = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
    _, bundle, _ = submit(daemon, repo, identity, changes)
    (repo / "src" / "app.py").write_bytes(b"the user's edit\n")
    done = run_example(daemon, tmp_path, bundle["bundle_id"])
    assert done.returncode == 1
    assert done.stderr.strip() == "would be refused: target_drift ['src/app.py']"
    assert (repo / "src" / "app.py").read_bytes() == b"the user's edit\n"
