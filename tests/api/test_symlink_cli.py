"""``promoter grant create --symlinks``: the policy reaches the sealed grant, bad values do not."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from promoter.domain.models import GrantV1
from promoter.errors import BadRequest
from tests.api.test_executor_end_to_end import _cli_app
from tests.support.daemon import Daemon

ARGS = "grant create --repo work --run run_cli --workflow wf_cli --stage build --allow **".split()


def test_grant_create_seals_the_symlink_policy(tmp_path: Path, daemon: Daemon) -> None:
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    out = tmp_path / "grant.json"
    created = CliRunner().invoke(
        _cli_app(),
        [*ARGS, "--grant-id", "grt_links", "--symlinks", "inside", "--out", str(out)],
        env=env,
    )
    assert created.exit_code == 0, created.output
    assert GrantV1.model_validate_json(out.read_bytes()).symlinks == "inside"

    default = tmp_path / "default.json"
    plain = CliRunner().invoke(
        _cli_app(), [*ARGS, "--grant-id", "grt_plain", "--out", str(default)], env=env
    )
    assert plain.exit_code == 0, plain.output
    assert b"symlinks" not in default.read_bytes()


def test_grant_create_refuses_an_unknown_symlink_policy(daemon: Daemon) -> None:
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.orchestrator_token}
    refused = CliRunner().invoke(
        _cli_app(), [*ARGS, "--grant-id", "grt_bad", "--symlinks", "everywhere"], env=env
    )
    assert refused.exit_code != 0
    assert isinstance(refused.exception, BadRequest)  # the main app prints it as a problem
    assert "--symlinks takes none, inside or any" in str(refused.exception)
