"""Two daemons, two hosts, one ledger: answers about the other host's things name it.

Host A takes a bundle and promotes it; host B, asked for that bundle, to promote it, to
roll the promotion back or to read its targets as they are now, answers 421
``owned_by_other_host`` with ``owner_host`` = A's host id, while what the ledger holds (the
operation, its receipt, the verification receipt) B serves itself. An id neither host
knows still answers the old 404. Runs on the suite's PostgreSQL database when there is
one, else both daemons share one SQLite file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion

V1, V2 = b"one\n", b"two\n"
UNKNOWN_BUNDLE = "bnd_" + "0" * 32
UNKNOWN_OPERATION = "op_" + "0" * 32


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[DaemonProcess, DaemonProcess, Path]]:
    url = os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / 'ledger.db'}"
    repo_a = init_repo(tmp_path / "work-a", {"src/app.txt": V1})
    repo_b = init_repo(tmp_path / "work-b", {"src/app.txt": V1})
    started: list[DaemonProcess] = []
    try:
        for name, repo in (("a", repo_a), ("b", repo_b)):
            env = {"PROMOTER_HOST_ID": f"host-{name}", "PROMOTER_DATABASE_URL": url}
            started.append(DaemonProcess(tmp_path / f"state-{name}", {name: repo}, extra_env=env))
        yield started[0], started[1], repo_a
    finally:
        for daemon in started:
            daemon.kill()


def _named(answer: httpx.Response, **ids: str) -> None:
    problem = answer.json()
    assert (answer.status_code, problem["code"]) == (421, "owned_by_other_host"), answer.text
    assert problem["owner_host"] == "host-a"
    for key, value in ids.items():
        assert problem[key] == value


@pytest.mark.slow
def test_host_b_names_host_a_for_its_bundle_and_operation(
    hosts: tuple[DaemonProcess, DaemonProcess, Path],
) -> None:
    a, b, repo_a = hosts
    request = prepare_promotion(a, repo_a, [("src/app.txt", V1, V2)])
    bundle_id = request["bundle_id"]
    with b.client() as orch:
        _named(orch.get(f"/v1/bundles/{bundle_id}"), bundle_id=bundle_id)
        _named(orch.post("/v1/promotions", json=request), bundle_id=bundle_id)
        verification = orch.get(f"/v1/bundles/{bundle_id}/verification")
        assert verification.status_code == 200, verification.text  # a ledger row: served
        unknown = orch.get(f"/v1/bundles/{UNKNOWN_BUNDLE}")
        assert (unknown.status_code, unknown.json()["code"]) == (404, "bundle_unknown")
    with a.client() as orch:
        view = orch.post("/v1/promotions", json=request).json()
        assert view["status"] == "completed", view
    op_id = view["operation_id"]
    with b.client() as orch:
        seen = orch.get(f"/v1/operations/{op_id}")
        assert seen.status_code == 200 and seen.json()["owner"]["host"] == "host-a"
        assert orch.get(f"/v1/operations/{op_id}/receipt").status_code == 200
        _named(orch.get(f"/v1/operations/{op_id}", params={"current": "true"}), operation_id=op_id)
    with b.client("operator") as operator:
        _named(operator.post(f"/v1/operations/{op_id}/rollback"), operation_id=op_id)
        unknown = operator.post(f"/v1/operations/{UNKNOWN_OPERATION}/rollback")
        assert (unknown.status_code, unknown.json()["code"]) == (404, "operation_unknown")
    assert (repo_a / "src/app.txt").read_bytes() == V2  # B wrote nothing
    with a.client("operator") as operator:
        rolled = operator.post(f"/v1/operations/{op_id}/rollback")
        assert rolled.status_code == 200, rolled.text  # the owner still can
    assert (repo_a / "src/app.txt").read_bytes() == V1


@pytest.mark.slow
def test_a_followed_421_to_a_host_that_is_down_names_that_host_once(
    hosts: tuple[DaemonProcess, DaemonProcess, Path],
) -> None:
    a, b, repo_a = hosts
    bundle_id = prepare_promotion(a, repo_a, [("src/app.txt", V1, V2)])["bundle_id"]
    a.kill()
    token = b.state_dir / "credentials" / "orchestrator.token"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [sys.executable, "-m", "promoter.cli.main", "bundle", "show", bundle_id]
    shown = subprocess.run(
        [*argv, "--url", b.url, "--token-file", str(token)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 69, shown.stderr
    assert f"cannot reach the promoter server at {a.url}: " in shown.stderr
    assert shown.stderr.count(f"/v1/bundles/{bundle_id}") == 0
