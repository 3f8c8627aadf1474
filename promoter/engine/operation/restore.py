"""Restoring a worktree to a shadow snapshot, as a journaled operation.

``restore`` captures the worktree under the lock, refuses ``SnapshotStale`` unless it is
at ``expected_current_tree``, plans one step per changed path (all or nothing), journals
the operation (``restore_id``), its steps and events in one transaction, hands the steps
to ``restore_steps`` and records a ``post`` capture; ``recover_restore`` finishes an
interrupted one (protocol: snapshots#restore, snapshots#restore-all-or-nothing,
recovery#recovery).

Not here: the writes (``promoter.engine.operation.restore_steps``), snapshot bookkeeping
(``promoter.engine.snapshots.capture``), git plumbing (``promoter.git.shadow``).
"""

from __future__ import annotations

import logging
from typing import cast

from promoter.domain.canonical import canonical_bytes, content_id, sha256_hex
from promoter.domain.path_state import State
from promoter.domain.paths import temp_name, wire_path
from promoter.domain.plan import Observation, journal_steps
from promoter.domain.plan import recover_restore as plan_recovery
from promoter.domain.status import OperationKind, OperationStatus, StepStatus
from promoter.engine import tickets
from promoter.engine.operation.restore_steps import RestoreState, Step, StepRun, dir_key
from promoter.engine.operation.settle import newly_kept, settle_step_temps
from promoter.engine.operation.stopped import put_back
from promoter.engine.ports import Guarding, Journaling
from promoter.engine.repos import Repository
from promoter.engine.snapshots.capture import (
    known_tree,
    lock_repository,
    resolve,
    shadow_for,
    tree_id,
)
from promoter.errors import (
    NotRecoverable,
    OperationConflict,
    OperationUnknown,
    PathUnsafe,
    PromoterError,
    SnapshotStale,
    TargetDrift,
)
from promoter.fs.aside import KeptEntry
from promoter.fs.leaf import split_rel
from promoter.fs.root import Root
from promoter.git.shadow import ShadowRepository
from promoter.store import journal, ledger, step_rows
from promoter.store.db import Database

__all__ = ["RESTARTABLE", "recover_restore", "restore", "restore_id"]

log = logging.getLogger("promoter.restore")

RESTARTABLE = {
    OperationStatus.COMPLETED,
    OperationStatus.REFUSED,
    OperationStatus.ABANDONED,
}
_KINDS = {"160000": "a gitlink (submodule)"}
_WRITABLE = ("100644", "100755", "120000")
_OPERATIONS = {"A": "create", "D": "delete", "M": "modify", "T": "modify"}
_MISSING: RestoreState = {
    "exists": False,
    "sha256": None,
    "mode": None,
    "bytes": None,
    "blob_ref": None,
}


def restore_id(repository_identity: str, current: str, target: str) -> str:
    document = {"restore_to": target, "from": current, "repository_identity": repository_identity}
    return content_id("op", sha256_hex(canonical_bytes(document)))


def restore(
    services: Guarding, repository: Repository | str, tree: str, expected_current_tree: str
) -> dict[str, str]:
    """Bring the worktree to snapshot ``tree``; ``{operation_id, status}``."""
    tree_id(tree)
    tree_id(expected_current_tree, "expected_current_tree")
    repo = resolve(services, repository)
    shadow = shadow_for(services, repo)
    lock = lock_repository(services, repo)
    try:
        known_tree(shadow, tree, "tree")  # under the lock: retention cannot prune it now
        with Root.open(repo.worktree) as root:
            current = shadow.capture().tree
            shadow.keep(current)
            if current != expected_current_tree:
                raise SnapshotStale(
                    "the worktree is not at the expected tree; review the diff again",
                    expected_current_tree=expected_current_tree,
                    current_tree=current,
                )
            steps = _plan(shadow, current, tree)
            operation_id = restore_id(repo.identity, current, tree)
            with services.live.running(operation_id):  # live before its row is in_progress
                _journal(services, repo, current, tree, steps)
                try:
                    attempt = _attempt(services.db, operation_id)
                    run = StepRun(
                        services, operation_id, root, lock, shadow, tree, steps, attempt=attempt
                    )
                    status = run.apply(set(range(len(steps))))
                except Exception as exc:
                    put_back(services, operation_id, OperationStatus.NEEDS_RECOVERY, exc, "restore")
                    raise
        _post_capture(services.db, shadow, operation_id, tree)
    finally:
        lock.release()
    return {"operation_id": operation_id, "status": status}


