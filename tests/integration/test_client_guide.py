"""The client guide's Python examples (sync, and the async orchestrator) run as printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import Daemon
from tests.support.flows import make_bundle, make_grant, upload
from tests.support.promotion import submit

README = Path(__file__).resolve().parents[2] / "docs" / "guide" / "client.md"
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


ASYNC_MARKER = "<!-- async-client-example:"


def test_readme_async_orchestrator_example_promotes_and_collects_the_receipt(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    after = README.read_text().split(ASYNC_MARKER, 1)[1]
    example = after.split("```python\n", 1)[1].split("```", 1)[0]
    token_file = tmp_path / "orchestrator.token"
    token_file.write_text(daemon.orchestrator_token)
    grant = make_grant(repo, identity)
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(grant))
    env = {
        **os.environ,
        "PROMOTER_URL": daemon.url,
        "ORCH_TOKEN_FILE": str(token_file),
        "GRANT_FILE": str(grant_file),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", example],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n"  # the grant and the lease are in place
        old, new = b"print('v1')\n", b"print('v2')\n"
        bundle = make_bundle(grant, [("src/app.py", old, new)])
        with daemon.executor(grant["executor_run_id"]) as ex:
            upload(ex, old, new)
            answer = ex.post("/v1/bundles", json=bundle)
            assert answer.status_code == 201, answer.text
        receipt_sha = answer.json()["verification_receipt"]["receipt_sha256"]
        out, err = proc.communicate(f"{bundle['bundle_id']} {receipt_sha}\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    operation_id, status, receipt_sha256 = out.split()
    assert status == "completed"
    with daemon.orchestrator() as orch:
        stored = orch.get(f"/v1/operations/{operation_id}/receipt").json()
    assert stored["receipt_sha256"] == receipt_sha256
    assert (repo / "src" / "app.py").read_bytes() == b"print('v2')\n"
