"""What the API shows of operations: one operation whole, its targets now, a bundle's promotions.

Reads only. Fault point: ``operation_current_targets`` (before the worktree is read for
``current_targets``). Deliberately not here: listings and summaries (``promoter.engine.queries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from typing import Any

from sqlalchemy import Row

from promoter.domain.path_state import Verdict, classify
from promoter.domain.paths import disk_path
from promoter.domain.status import OperationKind, OperationStatus
from promoter.domain.views import (
    Attempt,
    BundleOperation,
    CurrentTarget,
    EventIds,
    MergedOperation,
    OperationView,
    Step,
)
from promoter.engine.operation.preconditions import leaf_report
from promoter.engine.ownership import owner_view
from promoter.engine.ports import Routing
from promoter.engine.queries import guarded_here
from promoter.errors import OperationUnknown, PromoterError
from promoter.faults import point
from promoter.fs.held import Directories
from promoter.fs.root import Root
from promoter.store import journal, ledger, step_rows
from promoter.store.db import Database


def operation_view(db: Database, operation_id: str) -> OperationView:
    with db.reading() as session:  # read only: a plain connection, no ORM session
        row = journal.read_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        steps = step_rows.steps(session, operation_id)
        events = ledger.events(session, operation_id)
        dirs = step_rows.created_dirs(session, operation_id)
        attempts = journal.attempts(session, operation_id)
        bundles = _merged_bundles(events)
        merged = journal.merged_promotions(session, [operation_id]) if bundles else []
        return OperationView.model_construct(
            operation_id=row.operation_id,
            kind=row.kind,
            status=row.status,
            attempt=row.attempt,
            repository=row.repository_name,
            repository_identity=row.repository_identity,
            grant_id=row.grant_id,
            bundle_id=row.bundle_id,
            verification_receipt_sha256=row.verification_receipt_sha256,
            fence=row.fence,
            code=row.code,
            detail=row.detail,
            receipt_sha256=row.receipt_sha256,
            owner=owner_view(row),
            event_ids=EventIds.model_construct(
                decision=row.decision_event_id,
                action=row.action_event_id,
                outcome=row.outcome_event_id,
            ),
            pre_snapshot=row.pre_snapshot,
            post_snapshot=row.post_snapshot,
            report=row.report,
            created_at=row.created_at,
            updated_at=row.updated_at,
            steps=[
                Step.model_construct(
                    seq=s.seq,
                    path=s.path,
                    operation=s.operation,
                    status=s.status,
                    old=s.old_state,
                    new=s.new_state,
                    detail=s.detail,
                )
                for s in steps
            ],
            created_directories=dirs,
            attempts=[
                Attempt.model_construct(
                    attempt=a.attempt,
                    status=a.status,
                    code=a.code,
                    started_at=a.started_at,
                    ended_at=a.ended_at,
                )
                for a in attempts
            ],
            events=[ledger.as_event(e) for e in events],
            events_verified=ledger.verify_chain(events),
            next=next_step(row.kind, row.status, row.operation_id),
            merged_into=[
                MergedOperation.model_construct(
                    operation_id=m.operation_id, bundle_id=m.bundle_id, status=m.status, code=m.code
                )
                for m in sorted(merged, key=lambda m: bundles.index(m.bundle_id))
            ],
        )


def next_step(kind: str, status: str, operation_id: str) -> str | None:
    """What to do with an operation that needs recovery or reconciliation, naming the
    route and the command (protocol: promotion#operation-identity); None otherwise."""
    promotion = kind == OperationKind.PROMOTION
    if status == OperationStatus.NEEDS_RECOVERY:
        if promotion:
            return (
                f"recover it: POST /v1/operations/{operation_id}/recover with the lease's "
                f"current fence (promoter ops recover {operation_id} --fence N)"
            )
        return (  # a rollback's or restore's recovery reads no lease: any fence is taken
            f"an operator recovers it: POST /v1/operations/{operation_id}/recover "
            f"(promoter ops recover {operation_id} --fence 0)"
        )
    if status == OperationStatus.NEEDS_RECONCILIATION:
        decisions = "rollback or abandon" if promotion else "or abandon"
        return (
            f"an operator reconciles it: POST /v1/operations/{operation_id}/reconcile with "
            f"continue (after mending the paths its report names), {decisions} "
            f"(promoter ops reconcile {operation_id} DECISION)"
        )
    return None


def _merged_bundles(events: Sequence[Row[Any]]) -> list[str]:
    """The bundles merged from the operation's, in the order they were made (each
    merge's decision event names its bundle; a merge made again names the same one)."""
    found: dict[str, None] = {}
    for event in events:
        payload = event.payload
        if event.kind == "decision" and isinstance(payload, dict):
            merge = payload.get("merge")
            if isinstance(merge, dict) and isinstance(merge.get("bundle_id"), str):
                found[merge["bundle_id"]] = None
    return list(found)


def current_targets(services: Routing, operation_id: str) -> list[CurrentTarget]:
    """Each step's target as it reads now (read-only, without the lock)."""
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        repository = guarded_here(services.registry, services.owner.host, row)
        steps = [(s.path, s.old_state, s.new_state) for s in step_rows.steps(session, operation_id)]
    found: list[CurrentTarget] = []
    point("operation_current_targets")  # the worktree not read yet
    with Root.open(repository.worktree) as root, closing(Directories.for_reads(root)) as held:
        leaves = held.read_states([disk_path(path) for path, _, _ in steps])  # wire form
    for (path, old, new), leaf in zip(steps, leaves, strict=True):
        if isinstance(leaf, PromoterError):
            error = {"error": leaf.code}
            neither = Verdict.NEITHER
            found.append(CurrentTarget.model_construct(path=path, matches=neither, actual=error))
            continue
        matches = classify(leaf, old, new).verdict
        found.append(
            CurrentTarget.model_construct(
                path=path, matches=matches, actual=dict(leaf_report(leaf))
            )
        )
    return found


def bundle_operations(db: Database, bundle_id: str) -> list[BundleOperation]:
    """The promotions of one bundle: id, status, code and receipt (what its executor sees)."""
    with journal.unit_of_work(db) as session:
        return [
            BundleOperation.model_construct(
                operation_id=row.operation_id,
                status=row.status,
                attempt=row.attempt,
                code=row.code,
                detail=row.detail,
                receipt_sha256=row.receipt_sha256,
                updated_at=row.updated_at,
            )
            for row in journal.promotions_of_bundle(session, bundle_id)
        ]
