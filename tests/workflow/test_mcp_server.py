"""``promoter mcp`` through the official SDK's own stdio client against a real daemon.

The server is the real command (``python -m promoter.cli.main mcp``) in a subprocess,
started in the sandbox clone with the executor's token only; the daemon runs in-process
on a loopback port. Its stderr goes to a file the tests read: nothing but warnings.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from promoter.client.sync import PromoterClient
from tests.support import repos
from tests.support.daemon import Daemon
from tests.support.flows import make_grant
from tests.support.promotion import set_lease, tree_bytes

ROOT = Path(__file__).resolve().parents[2]


def _session(
    daemon: Daemon,
    clone: Path,
    token: str,
    calls: list[tuple[str, dict[str, Any]]],
    **env: str,
) -> tuple[list[str], list[Any], str | None, str]:
    """Tool names, each call's result, ``serverInfo.version`` and the server's stderr."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "promoter.cli.main", "mcp"],
        env={"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": token, "PYTHONPATH": str(ROOT), **env},
        cwd=str(clone),
    )
    results: list[Any] = []
    errlog = clone.parent / "mcp-stderr.txt"

    async def main() -> tuple[list[str], str | None]:
        with errlog.open("w", encoding="utf-8") as stderr:
            transport = stdio_client(params, errlog=stderr)
            async with Client(transport, read_timeout_seconds=120) as client:
                info = client.server_info
                listed = await client.list_tools()
                for name, arguments in calls:
                    results.append(await client.call_tool(name, arguments))
                version = None if info is None else info.version
                return sorted(t.name for t in listed.tools), version

    names, version = anyio.run(main)
    return names, results, version, errlog.read_text(encoding="utf-8")


def _tools(
    daemon: Daemon, clone: Path, token: str, calls: list[tuple[str, dict[str, Any]]], **env: str
) -> tuple[list[str], list[dict[str, Any]]]:
    names, results, _, stderr = _session(daemon, clone, token, calls, **env)
    answers: list[dict[str, Any]] = []
    for result in results:
        assert isinstance(result.structured_content, dict)
        refused = result.structured_content.get("status") == "refused"
        assert result.is_error is refused, result
        answers.append(result.structured_content)
    assert _not_warnings(stderr) == [], stderr
    return names, answers


def _not_warnings(stderr: str) -> list[str]:
    """Lines of stderr that are not warnings (nothing but warnings may appear)."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and "warning" not in line.lower() and not line.startswith(" ")
    ]


@pytest.mark.slow
def test_mcp_tools_listed_and_called_through_the_sdk_client(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    clone = repos.clone(repo, tmp_path / "clone")
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
    clone = repos.clone(repo, tmp_path / "clone")
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


def test_mcp_refusal_is_an_error_result_with_its_code_and_the_package_version(
    tmp_path: Path, daemon: Daemon, repo: Path, identity: str
) -> None:
    clone = repos.clone(repo, tmp_path / "clone")
    orch = PromoterClient(daemon.url, daemon.orchestrator_token)
    token = str(orch.mint_executor_token("run_1")["token"])
    calls = [
        ("promotion_status", {"bundle_id": "bnd_" + "0" * 32}),
        ("preflight", {"bundle_id": "bnd_" + "0" * 32}),
    ]
    _, (unknown, forbidden), version, stderr = _session(daemon, clone, token, calls)
    assert version == metadata.version("promoter")
    assert version != ""
    assert unknown.is_error is True
    assert unknown.structured_content["status"] == "refused"
    assert unknown.structured_content["code"] == "not_found"
    assert unknown.structured_content["detail"]
    assert '"code": "not_found"' in unknown.content[0].text
    assert forbidden.is_error is True
    assert forbidden.structured_content["code"] == "forbidden"
    assert _not_warnings(stderr) == [], stderr
