"""``promoter mcp``: a Model Context Protocol server over stdio for an agent in a sandbox.

Built with the official ``mcp`` SDK (``MCPServer``), configured by the environment:
``PROMOTER_URL``, ``PROMOTER_TOKEN`` (the executor's), ``PROMOTER_GRANT`` (the default
grant of ``submit_worktree``) and, only when given explicitly,
``PROMOTER_ORCHESTRATOR_TOKEN`` (used by ``preflight`` alone). Tools:
``submit_worktree``, ``promotion_status``, ``preflight`` and ``bundle_diff``; what each
answers is ``promoter.executor.agent``'s. No tool promotes or approves.

As agents expect: a refusal (an answer with ``status: "refused"``, which always carries
the problem ``code`` and ``detail``) is a tool result with ``isError: true`` whose
structured content is that answer; ``serverInfo.version`` is the package's version; and
the process writes nothing but warnings on stderr (stdout is the protocol).

Deliberately thin: this module only declares the tools and runs the stdio transport.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

import typer
from mcp_types import CallToolResult, TextContent

import promoter
from promoter.cli.common import server_url
from promoter.errors import ConfigError
from promoter.executor.agent import AgentTools

__all__ = ["build_server", "package_version", "register", "tool_result"]

INSTRUCTIONS = (
    "promoter is the gate between this sandbox and the user's real worktree. Edit files "
    "in the sandbox, then call submit_worktree: it hands in every change as a sealed "
    "bundle and returns the verification receipt (or every refused path and why). "
    "promotion_status tells whether a person or orchestrator promoted it; bundle_diff "
    "shows what it would write. Nothing here can promote or approve."
)


Result = Annotated[CallToolResult, dict[str, Any]]  # the output schema stays an object


def package_version() -> str:
    """The installed package's version, or the source tree's when it is not installed."""
    try:
        return metadata.version("promoter")
    except metadata.PackageNotFoundError:
        return promoter.__version__


def tool_result(answer: Mapping[str, Any]) -> CallToolResult:
    """An answer as a tool result: ``isError`` exactly when it is a refusal with a code."""
    refused = answer.get("status") == "refused" and "code" in answer
    text = json.dumps(answer, sort_keys=True)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=answer, is_error=refused
    )


def build_server(tools: AgentTools) -> Any:
    """The MCP server with the four tools bound to ``tools``."""
    from mcp.server.mcpserver import MCPServer  # imported here: every other command starts faster

    server = MCPServer(
        "promoter", instructions=INSTRUCTIONS, version=package_version(), log_level="WARNING"
    )

    @server.tool()
    def submit_worktree(worktree: str | None = None, grant_id: str | None = None) -> Result:
        """Build the bundle of every change in the worktree (default: the current directory)
        against the grant (default: PROMOTER_GRANT), upload it and submit it. Returns the
        verification receipt, or the refusal (an error result with its code) naming every
        offending path."""
        return tool_result(tools.submit_worktree(worktree, grant_id))

    @server.tool()
    def promotion_status(bundle_id: str) -> Result:
        """The promotions of a submitted bundle and their status (not_requested if none)."""
        return tool_result(tools.promotion_status(bundle_id))

    @server.tool()
    def preflight(bundle_id: str) -> Result:
        """The host's read-back of the real worktree for a bundle, writing nothing (needs
        PROMOTER_ORCHESTRATOR_TOKEN)."""
        return tool_result(tools.preflight(bundle_id))

    @server.tool()
    def bundle_diff(
        bundle_id: str,
        max_bytes: int | None = None,
        path: str | None = None,
        cursor: str | None = None,
    ) -> Result:
        """The unified diff a promotion of the bundle would write, from its stored blobs:
        non-UTF-8 bytes as \\xNN, hidden characters as <U+XXXX>, and per file the flags
        that reveal what can hide code or make it run (bidi_control, invisible_character,
        executable, symlink, binary, large, ci_config, hook_path, long_line, ...). One
        answer is a page: `path` asks for one file, `cursor` (a `next_cursor`) for the
        next page; `unseen` lists every file not shown in full, with its cursor."""
        return tool_result(tools.bundle_diff(bundle_id, max_bytes, path, cursor))

    return server


WorktreeOpt = Annotated[
    Path | None,
    typer.Option("--worktree", help="The sandbox worktree (default: the current directory)."),
]


def mcp(worktree: WorktreeOpt = None) -> None:
    """Serve the agent tools over stdio (Model Context Protocol); executor token only."""
    token = os.environ.get("PROMOTER_TOKEN", "").strip()
    if not token:
        raise ConfigError("set PROMOTER_TOKEN to the executor's token")
    tools = AgentTools(
        server_url(None),
        token,
        grant_id=os.environ.get("PROMOTER_GRANT") or None,
        worktree=worktree,
        orchestrator_token=os.environ.get("PROMOTER_ORCHESTRATOR_TOKEN") or None,
    )
    try:
        build_server(tools).run("stdio")
    finally:
        tools.close()


def register(app: typer.Typer) -> None:
    """Attach ``mcp`` to the main app."""
    app.command("mcp")(mcp)
