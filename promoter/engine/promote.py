"""Running one promotion attempt: the host protocol of SPEC §5.4, steps 1 to 7.

Authority and evidence first (refused on failure), then the repository lock, the
read-back under the lock (refused with a drift report on any difference), the journal
(steps with their temp names plus ``decision`` and ``action`` events in one
transaction), the directories the writes will create (journaled before any is made),
the writes in two batches (every temp file written and fsynced, journaled, then every
replace/unlink in bundle order, one fsync per parent directory), the read-back of every
target, and the ``outcome`` event with the receipt. Bytes that are not promoter's,
found where it expected its own, are kept and named in the report (``kept``). Anything
unexpected once writing has begun fails closed: ``needs_reconciliation`` with a
per-path report. Requests, idempotency and scheduling live in
``promoter.engine.operations``.

How the attempt ends (read-back, check, receipt) is ``promoter.engine.outcome``'s.

Fault points: ``before_journal``, ``after_journal``, ``after_dir_intent``
(``promoter.engine.dirs``), ``after_temps_journaled``, ``after_replaces`` (plus the fs
layer's own and ``promoter.engine.outcome``'s).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from promoter import faults
from promoter.domain.canonical import canonical_bytes, sha256_hex
from promoter.domain.models import Change
from promoter.domain.paths import temp_name
from promoter.domain.plan import journal_steps
from promoter.domain.state import State
from promoter.domain.states import OperationStatus
from promoter.engine import dirs, ledger, snapshots
from promoter.engine.authority import Evidence, check_authority, recheck_evidence
from promoter.engine.bundles import load_bundle
from promoter.engine.grants import load_grant
from promoter.engine.locking import repo_lock
from promoter.engine.outcome import finish
from promoter.engine.preconditions import read_back, spec
from promoter.engine.repos import Repository
from promoter.engine.services import Services
from promoter.errors import PromoterError, Stopped, TargetDrift, WriteFailed
from promoter.fs.atomic import Parent
from promoter.fs.chain import Root
from promoter.fs.lock import RepoLock
from promoter.store import journal

log = logging.getLogger("promoter.promote")


def targets_digest(changes: list[Change]) -> str:
    """sha256 of what the action is about to write: every path, operation and new state."""
    listed = [{"path": c.path, "operation": c.operation, "new": spec(c.new)} for c in changes]
    return sha256_hex(canonical_bytes(listed))


def refuse(services: Services, operation_id: str, error: PromoterError, **extra: Any) -> None:
    """Close the attempt as ``refused``: nothing was written."""
    payload = {"allowed": False, "code": error.code, "detail": error.detail, **extra}
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        ledger.append(session, operation_id, "decision", payload)
        ledger.append(session, operation_id, "outcome", {"status": "refused", "code": error.code})
        report = {"error": error.to_problem(), **extra}
        journal.set_status(
            session,
            row,
            OperationStatus.REFUSED,
            code=error.code,
            detail=error.detail,
            report=report,
        )


@dataclass
class Batch:
    """The in-flight writes of one attempt."""

    operation_id: str
    attempt: int
    changes: list[Change]
    parents: dict[int, Parent] = field(default_factory=dict)
    temps: dict[int, str] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)

    def temp(self, seq: int) -> str:
        """The journaled temp name of step ``seq`` in this attempt."""
        return temp_name(self.operation_id, self.attempt, seq)

    def close(self) -> None:
        for parent in self.parents.values():
            parent.close()

    def drop_temps(self, from_seq: int = 0) -> None:
        """Remove the staged temps of steps ``>= from_seq`` that are still promoter's own."""
        for seq, temp in list(self.temps.items()):
            if seq >= from_seq:
                new = State.of(self.changes[seq].new)
                try:
                    self.kept += [k.to_dict() for k in self.parents[seq].drop_temp(temp, new)]
                except (PromoterError, OSError):
                    log.warning("could not remove temp file %s; left in place", temp)
                self.temps.pop(seq, None)


def attempt_of(services: Services, operation_id: str) -> int:
    with services.db.session() as session:
        return journal.require(session, operation_id).attempt


