"""The command ``promoter ops show`` names on its ``next:`` line runs as printed.

An operator copies that line. A rollback stopped half-way used to be told to recover
``--fence N`` "with the current lease's fence" (a rollback holds no lease: any fence
does, and the page says ``--fence 0``); a rolled-back promotion used to be sent to
``promoter receipt fetch OP --rollback``, which refuses without ``--dsse`` (exit 78).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from promoter import faults
from promoter.cli.main import app
from promoter.engine.operation.rollback import rollback_id
from tests.api.test_recover_guards import CHANGES, FILES
from tests.support.daemon import Daemon
from tests.support.promotion import completed, operation_view, tree_bytes

pytestmark = pytest.mark.repo("lab", FILES)


def _env(daemon: Daemon) -> dict[str, str]:
    return {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}


def _next_command(daemon: Daemon, operation_id: str) -> list[str]:
    """The first backquoted ``promoter …`` command of ``ops show``'s ``next:`` line."""
    shown = CliRunner().invoke(
        app, ["ops", "show", operation_id], env=_env(daemon), terminal_width=400
    )
    assert shown.exit_code == 0, shown.output
    [line] = [x for x in shown.output.splitlines() if x.startswith("next: ")]
    command = re.search(r"`promoter ([^`]+)`", line)
    assert command is not None, line
    return shlex.split(command.group(1))


def test_stopped_rollback_next_command_recovers_it(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = completed(daemon, repo, CHANGES)
    child = rollback_id(op_id)
    monkeypatch.setenv(faults.ENV, "rollback_after_step=EIO@1")
    faults.reset()
    with daemon.operator() as op:
        stopped = op.post(f"/v1/operations/{op_id}/rollback", json={"note": "asked"})
    monkeypatch.delenv(faults.ENV)
    assert stopped.status_code == 503, stopped.text
    assert operation_view(daemon, child)["status"] == "needs_recovery"
    command = _next_command(daemon, child)
    assert command == ["ops", "recover", child, "--fence", "0"]
    ran = CliRunner().invoke(app, [*command, "--json"], env=_env(daemon))
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.output)["status"] == "rolled_back"
    assert operation_view(daemon, op_id)["status"] == "rolled_back"
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES


def test_rolled_back_promotion_next_command_fetches_its_receipt(daemon: Daemon, repo: Path) -> None:
    op_id = completed(daemon, repo, CHANGES)
    with daemon.operator() as op:
        rolled = op.post(f"/v1/operations/{op_id}/rollback", json={"note": "asked"})
    assert rolled.status_code == 200, rolled.text
    command = _next_command(daemon, op_id)
    assert command == ["receipt", "fetch", op_id, "--rollback", "--dsse"]
    ran = CliRunner().invoke(app, command, env=_env(daemon))
    assert ran.exit_code == 0, ran.output
    envelope = json.loads(ran.stdout)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"]
