"""``promoter run`` with a state directory inside the guarded worktree refuses, and
leaves nothing in the person's worktree.

The refusal (``config_error``: sandboxes would land in the person's files) used to come
after the overlay's probe had made ``<state>/runs/`` and kept its answer there, so a
refused run left ``.promoter/runs/overlay-probe`` among the person's untracked files
(the operator's page: the only file promoter creates in a repository is its lock).
"""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from promoter.cli import run_cmd
from promoter.errors import ConfigError
from tests.support.daemon import Daemon
from tests.support.promotion import git_dir_digest


def _entries(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.relative_to(root).parts[0] != ".git"
    )


def test_a_run_with_its_state_inside_the_worktree_refuses_and_makes_nothing_there(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    token = tmp_path / "operator.token"
    token.write_text(daemon.operator_token)
    before, git_before = _entries(repo), git_dir_digest(repo)
    app = typer.Typer()
    run_cmd.register(app)
    argv = ["run", "--state-dir", str(repo / ".promoter"), "--url", daemon.url]
    argv += ["--token-file", str(token), "--repo", "work", "--yes", "--", "true"]
    result = CliRunner().invoke(app, argv, env={"PROMOTER_TOKEN": ""})
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception) == (
        f"the state directory {repo / '.promoter'} is inside the worktree {repo}; "
        "sandboxes would land in the user's files"
    )
    assert _entries(repo) == before
    assert git_dir_digest(repo) == git_before
