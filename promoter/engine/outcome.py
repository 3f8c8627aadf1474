"""How a promotion attempt ends (SPEC §5.4 step 7, §5.7): read-back, check, receipt.

After the writes every target is read back through a descriptor chain. All exactly new:
the optional post-promotion check runs (``applied_unverified`` meanwhile), then the
``outcome`` event and the PatchPromotionReceiptV1 are recorded once in the operation's row,
the same bytes are written to the audit store, and only then is the operation
``completed`` (a re-run after a crash reuses the recorded receipt, so the row and the audit
file never differ). Anything else fails closed as ``needs_reconciliation`` with a per-path
report; under the repository's ``on_write_failure = "rollback"`` a failed write then rolls
back what the attempt wrote, by compare-and-swap (``promoter.engine.rollback``). The writes
themselves are ``promoter.engine.promote``'s.

Fault points: ``after_readback``, ``before_check``, ``before_receipt``, ``after_receipt``.
"""

from __future__ import annotations

from typing import Any

from promoter import faults
from promoter.domain.canonical import canonical_bytes, rfc3339, sha256_hex, utcnow
from promoter.domain.documents import seal_receipt
from promoter.domain.models import Change, PatchPromotionReceiptV1
from promoter.engine import ledger
from promoter.engine.authority import Evidence
from promoter.engine.check import run_check
from promoter.engine.inspect import classify, leaf_report, spec
from promoter.engine.repos import Repository
from promoter.engine.rollback import rollback_held
from promoter.engine.services import Services
from promoter.errors import PromoterError
from promoter.fs.chain import Root
from promoter.store import journal, repo


def finish(
    services: Services,
    operation_id: str,
    root: Root,
    changes: list[Change],
    evidence: Evidence,
    failure: tuple[int, PromoterError] | None,
) -> None:
    """Read every target back; complete with a receipt, or fail closed."""
    paths: list[dict[str, Any]] = []
    all_new = failure is None
    for change in changes:
        try:
            leaf = root.read_state(change.path)
            verdict, actual = classify(leaf, change), leaf_report(leaf)
        except PromoterError as exc:
            verdict, actual = "neither", {"error": exc.code, "detail": exc.detail}
        all_new = all_new and verdict == "new"
        paths.append(
            {
                "path": change.path,
                "verdict": verdict,
                "actual": actual,
                "expected_old": spec(change.old),
                "expected_new": spec(change.new),
            }
        )
    faults.point("after_readback")
    if not all_new:
        fail_closed(services, operation_id, paths, failure)
        repository = services.registry.by_identity(evidence.grant.repository_identity)
        if failure is not None and repository.config.on_write_failure == "rollback":
            note = f"on_write_failure = rollback: [{failure[1].code}] {failure[1].detail}"
            rollback_held(services, operation_id, root, note)  # by CAS, under the same lock
        return
    repository = services.registry.by_identity(evidence.grant.repository_identity)
    if repository.config.check_command and not post_check(
        services, operation_id, root, repository, paths
    ):
        return
    complete(services, operation_id, changes, evidence, paths)


def post_check(
    services: Services,
    operation_id: str,
    root: Root,
    repository: Repository,
    paths: list[dict[str, Any]],
) -> bool:
    """Run the repository's check; True when it passed (the caller completes)."""
    config = repository.config
    assert config.check_command is not None
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        journal.mark_all_steps(session, operation_id, "completed")
        journal.set_status(session, row, "applied_unverified")
    faults.point("before_check")
    result = run_check(config.check_command, repository.worktree, config.check_timeout)
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        ledger.append(session, operation_id, "decision", {"check": result.wire()})
        row.report = {**(row.report or {}), "check": result.wire(), "paths": paths}
    if result.passed:
        return True
    detail = (
        f"the post-promotion check {'timed out' if result.timed_out else 'failed'}"
        f" (exit code {result.exit_code})"
    )
    if config.on_check_failure == "rollback":
        rollback_held(services, operation_id, root, detail)
        return False
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        ledger.append(
            session,
            operation_id,
            "outcome",
            {"status": "needs_reconciliation", "code": "check_failed", "detail": detail},
        )
        journal.set_status(session, row, "needs_reconciliation", code="check_failed", detail=detail)
    return False


def fail_closed(
    services: Services,
    operation_id: str,
    paths: list[dict[str, Any]],
    failure: tuple[int, PromoterError] | None,
) -> None:
    code = failure[1].code if failure else "target_drift"
    detail = failure[1].detail if failure else "a target did not read back as its new state"
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        for step, path in zip(journal.steps(session, operation_id), paths, strict=True):
            if path["verdict"] == "new":
                step.status = "completed"
            elif (failure and step.seq == failure[0]) or path["verdict"] == "neither":
                step.status = "failed"
                step.detail = (
                    detail
                    if failure and step.seq == failure[0]
                    else "read back as neither old nor new"
                )
        ledger.append(
            session,
            operation_id,
            "outcome",
            {"status": "needs_reconciliation", "code": code, "detail": detail},
        )
        report = {**(row.report or {}), "paths": paths, "error": {"code": code, "detail": detail}}
        journal.set_status(
            session, row, "needs_reconciliation", code=code, detail=detail, report=report
        )


def build_receipt(
    operation_id: str,
    evidence: Evidence,
    repository_identity: str,
    targets: list[dict[str, Any]],
    events: dict[str, str],
) -> PatchPromotionReceiptV1:
    document = {
        "schema": "PatchPromotionReceiptV1",
        "operation_id": operation_id,
        "repository_identity": repository_identity,
        "grant_id": evidence.grant.grant_id,
        "grant_sha256": evidence.grant.grant_sha256,
        "bundle_id": evidence.bundle.bundle_id,
        "bundle_sha256": evidence.bundle.bundle_sha256,
        "verification_receipt_sha256": evidence.receipt_sha256,
        "targets": sorted(targets, key=lambda t: t["path"].encode()),
        "events": events,
        "promoted_at": rfc3339(utcnow()),
    }
    return PatchPromotionReceiptV1.model_validate(seal_receipt(document))


def complete(
    services: Services,
    operation_id: str,
    changes: list[Change],
    evidence: Evidence,
    paths: list[dict[str, Any]],
) -> None:
    targets = [
        {"path": c.path, "exists": c.new.exists, "sha256": c.new.sha256, "mode": c.new.mode}
        for c in changes
    ]
    faults.point("before_receipt")
    with services.db.session() as session:  # (1) the receipt is recorded once; a re-run reuses it
        row = journal.require(session, operation_id)
        journal.mark_all_steps(session, operation_id, "completed")
        if row.receipt is None:
            outcome = ledger.append(
                session,
                operation_id,
                "outcome",
                {"status": "completed", "targets_sha256": sha256_hex(canonical_bytes(targets))},
            )
            events = dict((row.report or {}).get("events", {}))
            receipt = build_receipt(
                operation_id,
                evidence,
                row.repository_identity,
                targets,
                {**events, "outcome": outcome},
            )
            row.receipt = receipt.wire()
            row.receipt_sha256 = receipt.receipt_sha256
        data = canonical_bytes(row.receipt)
    # (2) the same bytes into the audit store, fsynced: identical bytes already there are
    # reused, different ones raise and are never overwritten; (3) only then completed.
    services.audit.put("promotion", operation_id, data)
    faults.point("after_receipt")
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        report = {k: v for k, v in (row.report or {}).items() if k != "paths"}
        row.report = {**report, "events": dict((row.receipt or {})["events"])}
        journal.set_status(session, row, "completed")
        repo.set_bundle_state(session, evidence.bundle.bundle_id, "promoted")
