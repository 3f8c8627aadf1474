"""The operator's console (``promoter ops …``) and ``promoter gc`` against a real daemon."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from promoter.cli.main import app
from promoter.config import RepositoryConfig
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, sha
from tests.support.promotion import promote, submit

FILES = {"src/app.py": b"print('v1')\n"}
CHANGES = [("src/app.py", FILES["src/app.py"], b"print('v2')\n"), ("src/new.py", None, b"n\n")]


@pytest.fixture
def held(tmp_path: Path) -> tuple[Daemon, Path, str, dict[str, str]]:
    repo = init_repo(tmp_path / "lab", FILES)
    context = running_daemon(
        tmp_path / "state", {"lab": RepositoryConfig(path=repo, check_command=["false"])}
    )
    daemon = context.__enter__()
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    view = promote(daemon, bundle, receipt).json()
    assert view["status"] == "needs_reconciliation"
    token = tmp_path / "operator.token"
    token.write_text(daemon.operator_token)
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token, "COLUMNS": "220"}
    yield daemon, repo, view["operation_id"], env
    context.__exit__(None, None, None)


def test_ops_show_prints_each_path_with_its_state_now_and_the_next_step(
    held: tuple[Daemon, Path, str, dict[str, str]],
) -> None:
    daemon, repo, op_id, env = held
    (repo / "src" / "new.py").write_bytes(b"user edit\n")
    result = CliRunner().invoke(app, ["ops", "show", op_id], env=env, terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "needs_reconciliation" in out and "[check_failed]" in out
    cells = {
        row[0]: row
        for line in out.splitlines()
        if "src/" in line
        for row in [[c.strip() for c in line.strip("│ ").split("│")]]
    }
    assert cells["src/app.py"][1:3] == ["completed", "modify"]
    assert cells["src/app.py"][-1] == "new"
    assert cells["src/new.py"][-1] == "neither"
    assert "next: Inspect the paths marked 'neither'" in out.replace("\n", " ")
    listed = CliRunner().invoke(app, ["ops", "list", "--json"], env=env)
    assert [item["operation_id"] for item in json.loads(listed.output)] == [op_id]


def test_ops_reconcile_rollback_restores_and_reports(
    held: tuple[Daemon, Path, str, dict[str, str]],
) -> None:
    daemon, repo, op_id, env = held
    result = CliRunner().invoke(
        app, ["ops", "reconcile", op_id, "rollback", "--note", "bad build", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["status"] == "rolled_back"
    assert (repo / "src" / "app.py").read_bytes() == FILES["src/app.py"]
    assert not (repo / "src" / "new.py").exists()
    again = CliRunner().invoke(app, ["ops", "rollback", op_id], env=env, terminal_width=200)
    assert again.exit_code == 0, again.output
    assert "rolled_back" in again.output and "restored" in again.output


def test_ops_with_an_executor_token_is_forbidden(
    held: tuple[Daemon, Path, str, dict[str, str]],
) -> None:
    daemon, _repo, op_id, env = held
    with daemon.executor("run_1") as ex:
        token = ex.headers["authorization"].split()[1]
    result = CliRunner().invoke(app, ["ops", "list"], env={**env, "PROMOTER_TOKEN": token})
    assert result.exit_code != 0
    assert getattr(result.exception, "code", None) == "forbidden"


def test_gc_removes_only_old_unreferenced_blobs(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "lab", FILES)
    state = tmp_path / "state"
    with running_daemon(state, {"lab": repo}) as daemon:
        identity = daemon.services.registry.by_name("lab").identity
        submit(daemon, repo, identity, CHANGES)
        with daemon.executor("run_1") as ex:
            ex.put(f"/v1/blobs/sha256/{sha(b'orphan')}", content=b"orphan")
            ex.put(f"/v1/blobs/sha256/{sha(b'fresh')}", content=b"fresh")
    blobs = state / "audit" / "blobs" / "sha256"
    old = 1_000_000_000
    for data in (b"orphan", *[d for c in CHANGES for d in c[1:] if d]):
        os.utime(blobs / sha(data)[:2] / sha(data), (old, old))
    result = CliRunner().invoke(app, ["gc", "--state-dir", str(state), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert (blobs / sha(b"orphan")[:2] / sha(b"orphan")).exists()
    result = CliRunner().invoke(app, ["gc", "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    remaining = sorted(p.name for p in blobs.glob("*/*"))
    referenced = sorted({sha(d) for c in CHANGES for d in c[1:] if d})
    assert remaining == sorted([*referenced, sha(b"fresh")])