def _plan(shadow: ShadowRepository, current: str, target: str) -> list[Step]:
    """One step per changed path: deletions first, then writes, grouped by directory."""
    entries = shadow.diff_entries(current, target)
    refused: dict[str, str] = {}
    shown: dict[str, str] = {}
    for entry in entries:
        for side, mode in (("current", entry.old_mode), ("target", entry.new_mode)):
            if mode is not None and mode not in _WRITABLE:
                kind = _KINDS.get(mode, f"a mode {mode} entry")
                refused.setdefault(entry.path, f"it is {kind} in the {side} tree")
        try:
            split_rel(entry.path)
        except PathUnsafe:
            refused.setdefault(entry.path, "the path has a component promoter never writes")
        other = shown.setdefault(wire_path(entry.path), entry.path)
        if other != entry.path:
            for path in (other, entry.path):
                refused.setdefault(
                    path, f"its name and another are both shown as {wire_path(path)!r}"
                )
    if refused:
        raise PathUnsafe(
            "restore refused as a whole, nothing was written: these paths cannot be restored",
            paths={wire_path(p): why for p, why in sorted(refused.items())},
        )
    with shadow.reader() as cat:
        hashes = cat.blob_sha256(o for e in entries for o in (e.old_oid, e.new_oid) if o)

    def state(mode: str | None, oid: str | None) -> RestoreState:
        if oid is None:
            return _MISSING.copy()
        sha256, size = hashes[oid]
        return {"exists": True, "sha256": sha256, "mode": mode, "bytes": size, "blob_ref": None}

    steps = [
        Step(
            e.path,
            _OPERATIONS[e.status],
            state(e.old_mode, e.old_oid),
            state(e.new_mode, e.new_oid),
            e.new_oid,
        )
        for e in entries
    ]
    return sorted(steps, key=lambda s: (s.operation != "delete", *dir_key(s.path)))


def _journal(
    services: Journaling, repo: Repository, current: str, target: str, steps: list[Step]
) -> str:
    """The operation, its steps and the decision and action events, in one transaction."""
    operation_id = restore_id(repo.identity, current, target)
    with journal.unit_of_work(services.db, fenced=True) as session:  # a fenced host starts nothing
        row = journal.get_operation(session, operation_id)
        if row is not None and row.status not in RESTARTABLE:
            raise OperationConflict(
                f"restore {operation_id} is {row.status}; recover or reconcile it first",
                operation_id=operation_id,
                status=row.status,
            )
        if row is None:
            tickets.create_operation_row(
                session,
                operation_id,
                OperationKind.RESTORE,
                OperationStatus.IN_PROGRESS,
                repository=(repo.identity, repo.name),
                owner=services.stamp(),
                pre_snapshot=current,
            )
        else:  # a finished restore from the same tree to the same tree: a new attempt
            step_rows.delete_steps(session, operation_id)
            journal.next_attempt(
                session,
                operation_id,
                OperationStatus.IN_PROGRESS,
                owner=services.stamp(),
                pre_snapshot=current,
            )
        session.flush()
        journal.start_attempt(session, operation_id)
        attempt = journal.require(session, operation_id).attempt
        step_rows.add_steps(
            session,
            operation_id,
            journal_steps(
                operation_id, attempt, [(s.shown, s.operation, s.old, s.new) for s in steps]
            ),
        )
        decision = ledger.append(
            session,
            operation_id,
            "decision",
            {"allowed": True, "restore_to": target, "from": current, "attempt": attempt},
        )
        action = ledger.append(
            session,
            operation_id,
            "action",
            {
                "targets": [
                    {"path": s.shown, "operation": s.operation, "new": State.of(s.new).wire()}
                    for s in steps
                ]
            },
        )
        journal.set_plan_events(session, operation_id, decision, action)
        journal.set_report(session, operation_id, {"restore_to": target, "from": current})
    return operation_id


def _post_capture(db: Database, shadow: ShadowRepository, operation_id: str, target: str) -> None:
    """Record what the worktree holds after the restore as the ``post_snapshot``."""
    try:
        post = shadow.capture().tree
        shadow.keep(post)
    except PromoterError as exc:
        log.warning("the capture after restore %s failed: %s", operation_id, exc.detail)
        return
    with journal.unit_of_work(db) as session:
        row = journal.require(session, operation_id)
        journal.set_snapshot(session, operation_id, "post", post)
        journal.set_report(
            session, operation_id, {**(row.report or {}), "post_tree_matches": post == target}
        )


def recover_restore(
    services: Guarding, operation_id: str, *, from_status: str = OperationStatus.NEEDS_RECOVERY
) -> str:
    """Finish an interrupted restore (live here while it runs); see ``_recover_restore_body``."""
    with services.live.running(operation_id):
        return _recover_restore_body(services, operation_id, from_status=from_status)


