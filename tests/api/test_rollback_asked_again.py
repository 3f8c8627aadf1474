"""A rollback asked for again: resumed only when it stopped, refused in every other status.

A promotion has one rollback (its id is derived from the promotion's). Asked for while
that rollback runs, the second request is refused at once (``operation_conflict``,
``next: wait``) and touches nothing: before, it waited for the repository lock and, when
the wait ran out, put the running rollback back to ``needs_recovery`` under its live
owner. Asked for after the rollback stopped (``needs_recovery``), the request claims it
and finishes it. Asked for while it waits for the operator's ``reconcile``, or once it is
final, it is refused and never runs again (protocol: recovery#guards).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from promoter import faults
from promoter.domain.status import OperationStatus
from promoter.engine.operation.rollback import rollback_id
from promoter.store import journal
from tests.api.test_recover_guards import CHANGES, FILES
from tests.support.daemon import Daemon
from tests.support.pause import Pause
from tests.support.promotion import (
    completed,
    git_dir_digest,
    operation_view,
    tree_bytes,
    unchanged,
)

pytestmark = pytest.mark.repo("lab", FILES)


def _completed(daemon: Daemon, repo: Path) -> str:
    return completed(daemon, repo, CHANGES)


def _rollback(daemon: Daemon, op_id: str) -> httpx.Response:
    with daemon.operator() as op:
        return op.post(f"/v1/operations/{op_id}/rollback", json={"note": "asked"})


def _stored(daemon: Daemon, op_id: str) -> bytes:
    return (daemon.state_dir / "audit" / "receipts" / "rollback" / f"{op_id}.json").read_bytes()


def _refusal(answer: httpx.Response, child: str, op_id: str, status: str, why: str) -> None:
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "operation_conflict"
    assert problem["detail"] == f"rollback {child} of {op_id} is {status}: {why}"
    assert (problem["operation_id"], problem["kind"], problem["current_status"]) == (
        child,
        "rollback",
        status,
    )


def test_second_rollback_while_the_first_runs_is_refused_and_never_puts_it_back(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id = _completed(daemon, repo)
    child = rollback_id(op_id)
    pause = Pause(tmp_path, "rollback_after_step")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()
    first: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: first.append(_rollback(daemon, op_id)))
    worker.start()
    try:
        pause.reached()  # the first rollback holds the lock, one target restored
        monkeypatch.delenv(faults.ENV)
        mid_tree, mid_view = tree_bytes(repo), unchanged(operation_view(daemon, child))
        assert mid_view[0] == "in_progress"
        again = _rollback(daemon, op_id)
        _refusal(again, child, op_id, "in_progress", "it is running")
        assert again.json()["next"] == "wait"
        assert tree_bytes(repo) == mid_tree
        # still its first owner's, running
        assert unchanged(operation_view(daemon, child)) == mid_view
        assert operation_view(daemon, op_id)["status"] == "completed"
    finally:
        pause.release()
        worker.join(60)
    [answer] = first
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.content)["status"] == "rolled_back"
    assert answer.content == _stored(daemon, op_id)
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES
    asked_again = _rollback(daemon, op_id)  # finished: the stored receipt, byte for byte
    assert (asked_again.status_code, asked_again.content) == (200, answer.content)
    assert (
        operation_view(daemon, child)["status"]
        == operation_view(daemon, op_id)["status"]
        == "rolled_back"
    )


def _stopped_rollback(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """A completed promotion whose rollback an injected ``EIO`` stopped after its first
    target: (the promotion, its rollback), the rollback ``needs_recovery``."""
    op_id = _completed(daemon, repo)
    child = rollback_id(op_id)
    monkeypatch.setenv(faults.ENV, "rollback_after_step=EIO@1")
    faults.reset()
    stopped = _rollback(daemon, op_id)
    monkeypatch.delenv(faults.ENV)
    assert stopped.status_code == 503, stopped.text
    assert stopped.json()["code"] == "write_failed"
    assert operation_view(daemon, child)["status"] == "needs_recovery"
    return op_id, child


def test_rollback_stopped_by_an_io_error_is_resumed_when_asked_again(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id, child = _stopped_rollback(daemon, repo, monkeypatch)
    assert operation_view(daemon, op_id)["status"] == "completed"
    resumed = _rollback(daemon, op_id)
    assert resumed.status_code == 200, resumed.text
    document = json.loads(resumed.content)
    assert document["status"] == "rolled_back"
    assert [t["reason"] for t in document["targets"]] == ["restored", "restored"]
    assert resumed.content == _stored(daemon, op_id)
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES
    view = operation_view(daemon, child)
    assert view["status"] == "rolled_back"
    assert view["code"] is None


def _to(daemon: Daemon, operation_id: str, *statuses: OperationStatus) -> None:
    """Walk the journal row through ``statuses`` (each a transition the table allows)."""
    with daemon.services.db.session() as session:
        for status in statuses:
            journal.set_status(session, operation_id, status)


def test_rollback_awaiting_reconcile_or_abandoned_never_runs_again(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id, child = _stopped_rollback(daemon, repo, monkeypatch)
    _to(daemon, child, OperationStatus.IN_PROGRESS, OperationStatus.NEEDS_RECONCILIATION)
    tree, git = tree_bytes(repo), git_dir_digest(repo)
    views = {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)}
    refused = _rollback(daemon, op_id)
    _refusal(
        refused, child, op_id, "needs_reconciliation", "only the operator's reconcile moves it"
    )
    assert refused.json()["next"] == "reconcile"
    assert (tree_bytes(repo), git_dir_digest(repo)) == (tree, git)
    assert {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)} == views
    with daemon.operator() as op:
        abandoned = op.post(
            f"/v1/operations/{child}/reconcile", json={"decision": "abandon", "note": "left"}
        )
    assert abandoned.status_code == 200, abandoned.text
    assert operation_view(daemon, op_id)["status"] == "completed"  # its promotion stays as it was
    views = {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)}
    final = _rollback(daemon, op_id)
    _refusal(final, child, op_id, "abandoned", "a final operation never runs again")
    assert final.json()["next"] is None
    assert (tree_bytes(repo), git_dir_digest(repo)) == (tree, git)
    assert {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)} == views
    assert not (daemon.state_dir / "audit" / "receipts" / "rollback" / f"{op_id}.json").exists()
