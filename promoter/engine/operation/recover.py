"""Crash recovery and reconciliation of promotions.

``recover`` (and ``auto_recover`` at start-up) reloads a ``needs_recovery`` operation,
checks its lease, takes the lock, claims it under a new owner, settles its journaled temp
names and reclassifies every target (protocol: recovery#recovery,
recovery#journaled-names-only); ``reconcile`` carries out an operator's ``continue``,
``abandon`` or ``rollback`` (protocol: recovery#reconciliation). Every entry point asks
``promoter.domain.status.guard`` first, and only then dispatches a rollback's or a
restore's own recovery (protocol: recovery#guards); ``abandon`` closes the operation only
from the status it read (protocol: promotion#status-from-first-read). Fault point:
``abandon_decided``.

Not here: the guard's rules (pure, in ``domain``), the receipt's commit
(``operation.outcome``), the rollback (``operation.rollback``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from contextlib import closing
from typing import Any

from promoter import faults
from promoter.domain.models import Change
from promoter.domain.path_state import Verdict
from promoter.domain.paths import disk_path, temp_name, wire_all, wire_path
from promoter.domain.plan import Decision, Observation
from promoter.domain.plan import recover_promotion as plan_recovery
from promoter.domain.records import Operation
from promoter.domain.status import Action, OperationKind, OperationStatus, StepStatus, guard
from promoter.engine.intake.authority import Evidence, check_recovery_lease, recheck_evidence
from promoter.engine.locking import repo_lock
from promoter.engine.operation import outcome, promote
from promoter.engine.operation.driver import Driver, Target
from promoter.engine.operation.preconditions import leaf_report, verdict
from promoter.engine.operation.restore import recover_restore
from promoter.engine.operation.rollback import recover_rollback, rollback
from promoter.engine.operation.settle import newly_kept, settle_step_temps
from promoter.engine.operation.stopped import put_back
from promoter.engine.ownership import orphaned as is_orphan
from promoter.engine.ports import (
    Archive,
    Attempting,
    Journaling,
    Placing,
    Reconciling,
    Records,
    Routing,
)
from promoter.engine.queries import guarded_here
from promoter.errors import NotRecoverable, OperationUnknown, OwnedByOtherHost, PromoterError
from promoter.fs.aside import KeptEntry
from promoter.fs.held import Directories
from promoter.fs.root import Root
from promoter.store import journal, repo, step_rows
from promoter.store.db import Database

log = logging.getLogger("promoter.recover")

_RECONCILING = OperationStatus.NEEDS_RECONCILIATION


def scan_orphans(services: Routing) -> list[str]:
    """Mark this host's running operations whose owner is gone ``needs_recovery``.

    Only operations of repositories configured here and owned by this host are looked
    at (``promoter.engine.ownership.orphaned``); another host's are never touched.
    """
    orphaned: list[str] = []
    configured = {repository.identity for repository in services.registry.all()}
    with journal.unit_of_work(services.db) as session:
        running = journal.operations_with_status(session, OperationStatus.IN_PROGRESS)
        running += journal.operations_with_status(session, OperationStatus.APPLIED_UNVERIFIED)
        for row in running:
            if row.repository_identity not in configured or not is_orphan(row, services.owner):
                continue  # another host's, or a live process (possibly this one) runs it
            journal.set_status(
                session,
                row.operation_id,
                OperationStatus.NEEDS_RECOVERY,
                code="owner_gone",
                detail=f"the process that ran it (pid {row.owner_pid}) is gone",
            )
            orphaned.append(row.operation_id)
    for operation_id in orphaned:
        log.warning("operation %s needs recovery", operation_id)
    return orphaned


def auto_recover(services: Attempting, operation_ids: list[str]) -> None:
    """Recover with the current lease's fence (the ``auto_recover`` setting).

    Goes through the same guard as the API (role ``host``): only ``needs_recovery``
    operations run; anything else is logged and left alone. An operation that cannot be
    recovered now (an error, expected or not) is logged and left where it is, and the next
    one is tried: nothing here keeps the daemon from starting.
    """
    for operation_id in operation_ids:
        try:
            with journal.unit_of_work(services.db) as session:
                row = _load(session, operation_id)
                kind, bundle_id, receipt = row.kind, row.bundle_id, row.verification_receipt_sha256
                guard(kind, row.status, "recover", role="host", operation_id=operation_id)
            if kind != OperationKind.PROMOTION or bundle_id is None or receipt is None:
                recover(services, operation_id, 0, role="host")  # no lease for these kinds
                continue
            grant = recheck_evidence(services, bundle_id, receipt).grant
            with journal.unit_of_work(services.db) as session:
                lease = repo.get_lease(session, grant.workflow_id, grant.stage)
            if lease is not None:
                recover(services, operation_id, lease.fence, role="host")
        except PromoterError as exc:
            log.warning("automatic recovery of %s failed: %s", operation_id, exc.detail)
        except Exception:  # a fault of promoter's own: the traceback, then the next one
            log.exception("automatic recovery of %s stopped by an unexpected error", operation_id)


def _load(session: Any, operation_id: str) -> Operation:
    row = journal.get_operation(session, operation_id)
    if row is None:
        raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
    return row


def _claim(
    session: Any,
    services: Journaling,
    operation_id: str,
    kind: str,
    action: Action,
    *,
    role: str,
    decision: str | None = None,
) -> None:
    """Under the repository lock: the operation read again (it may have moved), guarded
    for ``action`` once more and claimed ``in_progress`` by this process. (A ``recover``
    guard names the operation; a ``reconcile`` one names the decision.)"""
    services.db.guard_writes(session)  # a fenced host claims nothing
    row = _load(session, operation_id)
    if decision is None:
        guard(kind, row.status, action, role=role, operation_id=operation_id)
    else:
        guard(kind, row.status, action, role=role, decision=decision)
    services.claim(session, row.operation_id)
    journal.set_status(session, row.operation_id, OperationStatus.IN_PROGRESS)


def recover(
    services: Attempting, operation_id: str, fence: int, *, role: str = "orchestrator"
) -> str:
    """Recover one ``needs_recovery`` operation (live here while it runs); see ``_recover_body``."""
    with services.live.running(operation_id):
        return _recover_body(services, operation_id, fence, role=role)


def _bundle_elsewhere(operation_id: str, bundle_id: str, exc: OwnedByOtherHost) -> NotRecoverable:
    """The refusal of a recovery this host owns whose bundle another host's state directory
    holds: sending the caller there (421) could only end in ``host_fenced`` or, from a
    stopped host, in no answer at all."""
    host = exc.context.get("owner_host")
    return NotRecoverable(
        f"operation {operation_id} is this host's to recover, but its bundle {bundle_id} "
        f"is in the state directory of host {host}, which this daemon does not use: "
        f'restart it on that state directory with replaces_host = "{host}", then recover '
        "again (docs/operator/many-hosts.md, Fencing a dead host)",
        operation_id=operation_id,
        bundle_id=bundle_id,
        bundle_host=host,
    )


def _recover_body(
    services: Attempting, operation_id: str, fence: int, *, role: str = "orchestrator"
) -> str:
    """Recover one ``needs_recovery`` operation; returns its status afterwards.

    Any other status is refused (``not_recoverable``) before anything is read or written,
    whatever the kind; see ``promoter.domain.status.guard``.
    """
    with journal.unit_of_work(services.db) as session:
        row = _load(session, operation_id)
        kind = row.kind
        bundle_id, receipt = row.bundle_id, row.verification_receipt_sha256
        guard(kind, row.status, "recover", role=role, operation_id=operation_id)
        guarded_here(services.registry, services.owner.host, row)  # else its owner's: 421
    if kind == OperationKind.ROLLBACK:
        return recover_rollback(services, operation_id)
    if kind == OperationKind.RESTORE:
        return str(recover_restore(services, operation_id))
    assert bundle_id is not None and receipt is not None
    try:
        evidence = recheck_evidence(services, bundle_id, receipt)
    except OwnedByOtherHost as exc:  # handed over here, its bundle left on its old host
        raise _bundle_elsewhere(operation_id, bundle_id, exc) from exc
    grant = evidence.grant
    with journal.unit_of_work(services.db) as session:
        check_recovery_lease(grant, fence, repo.get_lease(session, grant.workflow_id, grant.stage))
    repository = services.registry.by_identity(grant.repository_identity)
    lock = repo_lock(services, repository)
    lock.acquire()
    claimed = False
    try:
        with journal.unit_of_work(services.db) as session:
            _claim(session, services, operation_id, kind, "recover", role=role)
            has_steps = bool(step_rows.steps(session, operation_id))
        claimed = True
        if not has_steps:  # died before the journal: nothing was written
            promote.run_locked(services, operation_id, fence, evidence, repository, lock)
        else:
            with Root.open(repository.worktree) as root:
                _reclassify(services, operation_id, root, lock, evidence, reason="recovery")
    except Exception as exc:
        if claimed:
            put_back(services, operation_id, OperationStatus.NEEDS_RECOVERY, exc, "recovery")
        raise
    finally:
        lock.release()
    with journal.unit_of_work(services.db) as session:
        return _load(session, operation_id).status


def settle_temps(
    db: Database, operation_id: str, root: Root, changes: list[Change]
) -> tuple[list[str], list[KeptEntry]]:
    """Settle every temp name this operation's attempts were journaled to use
    (protocol: recovery#removal-provably-ours).

    Returns the temp files removed (promoter's own) and the kept entries (someone else's
    bytes, now under a ``.promoter-kept-*`` name or back at the target's own name).
    Fault point ``after_temps_settled``.
    """
    with journal.attempt(db, operation_id) as j:
        attempts = j.row.attempt
    removed, kept = settle_step_temps(
        root,
        [
            (disk_path(change.path), temp_name(operation_id, attempt, seq), change.old, change.new)
            for seq, change in enumerate(changes)
            for attempt in range(1, attempts + 1)
        ],
    )
    faults.point("after_temps_settled")
    return [wire_path(r) for r in removed], wire_all(kept)


def _reclassify(
    services: Placing,
    operation_id: str,
    root: Root,
    lock: Any,
    evidence: Evidence,
    *,
    reason: str,
) -> None:
    changes = list(evidence.bundle.changes)
    removed, kept = settle_temps(services.db, operation_id, root, changes)
    with journal.attempt(services.db, operation_id) as j:
        steps = {s.seq: StepStatus(s.status) for s in j.steps()}
    held = {k["path"] for k in newly_kept(kept)}
    seen: list[Observation] = []
    actuals: list[Mapping[str, Any]] = []
    with closing(Directories.for_reads(root)) as directories:  # one read pass
        leaves = directories.read_states([disk_path(change.path) for change in changes])
    for seq, (change, leaf) in enumerate(zip(changes, leaves, strict=True)):
        actual: Mapping[str, Any]
        if isinstance(leaf, PromoterError):
            found, actual = Verdict.NEITHER, {"error": leaf.code, "detail": leaf.detail}
        else:
            found, actual = verdict(leaf, change), leaf_report(leaf)
        step = steps.get(seq, StepStatus.PENDING)
        seen.append(Observation(found, step, kept=change.path in held))
        actuals.append(actual)
    plan = plan_recovery(seen)
    todo, blocked = plan.todo, plan.blocked
    paths = [
        {
            "path": change.path,
            "step": s.step.value,
            "found": s.verdict.value,
            "action": action.value,
            "actual": actual,
        }
        for change, s, action, actual in zip(changes, seen, plan.actions, actuals, strict=True)
    ]
    with journal.attempt(services.db, operation_id) as j:
        j.event(
            "decision",
            {
                "reason": reason,
                "allowed": not blocked,
                "paths": paths,
                "removed_temp_files": removed,
                "kept": kept,
            },
        )
    if blocked:
        outcome.fail_closed(
            services.db,
            operation_id,
            [
                Target(change.path, s.verdict, actual)
                for change, s, actual in zip(changes, seen, actuals, strict=True)
            ],
            None,
            kept=kept,
        )
        return
    promote.apply_changes(
        services, operation_id, root, lock, changes, evidence, todo=todo, planner=RECOVERY
    )


class Recovery:
    """Recovery's pass over the driver: a failed staging is raised to the recovery (which
    leaves the operation for the next one); the steps an earlier pass put in place are
    held so the pass's one sync of every directory covers them too."""

    def staging_failed(
        self, services: Records, operation_id: str, error: PromoterError, exc: Exception
    ) -> None:
        raise error from exc

    def before_placing(
        self,
        services: Archive,
        operation_id: str,
        attempt: int,
        planned: tuple[list[Change], set[int]],
        driver: Driver,
    ) -> None:
        changes, wanted = planned
        _hold_confirmed(services, operation_id, attempt, changes, wanted, driver)


RECOVERY = Recovery()


def _hold_confirmed(
    services: Archive,
    operation_id: str,
    attempt: int,
    changes: list[Change],
    wanted: set[int],
    driver: Driver,
) -> None:
    """Hold the directories of the steps a recovery confirms (an earlier pass put them in
    place; their directory sync may never have run), so the pass's one sync of every
    directory covers them before the outcome. A directory that is gone holds nothing,
    and one that cannot be held safely is left to the read-back, which fails closed."""
    confirmed = set(range(len(changes))) - wanted
    for step in promote.plan_steps(services, operation_id, attempt, changes, confirmed):
        with contextlib.suppress(PromoterError):
            driver.hold(step)


def reconcile(
    services: Reconciling, operation_id: str, decision: str, note: str, *, role: str = "operator"
) -> str:
    """Carry out the operator's decision (live here while it runs); see ``_reconcile_body``.
    Returns the status the operation is in then."""
    with services.live.running(operation_id):
        return _reconcile_body(services, operation_id, decision, note, role=role)


def _reconcile_body(
    services: Reconciling, operation_id: str, decision: str, note: str, *, role: str = "operator"
) -> str:
    """Carry out the operator's decision on a ``needs_reconciliation`` operation."""
    with journal.unit_of_work(services.db) as session:
        row = _load(session, operation_id)
        bundle_id, receipt = row.bundle_id, row.verification_receipt_sha256
        kind = row.kind
        guard(
            kind,
            row.status,
            "reconcile",
            role=role,
            decision=decision,
            operation_id=operation_id,
        )
        guarded_here(services.registry, services.owner.host, row)  # else its owner's: 421
    if kind == OperationKind.RESTORE and decision == Decision.CONTINUE:
        return recover_restore(services, operation_id, from_status=_RECONCILING)
    if kind == OperationKind.ROLLBACK and decision == Decision.CONTINUE:
        return recover_rollback(services, operation_id, from_status=_RECONCILING)
    if decision == Decision.ROLLBACK:
        return rollback(services, operation_id, note=note).status
    if decision == Decision.ABANDON:
        with journal.attempt(services.db, operation_id) as j:
            row = _load(j.session, operation_id)  # again in the transaction that closes it
            guard(kind, row.status, "reconcile", role=role, decision=decision)
            faults.point("abandon_decided")
            j.event("outcome", {"status": OperationStatus.ABANDONED, "note": note})
            j.set_status(OperationStatus.ABANDONED, code="abandoned", detail=note or None)
        return OperationStatus.ABANDONED
    assert bundle_id is not None and receipt is not None
    evidence = recheck_evidence(services, bundle_id, receipt)
    repository = services.registry.by_identity(evidence.grant.repository_identity)
    lock = repo_lock(services, repository)
    lock.acquire()
    claimed = False
    try:
        with journal.unit_of_work(services.db) as session:
            _claim(session, services, operation_id, kind, "reconcile", role=role, decision=decision)
        claimed = True
        with Root.open(repository.worktree) as root:
            _reclassify(
                services, operation_id, root, lock, evidence, reason=f"reconcile continue: {note}"
            )
    except Exception as exc:
        if claimed:
            put_back(services, operation_id, _RECONCILING, exc, "reconciliation")
        raise
    finally:
        lock.release()
    with journal.unit_of_work(services.db) as session:
        return _load(session, operation_id).status
