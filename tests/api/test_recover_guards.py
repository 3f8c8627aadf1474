"""W7: one guard for every kind (protocol: recovery#guards), and receipts that never disagree.

``recover`` acts only on ``needs_recovery``; ``needs_reconciliation`` moves only by the
operator's ``reconcile``; a final operation never runs again, whatever its kind
(promotion, rollback, restore). Each refusal answers a stable code and writes nothing.
Every receipt route serves exactly the bytes of the audit file and of the database row.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from promoter import faults
from promoter.domain import status as states
from promoter.domain.models import PromotionEvents, Target
from promoter.engine.intake.authority import recheck_evidence
from promoter.engine.operation.outcome import build_receipt
from promoter.engine.operation.recover import auto_recover
from promoter.engine.operation.rollback import rollback_id
from promoter.errors import Forbidden, NotRecoverable, OperationConflict, PromoterError
from promoter.store import journal, ledger
from tests.support.daemon import Daemon, running_daemon, serve_lab
from tests.support.flows import sha
from tests.support.promotion import (
    completed,
    git_dir_digest,
    operation_view,
    promote,
    submit,
    tree_bytes,
    unchanged,
)

FILES = {"src/app.py": b"print('v1')\n", "src/util.py": b"def f():\n    return 1\n"}
CHANGES = [
    ("src/app.py", FILES["src/app.py"], b"print('v2')\n"),
    ("src/util.py", FILES["src/util.py"], b"def f():\n    return 2\n"),
]
USER = b"the user's own edit, after everything was finished\n"


pytestmark = pytest.mark.repo("lab", FILES)


def _identity(daemon: Daemon) -> str:
    return daemon.services.registry.by_name("lab").identity


def _completed(daemon: Daemon, repo: Path) -> str:
    return completed(daemon, repo, CHANGES)


def _promoted_under(
    monkeypatch: pytest.MonkeyPatch, spec: str, daemon: Daemon, *submitted: Any
) -> Any:
    """The view of a promotion of ``submitted`` (bundle, receipt) made with the faults of
    ``spec``, which are gone again afterwards."""
    monkeypatch.setenv(faults.ENV, spec)
    faults.reset()
    view = promote(daemon, *submitted).json()
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    return view


def _audit(daemon: Daemon) -> dict[str, bytes]:
    root = daemon.state_dir / "audit" / "receipts"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.json")}


def test_recover_on_finished_rollback_is_refused_and_writes_nothing(
    daemon: Daemon, repo: Path
) -> None:
    op_id = _completed(daemon, repo)
    with daemon.operator() as op:
        answer = op.post(f"/v1/operations/{op_id}/rollback")
    assert json.loads(answer.content)["status"] == "rolled_back"
    child = rollback_id(op_id)
    (repo / "src" / "app.py").write_bytes(USER)  # the user goes on working,
    (repo / "src" / "util.py").write_bytes(CHANGES[1][2])  # and re-types the new version
    before, git_before, audit_before = tree_bytes(repo), git_dir_digest(repo), _audit(daemon)
    views = {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)}
    for client in (daemon.orchestrator(), daemon.operator()):
        with client:
            for target in (child, op_id):
                refused = client.post(f"/v1/operations/{target}/recover", json={"fence": 7})
                assert refused.status_code == 409, refused.text
                problem = refused.json()
                assert (problem["code"], problem["current_status"]) == (
                    "not_recoverable",
                    "rolled_back",
                )
                assert problem["kind"] == ("rollback" if target == child else "promotion")
    assert (repo / "src" / "app.py").read_bytes() == USER
    assert (repo / "src" / "util.py").read_bytes() == CHANGES[1][2]
    assert tree_bytes(repo) == before
    assert git_dir_digest(repo) == git_before
    assert _audit(daemon) == audit_before
    assert {i: unchanged(operation_view(daemon, i)) for i in (op_id, child)} == views


def _restore_needing_reconciliation(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, tuple[bytes, int]]]:
    base = "/v1/repositories/lab/snapshots"
    original = tree_bytes(repo)
    with daemon.operator() as op:
        first = op.post(base, json={"label": "before"}).json()["tree"]
        (repo / "src" / "app.py").write_bytes(b"print('broken')\n")
        (repo / "src" / "util.py").write_bytes(b"broken too\n")
        current = op.post(base, json={"label": "after"}).json()["tree"]
        monkeypatch.setenv(faults.ENV, "after_replace=EIO@2")
        faults.reset()
        answer = op.post(f"{base}/{first}/restore", json={"expected_current_tree": current})
        monkeypatch.delenv(faults.ENV)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "needs_reconciliation", answer.json()
    return str(answer.json()["operation_id"]), original


def test_recover_on_restore_awaiting_reconciliation_is_refused(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op_id, original = _restore_needing_reconciliation(daemon, repo, monkeypatch)
    before, view = tree_bytes(repo), unchanged(operation_view(daemon, op_id))
    assert view[0] == "needs_reconciliation"
    for client in (daemon.orchestrator(), daemon.operator()):
        with client:
            refused = client.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert refused.status_code == 409, refused.text
        problem = refused.json()
        assert (problem["code"], problem["kind"], problem["current_status"], problem["next"]) == (
            "not_recoverable",
            "restore",
            "needs_reconciliation",
            "reconcile",
        )
    assert tree_bytes(repo) == before
    assert unchanged(operation_view(daemon, op_id)) == view
    with daemon.orchestrator() as orch:
        forbidden = orch.post(
            f"/v1/operations/{op_id}/reconcile", json={"decision": "continue", "note": "x"}
        )
    assert (forbidden.status_code, forbidden.json()["code"]) == (403, "forbidden")
    assert tree_bytes(repo) == before
    with daemon.operator() as op:
        rollback = op.post(f"/v1/operations/{op_id}/reconcile", json={"decision": "rollback"})
        assert (rollback.status_code, rollback.json()["code"]) == (409, "operation_conflict")
        done = op.post(f"/v1/operations/{op_id}/reconcile", json={"decision": "continue"})
    assert done.json()["status"] == "completed", done.json()
    assert tree_bytes(repo) == original


def test_orchestrator_cannot_reconcile(tmp_path: Path, repo: Path) -> None:
    for daemon in serve_lab(tmp_path, repo, check_command=["false"]):
        _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
        op_id = promote(daemon, bundle, receipt).json()["operation_id"]
        before, view = tree_bytes(repo), unchanged(operation_view(daemon, op_id))
        assert view[0] == "needs_reconciliation"
        with daemon.orchestrator() as orch:
            for decision in ("continue", "rollback", "abandon"):
                answer = orch.post(f"/v1/operations/{op_id}/reconcile", json={"decision": decision})
                assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")
            recovered = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
            assert (recovered.status_code, recovered.json()["code"]) == (409, "not_recoverable")
        assert tree_bytes(repo) == before
        assert unchanged(operation_view(daemon, op_id)) == view
        assert not (daemon.state_dir / "audit" / "receipts" / "rollback").exists()


def test_recover_on_completed_promotion_never_runs_again(daemon: Daemon, repo: Path) -> None:
    op_id = _completed(daemon, repo)
    with daemon.orchestrator() as orch:
        receipt = orch.get(f"/v1/operations/{op_id}/receipt").content
    (repo / "src" / "util.py").write_bytes(USER)
    (repo / "src" / "app.py").write_bytes(FILES["src/app.py"])  # back to old by hand
    before, view, audit = tree_bytes(repo), unchanged(operation_view(daemon, op_id)), _audit(daemon)
    with daemon.orchestrator() as orch:
        for fence in (7, 8):
            refused = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": fence})
            assert refused.status_code == 409, refused.text
            assert (refused.json()["code"], refused.json()["current_status"]) == (
                "not_recoverable",
                "completed",
            )
        assert orch.get(f"/v1/operations/{op_id}/receipt").content == receipt
    assert tree_bytes(repo) == before
    assert unchanged(operation_view(daemon, op_id)) == view
    assert _audit(daemon) == audit


# --- the guard itself, every (kind, status, action, role) --------------------------------

ROLES = ("executor", "orchestrator", "operator", "host")
DECISIONS = ("continue", "rollback", "abandon")


def _expected(kind: str, status: str, action: str, role: str, decision: str | None) -> str:
    """The guard (protocol: recovery#guards), written out independently of the implementation."""
    if action == "recover":
        if status != "needs_recovery":
            return "not_recoverable"
        operators = {"operator", "host"}
        allowed = operators if kind in ("rollback", "restore") else operators | {"orchestrator"}
        return "ok" if role in allowed else "forbidden"
    if role != "operator":
        return "forbidden"
    if status != "needs_reconciliation":
        return "operation_conflict"
    if kind != "promotion" and decision == "rollback":
        return "operation_conflict"
    return "ok"


def _outcome(kind: str, status: str, action: str, role: str, decision: str | None) -> str:
    try:
        states.guard(kind, status, action, role=role, decision=decision)  # type: ignore[arg-type]
    except PromoterError as exc:
        return exc.code
    return "ok"


def test_guard_contract_for_every_kind_status_action_and_role() -> None:
    statuses = states.STATUSES
    assert set(statuses) == {
        "awaiting_approval",
        "in_progress",
        "applied_unverified",
        "needs_recovery",
        "needs_reconciliation",
        "completed",
        "refused",
        "rolled_back",
        "rollback_partial",
        "rollback_failed",
        "abandoned",
    }
    cases = [
        *(
            (k, s, "recover", r, None)
            for k, s, r in itertools.product(states.KINDS, statuses, ROLES)
        ),
        *(
            (k, s, "reconcile", r, d)
            for k, s, r, d in itertools.product(states.KINDS, statuses, ROLES, DECISIONS)
        ),
    ]
    table = {case: _outcome(*case) for case in cases}
    assert table == {case: _expected(*case) for case in cases}
    # nothing final ever runs again, for any kind, role or decision
    for (_, status, _, _, _), got in table.items():
        if status in states.FINAL:
            assert got != "ok"
    assert {c[0] for c, got in table.items() if got == "ok" and c[2] == "recover"} == set(
        states.KINDS
    )
    assert issubclass(NotRecoverable, PromoterError) and NotRecoverable.http_status == 409
    assert {NotRecoverable.code, OperationConflict.code, Forbidden.code} == {
        "not_recoverable",
        "operation_conflict",
        "forbidden",
    }
    with pytest.raises(PromoterError) as bad:
        states.guard(
            "promotion", "needs_reconciliation", "reconcile", role="operator", decision="merge"
        )
    assert bad.value.code == "validation_failed"


def test_startup_recovery_goes_through_the_guard(tmp_path: Path, repo: Path) -> None:
    state = tmp_path / "state"
    with running_daemon(state, {"lab": repo}) as daemon:
        op_id = _completed(daemon, repo)
        with daemon.operator() as op:
            op.post(f"/v1/operations/{op_id}/rollback")
        (repo / "src" / "app.py").write_bytes(USER)
    ids = [op_id, rollback_id(op_id)]
    before = tree_bytes(repo)
    with running_daemon(state, {"lab": repo}, auto_recover=True) as again:
        auto_recover(again.services, ids)  # as if the start-up scan had listed them
        with again.services.db.session() as session:
            found = {i: journal.require(session, i).status for i in ids}
    assert found == {op_id: "rolled_back", rollback_id(op_id): "rolled_back"}
    assert tree_bytes(repo) == before


# --- database row and audit file of every receipt ----------------------------------------


def _row_bytes(daemon: Daemon, operation_id: str) -> bytes:
    with daemon.services.db.session() as session:
        row = journal.require(session, operation_id)
        assert row.receipt is not None
        data = rfc8785.dumps(row.receipt)
        assert row.receipt_sha256 == json.loads(data)["receipt_sha256"]
        return data


def _payload(envelope: bytes) -> bytes:
    """The receipt an envelope signs: its in-toto Statement's predicate
    (protocol: bundles#signed-receipts)."""
    statement = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
    return bytes(rfc8785.dumps(statement["predicate"]))


def test_every_receipt_route_serves_the_bytes_of_the_row_and_the_audit_file(
    daemon: Daemon, repo: Path
) -> None:
    audit = daemon.state_dir / "audit" / "receipts"
    _, bundle, verification = submit(daemon, repo, _identity(daemon), CHANGES)
    bundle_id = bundle["bundle_id"]
    view = promote(daemon, bundle, verification).json()
    op_id = view["operation_id"]
    with daemon.orchestrator() as orch:
        served = {
            "verification": orch.get(f"/v1/bundles/{bundle_id}/verification").content,
            "verification.dsse": _payload(
                orch.get(f"/v1/bundles/{bundle_id}/verification.dsse").content
            ),
            "promotion": orch.get(f"/v1/operations/{op_id}/receipt").content,
            "promotion.dsse": _payload(orch.get(f"/v1/operations/{op_id}/receipt.dsse").content),
        }
    with daemon.operator() as op:
        served["rollback"] = op.post(f"/v1/operations/{op_id}/rollback").content
        served["rollback.again"] = op.post(f"/v1/operations/{op_id}/rollback").content
    with daemon.orchestrator() as orch:
        served["rollback.dsse"] = _payload(
            orch.get(f"/v1/operations/{op_id}/rollback-receipt.dsse").content
        )
    promotion_file = (audit / "promotion" / f"{op_id}.json").read_bytes()
    rollback_file = (audit / "rollback" / f"{op_id}.json").read_bytes()
    verification_file = (audit / "verification" / f"{bundle_id}.json").read_bytes()
    assert served["promotion"] == served["promotion.dsse"] == promotion_file
    assert promotion_file == _row_bytes(daemon, op_id)
    assert view["receipt_sha256"] == json.loads(promotion_file)["receipt_sha256"]
    assert served["rollback"] == served["rollback.again"] == served["rollback.dsse"]
    assert served["rollback"] == rollback_file == _row_bytes(daemon, rollback_id(op_id))
    assert served["verification"] == served["verification.dsse"] == verification_file
    assert (
        hashlib.sha256(verification_file).hexdigest()
        == hashlib.sha256(rfc8785.dumps(json.loads(verification_file))).hexdigest()
    )


def test_a_copy_that_failed_after_the_commit_is_written_when_the_receipt_is_read(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receipt is part of the outcome's commit (protocol: storage#receipt-in-outcome-commit): a
    copy that could not be written after it leaves the operation completed, and the first read writes it."""
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    view = _promoted_under(monkeypatch, "audit_promotion_after_create=EIO", daemon, bundle, receipt)
    assert view["status"] == "completed", view
    op_id = view["operation_id"]
    path = daemon.state_dir / "audit" / "receipts" / "promotion" / f"{op_id}.json"
    assert not path.exists()
    with daemon.orchestrator() as orch:
        served = orch.get(f"/v1/operations/{op_id}/receipt").content
    assert served == _row_bytes(daemon, op_id) == path.read_bytes()
    outcomes = [e for e in operation_view(daemon, op_id)["events"] if e["kind"] == "outcome"]
    assert len(outcomes) == 1


def test_a_receipt_recorded_before_its_status_by_the_two_commit_outcome_is_the_one_completed(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row left with its receipt recorded and not completed (the outcome in two commits,
    interrupted between them) is completed by recovery with exactly that receipt."""
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    view = _promoted_under(monkeypatch, "before_receipt=EIO", daemon, bundle, receipt)
    assert view["status"] == "needs_recovery", view
    op_id = view["operation_id"]
    evidence = recheck_evidence(daemon.services, bundle["bundle_id"], receipt["receipt_sha256"])
    targets = [
        Target(path=p, exists=new is not None, sha256=sha(new), mode="100644")
        for p, _old, new in CHANGES
        if new is not None
    ]
    with daemon.services.db.session() as session:  # the first of the two commits
        row = journal.require(session, op_id)
        outcome = ledger.append(session, op_id, "outcome", {"status": "completed"})
        journal.set_outcome_event(session, op_id, outcome)
        assert row.decision_event_id is not None and row.action_event_id is not None
        events = PromotionEvents(
            decision=row.decision_event_id, action=row.action_event_id, outcome=outcome
        )
        old = build_receipt(op_id, evidence, row.repository_identity, targets, events)
        journal.set_receipt(session, op_id, old.wire(), old.receipt_sha256)
    with daemon.orchestrator() as orch:
        done = orch.post(f"/v1/operations/{op_id}/recover", json={"fence": 7})
        assert done.json()["status"] == "completed", done.json()
        served = orch.get(f"/v1/operations/{op_id}/receipt").content
    assert json.loads(served)["receipt_sha256"] == old.receipt_sha256
    assert served == _row_bytes(daemon, op_id)
    assert [e["kind"] for e in done.json()["events"]].count("outcome") == 1


def test_a_different_audit_file_is_set_aside_never_served_and_the_copy_made_again(
    daemon: Daemon, repo: Path
) -> None:
    _, bundle, receipt = submit(daemon, repo, _identity(daemon), CHANGES)
    op_id = promote(daemon, bundle, receipt).json()["operation_id"]
    recorded = _row_bytes(daemon, op_id)
    folder = daemon.state_dir / "audit" / "receipts" / "promotion"
    path = folder / f"{op_id}.json"
    assert path.read_bytes() == recorded
    foreign = recorded.replace(b'"promoted_at":"', b'"promoted_at":"1')
    path.chmod(0o644)
    path.write_bytes(foreign)
    with daemon.orchestrator() as orch:
        served = orch.get(f"/v1/operations/{op_id}/receipt").content
    assert served == recorded == path.read_bytes()
    kept = sorted(p for p in folder.iterdir() if p.name.startswith(f".{op_id}.json.damaged-"))
    assert [p.read_bytes() for p in kept] == [foreign]  # its bytes kept, never served
    assert _row_bytes(daemon, op_id) == recorded
    assert operation_view(daemon, op_id)["status"] == "completed"