def run(services: Services, operation_id: str, fence: int) -> None:
    """Carry out one attempt of a promotion; every outcome is journaled."""
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        bundle_id, receipt_sha = row.bundle_id, row.verification_receipt_sha256
    assert bundle_id is not None and receipt_sha is not None
    try:
        grant = load_grant(services, load_bundle(services, bundle_id).grant_id)
        check_authority(services, grant, fence)  # (1) authority
        evidence = recheck_evidence(services, bundle_id, receipt_sha)  # (2) evidence
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
            readback = read_back(repository.layout, root, evidence.grant, evidence.bundle)
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
            row = journal.require(session, operation_id)
            journal.delete_steps(session, operation_id)
            session.flush()
            journal.add_steps(
                session,
                operation_id,
                journal_steps(
                    operation_id,
                    row.attempt,
                    [(c.path, c.operation, c.old.wire(), c.new.wire()) for c in changes],
                ),
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
    batch = Batch(operation_id, attempt_of(services, operation_id), changes)
    wanted = set(range(len(changes))) if todo is None else todo
    try:
        creates = [c.path for seq, c in enumerate(changes) if seq in wanted and not c.old.exists]
        dirs.journal_intent(services, operation_id, root, creates)
        _stage_temps(services, operation_id, root, batch, wanted)
    except (PromoterError, OSError) as exc:
        if isinstance(exc, PromoterError):  # directories made before the failing step
            batch.created_dirs.extend(exc.context.get("created_dirs", []))
        batch.drop_temps()
        _remove_dirs(root, batch.created_dirs)
        batch.close()
        error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
        if batch.kept:  # someone else's bytes were found at a temp name: fail closed
            error.context["kept"] = [*error.context.get("kept", []), *batch.kept]
            finish(services, operation_id, root, changes, evidence, (-1, error))
            return
        if recovering:
            raise error from exc
        with services.db.session() as session:
            journal.delete_created_dirs(session, operation_id)
        refuse(services, operation_id, error, stage="staging temp files")
        return
    failure: tuple[int, PromoterError] | None = None
    applied: list[int] = []
    stopped = False
    try:
        lock.check_held()
        for seq, change in enumerate(changes):
            if seq not in wanted:
                continue
            if services.stopping.is_set():  # SIGTERM: stop between two steps
                stopped = True
                batch.drop_temps(seq)
                break
            try:
                _apply_one(root, batch, seq, change)
            except (PromoterError, OSError) as exc:
                error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
                failure = (seq, error)
                batch.drop_temps(seq)
                if batch.kept:
                    error.context["kept"] = [*error.context.get("kept", []), *batch.kept]
                break
            applied.append(seq)
        faults.point("after_replaces")
        _fsync_parents(batch)
    except (PromoterError, OSError) as exc:
        error = exc if isinstance(exc, PromoterError) else WriteFailed(str(exc))
        failure = failure or (-1, error)
    finally:
        batch.close()
    if stopped and failure is None:
        _leave_for_recovery(services, operation_id, applied)
        return
    finish(services, operation_id, root, changes, evidence, failure)


def _leave_for_recovery(services: Services, operation_id: str, applied: list[int]) -> None:
    """The daemon is stopping: journal the steps done; recovery finishes the rest."""
    with services.db.session() as session:
        row = journal.require(session, operation_id)
        for step in journal.steps(session, operation_id):
            if step.seq in applied:
                step.status = OperationStatus.COMPLETED
        journal.set_status(
            session,
            row,
            OperationStatus.NEEDS_RECOVERY,
            code="stopped",
            detail=f"the daemon stopped after {len(applied)} of the steps",
        )


def _stage_temps(
    services: Services, operation_id: str, root: Root, batch: Batch, wanted: set[int]
) -> None:
    for seq, change in enumerate(batch.changes):
        if not change.new.exists or seq not in wanted:
            continue
        assert change.new.sha256 is not None and change.new.mode is not None
        if services.stopping.is_set():
            raise Stopped("the daemon is stopping; nothing was written")
        parent = root.open_parent(change.path, create=True)
        batch.parents[seq] = parent
        batch.created_dirs.extend(parent.created_dirs)
        data = services.blobs.read(change.new.sha256)
        batch.temps[seq] = parent.write_temp(data, change.new.mode, temp=batch.temp(seq))
    with services.db.session() as session:
        journal.set_temp_names(session, operation_id, batch.temps)
        journal.add_created_dirs(session, operation_id, batch.created_dirs)
    faults.point("after_temps_journaled")


def _apply_one(root: Root, batch: Batch, seq: int, change: Change) -> None:
    if change.new.exists:
        batch.parents[seq].replace(
            batch.temps.pop(seq), expected_old=State.of(change.old), new=State.of(change.new)
        )
        return
    parent = root.open_parent(change.path, create=False)
    batch.parents[seq] = parent
    parent.unlink_checked(State.of(change.old), aside=batch.temp(seq))


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
