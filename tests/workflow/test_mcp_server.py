"""``promoter mcp`` through the official SDK's own stdio client against a real daemon.

The server is the real command (``python -m promoter.cli.main mcp``) in a subprocess,
started in the sandbox clone with the executor's token only; the daemon runs in-process
on a loopback port.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from promoter.client import PromoterClient
from tests.gitutil import git
from tests.support.daemon import Daemon
from tests.support.flows import make_grant
from tests.support.promotion import set_lease, tree_bytes

ROOT = Path(__file__).resolve().parents[2]


def _tools(
    daemon: Daemon, clone: Path, token: str, calls: list[tuple[str, dict[str, Any]]], **env: str
) -> tuple[list[str], list[dict[str, Any]]]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "promoter.cli.main", "mcp"],
        env={"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token, "PYTHONPATH": str(ROOT), **env},
        cwd=str(clone),
    )
    answers: list[dict[str, Any]] = []

    async def main() -> list[str]:
        async with Client(params, read_timeout_seconds=120) as client:
            listed = await client.list_tools()
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                assert result.is_error is False, result
                assert isinstance(result.structured_content, dict)
                answers.append(result.structured_content)
            return sorted(t.name for t in listed.tools)

    names = anyio.run(main)
    return names, answers


def test_mcp_tools_listed_and_called_through_the_sdk_client(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    (clone / "src" / "app.py").write_bytes(b"print('from the agent')\n")
    (clone / "src" / "added.py").write_bytes(b"added = True\n")
    grant = make_grant(repo, identity, grant_id="grt_mcp")
    orch = PromoterClient(daemon.url, daemon.orchestrator_token)
    orch.register_grant(grant)
    set_lease(daemon, grant)
    token = str(orch.mint_executor_token("run_1")["token"])
    before = tree_bytes(repo)

    names, (submitted,) = _tools(
        daemon, clone, token, [("submit_worktree", {})], PROMOTER_GRANT="grt_mcp"
    )
    assert names == ["bundle_diff", "preflight", "promotion_status", "submit_worktree"]
    assert submitted["status"] == "submitted", submitted
    assert submitted["changes"] == [
        {"path": "src/added.py", "operation": "create"},
        {"path": "src/app.py", "operation": "modify"},
    ]
    assert submitted["verification_receipt"]["status"] == "passed"
    bundle_id = submitted["bundle_id"]

    _, (status, diff, preflight) = _tools(
        daemon,
        clone,
        token,
        [
            ("promotion_status", {"bundle_id": bundle_id}),
            ("bundle_diff", {"bundle_id": bundle_id}),
            ("preflight", {"bundle_id": bundle_id}),
        ],
    )
    assert status == {"bundle_id": bundle_id, "status": "not_requested", "operations": []}
    assert "+print('from the agent')\n" in diff["unified_diff"]
    assert preflight["status"] == "refused" and preflight["code"] == "forbidden"
    assert tree_bytes(repo) == before  # no tool wrote anything

    promoted = orch.promote(
        bundle_id, submitted["verification_receipt"]["receipt_sha256"], 7, wait=True
    )
    assert promoted["status"] == "completed"
    _, (after, checked) = _tools(
        daemon,
        clone,
        token,
        [("promotion_status", {"bundle_id": bundle_id}), ("preflight", {"bundle_id": bundle_id})],
        PROMOTER_ORCHESTRATOR_TOKEN=daemon.orchestrator_token,
    )
    assert after["status"] == "completed"
    assert after["operations"][0]["operation_id"] == promoted["operation_id"]
    assert checked["status"] == "passed"  # every target reads as new now
    assert (repo / "src" / "added.py").read_bytes() == b"added = True\n"


def test_mcp_submit_returns_local_refusals_with_every_path(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    (clone / "README.md").write_bytes(b"# not allowed\n")
    (clone / "src" / "app.py").write_bytes(b"print('allowed')\n")
    grant = make_grant(
        repo,
        identity,
        grant_id="grt_narrow",
        allow=[{"pattern": "src/**", "operations": ["modify"]}],
    )
    orch = PromoterClient(daemon.url, daemon.orchestrator_token)
    orch.register_grant(grant)
    token = str(orch.mint_executor_token("run_1")["token"])
    _, (refused,) = _tools(daemon, clone, token, [("submit_worktree", {"grant_id": "grt_narrow"})])
    assert refused["status"] == "refused"
    assert refused["code"] == "verification_failed"
    assert "README.md" in refused["detail"]
    with daemon.operator() as operator:
        assert operator.get("/v1/operations").json()["operations"] == []