def _recover_restore_body(
    services: Guarding, operation_id: str, *, from_status: str = OperationStatus.NEEDS_RECOVERY
) -> str:
    """Finish an interrupted restore or fail closed (protocol: recovery#recovery); returns the new
    status.

    Under the lock, the temp names its journal allowed are settled (promoter's bytes removed,
    anything else kept and the restore failed closed) and each
    step is re-read: exactly new is confirmed, exactly old is applied again, anything else
    leaves the operation ``needs_reconciliation``. Serves ``needs_recovery`` (the default)
    and, only when the caller says so after the operator's ``reconcile`` passed the guard
    (``from_status="needs_reconciliation"``), an operator's ``continue``. Any other status
    is refused before anything is written.
    """
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None or row.kind != OperationKind.RESTORE:
            raise OperationUnknown(f"no restore {operation_id!r}", operation_id=operation_id)
        if from_status not in (
            OperationStatus.NEEDS_RECOVERY,
            OperationStatus.NEEDS_RECONCILIATION,
        ):
            raise ValueError(f"a restore is never recovered from {from_status!r}")
        if row.status != from_status:
            raise NotRecoverable(
                f"restore {operation_id} is {row.status}, not {from_status}",
                operation_id=operation_id,
                kind="restore",
                current_status=row.status,
            )
        target, identity = str((row.report or {})["restore_to"]), row.repository_identity
        current = row.pre_snapshot
        journaled = step_rows.steps(session, operation_id)
        rows = [(s.path, s.operation, s.old_state, s.new_state) for s in journaled]
    repo = resolve(services, identity)
    shadow = shadow_for(services, repo)
    files = shadow.tree_files(target)
    real = _real_paths(shadow, current, target)
    steps = [  # the journaled states are the ones a restore's plan wrote (``RestoreState``)
        Step(
            real.get(p, p),
            op,
            cast(RestoreState, old),
            cast(RestoreState, new),
            files[real.get(p, p)].oid if new["exists"] else None,
        )
        for p, op, old, new in rows
    ]
    lock = lock_repository(services, repo)
    claimed = False
    try:
        _claim(services, operation_id, from_status)  # again under the lock: it may have moved
        claimed = True
        with Root.open(repo.worktree) as root:
            attempt = _attempt(services.db, operation_id)
            run = StepRun(
                services,
                operation_id,
                root,
                lock,
                shadow,
                target,
                steps,
                touched=True,
                attempt=attempt,
            )
            run.kept = _settle_temps(root, operation_id, attempt, steps)
            if newly_kept(run.kept):
                run.failure = TargetDrift(
                    "bytes that are not promoter's were found at its temp names; they are kept"
                )
            with run.reading():
                seen = [Observation(run.verdict(step)[0], StepStatus.PENDING) for step in steps]
            plan = plan_recovery(seen)
            if plan.blocked:
                run.failure = TargetDrift("a target is neither its old nor its new state")
            status = run.finish() if run.failure else run.apply(plan.todo)
        _post_capture(services.db, shadow, operation_id, target)
    except Exception as exc:
        if claimed:
            put_back(services, operation_id, OperationStatus.NEEDS_RECOVERY, exc, "restore")
        raise
    finally:
        lock.release()
    return status


def _claim(services: Journaling, operation_id: str, from_status: str) -> None:
    """Move the restore from ``from_status`` to ``in_progress`` under this process, or refuse."""
    with journal.unit_of_work(services.db) as session:
        found = journal.claim_from(
            session, operation_id, OperationStatus(from_status), services.stamp()
        )
        if found is not None:
            raise NotRecoverable(
                f"restore {operation_id} is {found}, not {from_status}",
                operation_id=operation_id,
                kind="restore",
                current_status=found,
            )


def _attempt(db: Database, operation_id: str) -> int:
    with journal.attempt(db, operation_id) as j:
        return j.row.attempt


def _settle_temps(
    root: Root, operation_id: str, attempts: int, steps: list[Step]
) -> list[KeptEntry]:
    """Settle the temp names the restore's attempts were journaled to use; return kept."""
    return settle_step_temps(
        root,
        [
            (step.path, temp_name(operation_id, attempt, seq), step.old, step.new)
            for seq, step in enumerate(steps)
            for attempt in range(1, attempts + 1)
        ],
    )[1]


def _real_paths(shadow: ShadowRepository, current: str | None, target: str) -> dict[str, str]:
    """Journaled (escaped) path -> the name on disk, from the diff the restore was planned on."""
    if current is None:
        return {}
    return {wire_path(e.path): e.path for e in shadow.diff_entries(current, target)}
