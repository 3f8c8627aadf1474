"""The approval gate: held in ``awaiting_approval``, then approved (written) or rejected.

Every test drives the real daemon over HTTP against a real repository and compares the
worktree's bytes before and after.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from promoter.cli import review_cmd
from promoter.cli.main import app
from promoter.errors import OperationConflict
from tests.support.daemon import Daemon
from tests.support.flows import make_bundle, upload
from tests.support.promotion import promote, submit, tree_bytes

OLD, NEW, OTHER = b"print('v1')\n", b"print('approved')\n", b"print('other')\n"


def _decisions(daemon: Daemon, operation_id: str) -> list[dict[str, Any]]:
    with daemon.orchestrator() as orch:
        view = orch.get(f"/v1/operations/{operation_id}").json()
    assert view["events_verified"] is True
    return [e["payload"] for e in view["events"] if e["kind"] == "decision"]


def test_required_by_the_repository_holds_then_reject_writes_nothing(
    gated: tuple[Daemon, Path, str],
) -> None:
    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 202, answer.text
    operation_id = answer.json()["operation_id"]
    assert answer.json()["status"] == "awaiting_approval"
    with daemon.operator() as operator:
        listed = operator.get("/v1/operations", params={"status": "awaiting_approval"}).json()
        assert [o["operation_id"] for o in listed["operations"]] == [operation_id]
        rejected = operator.post(
            f"/v1/operations/{operation_id}/reject", json={"note": "too broad", "by": "ana"}
        )
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["status"] == "refused"
    assert rejected.json()["code"] == "approval_rejected"
    assert rejected.json()["steps"] == []
    assert tree_bytes(repo) == before
    (decision,) = _decisions(daemon, operation_id)
    assert decision["approval"] == "rejected"
    assert decision["by"] == {"role": "operator", "name": "operator"}  # the credential
    assert decision["claimed_by"] == "ana"  # what the body said, deciding nothing
    assert decision["note"] == "too broad"
    assert decision["bundle_sha256"] == bundle["bundle_sha256"]
    # asking again is refused: a rejection is final (protocol: runs#approvals)
    again = promote(daemon, bundle, receipt)
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "approval_rejected"
    assert tree_bytes(repo) == before
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    shown = CliRunner().invoke(app, ["ops", "show", operation_id], env=env, terminal_width=400)
    assert shown.exit_code == 0, shown.output
    assert (
        "next: Nothing was written. A rejection is final: asking again is refused. "
        f"`promoter reopen {operation_id} --note '...'` holds it for a decision again"
    ) in shown.output.replace("\n", "")


def test_required_by_the_grant_holds_then_approve_writes(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(
        daemon, repo, identity, [("src/app.py", OLD, NEW)], approval="required"
    )
    (repo / "notes.txt").write_bytes(b"the user's own\n")
    held = promote(daemon, bundle, receipt)
    assert held.json()["status"] == "awaiting_approval"
    operation_id = held.json()["operation_id"]
    assert (repo / "src" / "app.py").read_bytes() == OLD
    with daemon.operator() as operator:
        approved = operator.post(
            f"/v1/operations/{operation_id}/approve",
            json={"note": "looks right", "by": "ana", "wait": True},
        )
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "completed"
    assert (repo / "src" / "app.py").read_bytes() == NEW
    assert (repo / "notes.txt").read_bytes() == b"the user's own\n"
    decisions = _decisions(daemon, operation_id)
    assert decisions[0]["approval"] == "approved"
    assert decisions[0]["operation_id"] == operation_id
    assert decisions[1]["allowed"] is True  # the attempt's own decision, after its checks
    with daemon.operator() as operator:
        twice = operator.post(f"/v1/operations/{operation_id}/approve", json={})
    assert twice.status_code == 409
    assert twice.json()["code"] == "operation_conflict"


def test_an_approval_cannot_be_reused_for_a_different_bundle(
    gated: tuple[Daemon, Path, str],
) -> None:
    daemon, repo, identity = gated
    grant, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    changes: list[tuple[str, bytes | None, bytes | None]] = [("src/app.py", OLD, OTHER)]
    other = make_bundle(grant, changes)  # same grant, same base
    with daemon.executor(grant["executor_run_id"]) as ex:
        upload(ex, OTHER)
        submitted = ex.post("/v1/bundles", json=other)
        assert submitted.status_code == 201, submitted.text
    other_receipt = submitted.json()["verification_receipt"]
    first = promote(daemon, bundle, receipt).json()["operation_id"]
    second = promote(daemon, other, other_receipt).json()
    assert second["status"] == "awaiting_approval"
    assert second["operation_id"] != first
    with daemon.operator() as operator:
        ok = operator.post(f"/v1/operations/{first}/approve", json={"wait": True})
    assert ok.json()["status"] == "completed"
    # the other bundle still waits: asking again does not ride on the first approval
    again = promote(daemon, other, other_receipt)
    assert again.json()["status"] == "awaiting_approval"
    assert (repo / "src" / "app.py").read_bytes() == NEW
    (decision,) = [d for d in _decisions(daemon, first) if "approval" in d]
    assert decision["bundle_sha256"] == bundle["bundle_sha256"]
    assert _decisions(daemon, second["operation_id"]) == []


def test_a_standing_approval_survives_a_refused_attempt_of_the_same_operation(
    gated: tuple[Daemon, Path, str],
) -> None:
    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    (repo / "src" / "app.py").write_bytes(b"the user's edit\n")
    with daemon.operator() as operator:
        drifted = operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True})
    assert drifted.json()["status"] == "refused"
    assert drifted.json()["code"] == "target_drift"
    assert (repo / "src" / "app.py").read_bytes() == b"the user's edit\n"
    (repo / "src" / "app.py").write_bytes(OLD)
    again = promote(daemon, bundle, receipt)
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "completed"
    assert again.json()["operation_id"] == operation_id


def test_a_gated_request_still_checks_the_lease(gated: tuple[Daemon, Path, str]) -> None:
    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)], lease=False)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 409
    assert answer.json()["code"] == "lease_stale"
    with daemon.operator() as operator:
        listed = operator.get("/v1/operations").json()["operations"]
    assert listed == []


def test_orchestrator_and_executor_cannot_approve(gated: tuple[Daemon, Path, str]) -> None:
    daemon, repo, identity = gated
    grant, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    with daemon.orchestrator() as orch, daemon.executor(grant["executor_run_id"]) as ex:
        for client in (orch, ex):
            answer = client.post(f"/v1/operations/{operation_id}/approve", json={})
            assert answer.status_code == 403
            assert answer.json()["code"] == "forbidden"
    assert (repo / "src" / "app.py").read_bytes() == OLD
    with daemon.operator() as operator:
        bad = operator.post(f"/v1/operations/{operation_id}/approve", json={"note": 3})
    assert bad.status_code == 422


def _app() -> typer.Typer:
    app = typer.Typer()
    review_cmd.register(app)
    app.command("noop")(lambda: None)
    return app


def test_review_approve_and_reject_commands(gated: tuple[Daemon, Path, str]) -> None:
    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    runner = CliRunner()
    listed = runner.invoke(_app(), ["review"], env=env)
    assert listed.exit_code == 0, listed.output
    assert f"{operation_id} awaiting approval" in listed.stdout
    assert "-print('v1')\n+print('approved')\n" in listed.stdout
    approved = runner.invoke(_app(), ["approve", operation_id, "--note", "ok"], env=env)
    assert approved.exit_code == 0, approved.output
    assert f"operation {operation_id} completed" in approved.stdout
    assert (repo / "src" / "app.py").read_bytes() == NEW
    empty = runner.invoke(_app(), ["review"], env=env)
    assert empty.stdout == "nothing awaits approval\n"
    done = runner.invoke(_app(), ["review", operation_id], env=env)
    assert isinstance(done.exception, OperationConflict), done.output
    assert done.exception.detail == (
        f"operation {operation_id} is not awaiting approval: it is completed "
        f"(promoter ops show {operation_id})"
    )
    rejected = runner.invoke(_app(), ["reject", operation_id], env=env)
    assert isinstance(rejected.exception, OperationConflict), rejected.output


def test_approve_of_a_rejected_promotion_names_reopen(gated: tuple[Daemon, Path, str]) -> None:
    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    env = {"PROMOTER_URL": daemon.url, "PROMOTER_TOKEN": daemon.operator_token}
    runner = CliRunner()
    rejected = runner.invoke(_app(), ["reject", operation_id, "--note", "no"], env=env)
    assert rejected.exit_code == 0, rejected.output
    again = runner.invoke(_app(), ["approve", operation_id], env=env)
    assert isinstance(again.exception, OperationConflict), again.output
    assert again.exception.detail == (
        f"operation {operation_id} is refused, not awaiting_approval; it was rejected: "
        f"promoter reopen {operation_id}"
    )
    assert (repo / "src" / "app.py").read_bytes() == OLD


def test_a_standing_approval_does_not_outlive_the_grant(
    gated: tuple[Daemon, Path, str],
) -> None:
    from promoter.engine.intake.grants import load_grant
    from promoter.engine.review import approval
    from promoter.store import journal

    daemon, repo, identity = gated
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
    (repo / "src" / "app.py").write_bytes(b"the user's edit\n")
    with daemon.operator() as operator:
        operator.post(f"/v1/operations/{operation_id}/approve", json={"wait": True})
    grant = load_grant(daemon.services, "grt_test1")
    expired = grant.model_copy(update={"expires_at": "2020-01-02T00:00:00Z"})
    with daemon.services.db.session() as session:
        row = journal.require(session, operation_id)
        assert row.status == "refused"
        assert approval.approved(session, row, grant) is True
        assert approval.approved(session, row, expired) is False
        forged = dataclasses.replace(
            row, bundle_sha256="0" * 64
        )  # hashes that do not derive its id
        assert approval.approved(session, forged, grant) is False
        session.rollback()
