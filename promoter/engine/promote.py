"""Running one promotion attempt: the host protocol of SPEC §5.4, steps 1 to 7.

Authority and evidence first (refused on failure), then the repository lock, the
read-back under the lock (refused with a drift report on any difference), the journal
(steps plus ``decision`` and ``action`` events in one transaction), the writes in two
batches (every temp file written and fsynced, journaled, then every replace/unlink in
bundle order, one fsync per parent directory), the read-back of every target, and the
``outcome`` event with the receipt. Anything unexpected once writing has begun fails
closed: ``needs_reconciliation`` with a per-path report. Requests, idempotency and
scheduling live in ``promoter.engine.operations``.

Fault points: ``before_journal``, ``after_journal``, ``after_temps_journaled``,
``after_replaces``, ``after_readback``, ``before_receipt``, ``after_receipt`` (plus the
fs layer's own).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from promoter import faults
from promoter.domain.canonical import canonical_bytes, rfc3339, sha256_hex, utcnow
from promoter.domain.documents import canonical, seal_receipt
from promoter.domain.models import Change, PatchPromotionReceiptV1
from promoter.engine import ledger, snapshots
from promoter.engine.authority import Evidence, check_authority, recheck_evidence
from promoter.engine.check import run_check
from promoter.engine.inspect import classify, inspect, leaf_report, spec
from promoter.engine.locking import repo_lock
from promoter.engine.repos import Repository
from promoter.engine.rollback import rollback_held
from promoter.engine.services import Services
from promoter.errors import PromoterError, TargetDrift, WriteFailed
from promoter.fs.atomic import Parent
from promoter.fs.chain import ExpectedState, Root
from promoter.fs.lock import RepoLock
from promoter.store import journal, repo
from promoter.store.tables import OperationRow

log = logging.getLogger("promoter.promote")


def targets_digest(changes: list[Change]) -> str:
    """sha256 of what the action is about to write: every path, operation and new state."""
    listed = [{"path": c.path, "operation": c.operation, "new": spec(c.new)} for c in changes]
    return sha256_hex(canonical_bytes(listed))


def expected(state: Any) -> ExpectedState:
    return ExpectedState(state.exists, state.sha256, state.mode)


def refuse(services: Services, operation_id: str, error: PromoterError, **extra: Any) -> None:
    """Close the attempt as ``refused``: nothing was written."""
    payload = {"allowed": False, "code": error.code, "detail": error.detail, **extra}
    with services.db.session() as session:
        row = _row(session, operation_id)
        ledger.append(session, operation_id, "decision", payload)
        ledger.append(session, operation_id, "outcome", {"status": "refused", "code": error.code})
        report = {"error": error.to_problem(), **extra}
        journal.set_status(
            session, row, "refused", code=error.code, detail=error.detail, report=report
        )


def _row(session: Any, operation_id: str) -> OperationRow:
    row = journal.get_operation(session, operation_id)
    assert row is not None, operation_id
    return row


@dataclass
class Batch:
    """The in-flight writes of one attempt."""

    changes: list[Change]
    parents: dict[int, Parent] = field(default_factory=dict)
    temps: dict[int, str] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)

    def close(self) -> None:
        for parent in self.parents.values():
            parent.close()

    def drop_temps(self, from_seq: int = 0) -> None:
        for seq, temp in list(self.temps.items()):
            if seq >= from_seq:
                try:
                    self.parents[seq].remove_temp(temp)
                except (PromoterError, OSError):
                    log.warning("could not remove temp file %s", temp)
                self.temps.pop(seq, None)


def run(services: Services, operation_id: str, fence: int) -> None:
    """Carry out one attempt of a promotion; every outcome is journaled."""
    with services.db.session() as session:
        row = _row(session, operation_id)
        bundle_id, receipt_sha = row.bundle_id, row.verification_receipt_sha256
    assert bundle_id is not None and receipt_sha is not None
    try:
        evidence = recheck_evidence(services, bundle_id, receipt_sha)
        check_authority(services, evidence.grant, fence)
        repository = services.registry.by_identity(evidence.grant.repository_identity)
    except PromoterError as exc:
        refuse(services, operation_id, exc)
        return
    lock = repo_lock(services, repository)
    try:
        lock.acquire()
    except PromoterError as exc:
        refuse(services, operation_id, exc)
        return
    try:
        _locked(services, operation_id, fence, evidence, repository, lock)
        if repository.config.snapshots:
            _snapshot(services, repository, operation_id, "post")
    finally:
        lock.release()


def _snapshot(services: Services, repository: Repository, operation_id: str, which: str) -> None:
    """Record a pre/post shadow snapshot of the worktree; a failure is logged, not fatal."""
    try:
        snapshots.capture_for_operation(services, repository, operation_id, which)  # type: ignore[arg-type]
    except PromoterError as exc:
        log.warning("%s snapshot of %s failed: %s", which, operation_id, exc.detail)


def _locked(
    services: Services,
    operation_id: str,
    fence: int,
    evidence: Evidence,
    repository: Repository,
    lock: RepoLock,
) -> None:
    try:
        check_authority(services, evidence.grant, fence)  # again: time passed while waiting
        root = Root.open(repository.worktree)
    except PromoterError as exc:
        refuse(services, operation_id, exc)
        return
    with root:
        try:
            readback = inspect(repository.layout, root, evidence.grant, evidence.bundle)
        except PromoterError as exc:
            refuse(services, operation_id, exc)
            return
        if not readback.ok:
            drift = TargetDrift(
                "the repository is not in an authorized old state",
                drifted=readback.drifted,
            )
            refuse(services, operation_id, drift, drift_report=readback.report())
            return
        if repository.config.snapshots:
            _snapshot(services, repository, operation_id, "pre")
        faults.point("before_journal")
        changes = list(evidence.bundle.changes)
        with services.db.session() as session:
            row = _row(session, operation_id)
            journal.delete_steps(session, operation_id)
            session.flush()
            journal.add_steps(
                session,
                operation_id,
                [
                    {
                        "path": c.path,
                        "operation": c.operation,
                        "old": c.old.wire(),
                        "new": c.new.wire(),
                    }
                    for c in changes
                ],
            )
            decision = ledger.append(
                session,
                operation_id,
                "decision",
                {
                    "allowed": True,
                    "fence": fence,
                    "bundle_sha256": evidence.bundle.bundle_sha256,
                    "verification_receipt_sha256": evidence.receipt_sha256,
                    "already_new": [p["path"] for p in readback.paths if p["verdict"] == "new"],
                },
            )
            action = ledger.append(
                session,
                operation_id,
                "action",
                {"target_count": len(changes), "targets_sha256": targets_digest(changes)},
            )
            row.report = {"events": {"decision": decision, "action": action}}
        faults.point("after_journal")
        apply_changes(services, operation_id, root, lock, changes, evidence)


def apply_changes(
    services: Services,
    operation_id: str,
    root: Root,
    lock: RepoLock,
    changes: list[Change],
    evidence: Evidence,
    *,
    todo: set[int] | None = None,
    recovering: bool = False,
) -> None:
    """Write the steps in ``todo`` (default: all), then read back every target."""
    batch = Batch(changes)
    wanted = set(range(len(changes))) if todo is None else todo
    try:
        _stage_temps(services, operation_id, root, batch, wanted)
    except (PromoterError, OSError) as exc:
        if isinstance(exc, PromoterError):  # directories made before the failing step
            batch.created_dirs.extend(exc.context.get("created_dirs", []))
        batch.drop_temps()
        _remove_dirs(root, batch.created_dirs)
        batch.close()
        error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
        if recovering:
            raise error from exc
        refuse(services, operation_id, error, stage="staging temp files")
        return
    failure: tuple[int, PromoterError] | None = None
    try:
        lock.check_held()
        for seq, change in enumerate(changes):
            if seq not in wanted:
                continue
            try:
                _apply_one(root, batch, seq, change)
            except (PromoterError, OSError) as exc:
                error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
                failure = (seq, error)
                batch.drop_temps(seq)
                break
        faults.point("after_replaces")
        _fsync_parents(batch)
    except (PromoterError, OSError) as exc:
        error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
        failure = failure or (-1, error)
    finally:
        batch.close()
    finish(services, operation_id, root, changes, evidence, failure)


def _stage_temps(
    services: Services, operation_id: str, root: Root, batch: Batch, wanted: set[int]
) -> None:
    for seq, change in enumerate(batch.changes):
        if not change.new.exists or seq not in wanted:
            continue
        assert change.new.sha256 is not None and change.new.mode is not None
        parent = root.open_parent(change.path, create=True)
        batch.parents[seq] = parent
        batch.created_dirs.extend(parent.created_dirs)
        data = services.blobs.read(change.new.sha256)
        batch.temps[seq] = parent.write_temp(data, change.new.mode)
    with services.db.session() as session:
        journal.set_temp_names(session, operation_id, batch.temps)
        journal.add_created_dirs(session, operation_id, batch.created_dirs)
    faults.point("after_temps_journaled")


def _apply_one(root: Root, batch: Batch, seq: int, change: Change) -> None:
    if change.new.exists:
        batch.parents[seq].replace(
            batch.temps.pop(seq), expected_old=expected(change.old), new=expected(change.new)
        )
        return
    parent = root.open_parent(change.path, create=False)
    batch.parents[seq] = parent
    parent.unlink_checked(expected(change.old))


def _fsync_parents(batch: Batch) -> None:
    seen: set[str] = set()
    for parent in batch.parents.values():
        directory = "/".join(parent.dir_parts)
        if directory not in seen:
            seen.add(directory)
            parent.fsync()


def _remove_dirs(root: Root, created: list[str]) -> None:
    for directory in sorted(set(created), key=lambda d: d.count("/"), reverse=True):
        try:
            root.remove_dir_if_empty(directory)
        except (PromoterError, OSError):
            log.warning("could not remove created directory %s", directory)


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
        row = _row(session, operation_id)
        journal.mark_all_steps(session, operation_id, "completed")
        journal.set_status(session, row, "applied_unverified")
    faults.point("before_check")
    result = run_check(config.check_command, repository.worktree, config.check_timeout)
    with services.db.session() as session:
        row = _row(session, operation_id)
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
        row = _row(session, operation_id)
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
        row = _row(session, operation_id)
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
    with services.db.session() as session:
        row = _row(session, operation_id)
        journal.mark_all_steps(session, operation_id, "completed")
        outcome = ledger.append(
            session,
            operation_id,
            "outcome",
            {"status": "completed", "targets_sha256": sha256_hex(canonical_bytes(targets))},
        )
        events = dict((row.report or {}).get("events", {}))
        receipt = build_receipt(
            operation_id, evidence, row.repository_identity, targets, {**events, "outcome": outcome}
        )
        row.receipt = receipt.wire()
        row.receipt_sha256 = receipt.receipt_sha256
        report = {k: v for k, v in (row.report or {}).items() if k != "paths"}
        row.report = {**report, "events": receipt.events.wire()}
        journal.set_status(session, row, "completed")
        repo.set_bundle_state(session, evidence.bundle.bundle_id, "promoted")
    faults.point("after_receipt")
    services.audit.put("promotion", operation_id, canonical(receipt))
