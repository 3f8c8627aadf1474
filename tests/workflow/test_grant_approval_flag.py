"""``promoter grant create --approval required``: the grant itself holds its promotions."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from promoter.cli import orchestrate_cmd
from tests.support.daemon import Daemon


def _grant(daemon: Daemon, tmp_path: Path, grant_id: str, *extra: str) -> dict[str, object]:
    app = typer.Typer()
    orchestrate_cmd.register(app)
    argv = ["grant", "create", "--repo", "work", "--grant-id", grant_id, "--run", "run_a"]
    argv += ["--workflow", "wf_a", "--stage", "s", "--allow", "src/**:create", *extra]
    argv += ["--url", daemon.url, "--out", str(tmp_path / f"{grant_id}.json")]
    result = CliRunner().invoke(app, argv, env={"PROMOTER_TOKEN": daemon.orchestrator_token})
    assert result.exit_code == 0, result.output
    with daemon.orchestrator() as orch:
        stored: dict[str, object] = orch.get(f"/v1/grants/{grant_id}").json()
    return stored


def test_grant_create_asks_for_approval_only_when_told(daemon: Daemon, tmp_path: Path) -> None:
    assert _grant(daemon, tmp_path, "grt_gated", "--approval", "required")["approval"] == (
        "required"
    )
    assert "approval" not in _grant(daemon, tmp_path, "grt_plain")  # the same grant as before
