"""An unexpected fault inside an attempt never leaves an operation stuck ``in_progress``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from promoter.cli.main import app
from promoter.domain.path_state import State
from promoter.engine.operation import outcome, promote
from promoter.engine.operation.apply import Applier
from tests.support.daemon import Daemon
from tests.support.promotion import promote as request_promotion
from tests.support.promotion import submit

V1, V2 = b"print('v1')\n", b"print('v2')\n"


def test_fault_before_the_journal_is_refused(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("read-back broke")

    monkeypatch.setattr(promote, "read_back", broken)
    view = request_promotion(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "internal")
    assert (repo / "src" / "app.py").read_bytes() == V1


def test_fault_after_writing_began_needs_recovery_then_recovers(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
    real = outcome.complete

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("complete broke")

    monkeypatch.setattr(outcome, "complete", broken)
    view = request_promotion(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("needs_recovery", "internal")
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    shown = CliRunner().invoke(app, ["ops", "show", view["operation_id"]], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"`promoter ops recover {view['operation_id']} --fence 7`" in shown.output.replace(
        "\n", ""
    )
    monkeypatch.setattr(outcome, "complete", real)
    with daemon.orchestrator() as orch:
        done = orch.post(f"/v1/operations/{view['operation_id']}/recover", json={"fence": 7})
    assert done.json()["status"] == "completed"
    assert (repo / "src" / "app.py").read_bytes() == V2


def test_stopping_daemon_leaves_the_attempt_for_recovery(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes = [("src/app.py", V1, V2), ("src/b.txt", None, b"b\n"), ("src/c.txt", None, b"c\n")]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    real = Applier.place
    calls: list[int] = []

    def stop_after_first(self: Applier, seq: int, old: State, new: State) -> None:
        real(self, seq, old, new)
        calls.append(seq)
        daemon.services.stopping.set()  # as SIGTERM does, between two steps

    monkeypatch.setattr(Applier, "place", stop_after_first)
    view = request_promotion(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("needs_recovery", "stopped")
    assert [s["status"] for s in view["steps"]] == ["completed", "pending", "pending"]
    assert (repo / "src" / "app.py").read_bytes() == V2
    assert not (repo / "src" / "b.txt").exists()
    assert not (repo / "src" / "c.txt").exists()
    assert not list(repo.rglob(".promoter-tmp-*"))
    daemon.services.stopping.clear()
    monkeypatch.setattr(Applier, "place", real)
    with daemon.orchestrator() as orch:
        done = orch.post(f"/v1/operations/{view['operation_id']}/recover", json={"fence": 7})
    assert done.json()["status"] == "completed"
    assert (repo / "src" / "c.txt").read_bytes() == b"c\n"


def test_stopping_before_any_write_refuses(daemon: Daemon, repo: Path, identity: str) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
    daemon.services.stopping.set()
    try:
        view = request_promotion(daemon, bundle, receipt).json()
    finally:
        daemon.services.stopping.clear()
    assert (view["status"], view["code"]) == ("refused", "stopped")
    assert (repo / "src" / "app.py").read_bytes() == V1
