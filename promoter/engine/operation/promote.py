"""Running one promotion attempt: the host protocol, steps 1 to 7.

Authority and evidence, the lock, the read-back, the journal (with the directories to
create), the writes (every temp staged, then each replace or unlink in bundle order),
the read-back and the outcome (protocol: promotion#host-protocol), with the host's epoch
checked before the first temp, between groups and before the first replace
(protocol: promotion#fence-stops-every-write) and an outage before the plan waited out
(protocol: promotion#outage-before-plan). Bytes that are not promoter's are kept and
named (``kept``); anything unexpected once writing has begun fails closed. Fault points:
``before_journal``, ``after_journal``, ``after_dir_intent``, ``after_temps_journaled``,
``after_replaces``.

Not here: requests, idempotency and scheduling (``operation.requests``), how the attempt
ends (``operation.outcome``), the waits for the database (``promoter.store.outage``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from promoter import faults
from promoter.domain.canonical import canonical_bytes, sha256_hex
from promoter.domain.models import Change
from promoter.domain.path_state import Finding, State
from promoter.domain.paths import disk_path, temp_name, wire_path
from promoter.domain.plan import Ordering, journal_steps
from promoter.domain.records import Ticket
from promoter.domain.status import RUNNING, OperationStatus, StepStatus
from promoter.engine import fencing
from promoter.engine.intake.authority import Evidence, check_lease, recheck_evidence
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.intake.grants import load_grant
from promoter.engine.locking import repo_lock
from promoter.engine.operation import dirs, fenced
from promoter.engine.operation.driver import Driver, Step
from promoter.engine.operation.outcome import Planned, finish
from promoter.engine.operation.preconditions import ReadBack, read_back
from promoter.engine.operation.staging import stage_temps
from promoter.engine.ports import Archive, Attempting, Capturing, Ledger, Pacing, Placing, Records
from promoter.engine.repos import Repository
from promoter.engine.snapshots import capture as snapshots
from promoter.engine.verify.link_resolution import refuse_escapes_on_disk
from promoter.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    HostFenced,
    PromoterError,
    TargetDrift,
    refusing,
)
from promoter.fs.lock import RepoLock
from promoter.fs.root import Root
from promoter.fs.temps import Source
from promoter.store import journal, ledger, outage, repo, step_rows
from promoter.store.db import Database

log = logging.getLogger("promoter.promote")


def targets_digest(changes: list[Change]) -> str:
    """sha256 of what the action is about to write: every path, operation and new state."""
    listed = [
        {"path": c.path, "operation": c.operation, "new": State.of(c.new).wire()} for c in changes
    ]
    return sha256_hex(canonical_bytes(listed))


def refuse(db: Database, operation_id: str, error: PromoterError, **extra: Any) -> None:
    """Close the attempt as ``refused``: nothing was written. A fenced host records
    nothing: ``host_fenced`` is raised on, the operation left for its new owner."""
    if isinstance(error, HostFenced):
        raise error
    payload = {"allowed": False, "code": error.code, "detail": error.detail, **extra}
    with journal.attempt(db, operation_id) as j:
        j.event("decision", payload)
        j.event("outcome", {"status": OperationStatus.REFUSED, "code": error.code})
        report = {"error": error.to_problem(), **extra}
        j.set_status(OperationStatus.REFUSED, code=error.code, detail=error.detail, report=report)


def attempt_of(db: Database, operation_id: str) -> int:
    with journal.attempt(db, operation_id) as j:
        return j.row.attempt


def run(services: Attempting, ticket: Ticket) -> None:
    """Carry out one attempt of a promotion; every outcome is journaled.

    Nothing is read from the store before the plan is journaled: the ticket carries what
    the attempt decides on, and the lease is read again, locked, with the plan.
    """
    operation_id, fence = ticket.operation_id, ticket.fence
    refused = functools.partial(refuse, services.db, operation_id)
    with refusing(refused) as checked:
        if ticket.loaded is not None:
            bundle, grant = ticket.loaded
        else:
            bundle = load_bundle(services, ticket.bundle_id)
            grant = load_grant(services, bundle.grant_id)
        check_lease(grant, fence, ticket.lease)  # (1) authority
        evidence = recheck_evidence(  # (2) evidence
            services, ticket.bundle_id, ticket.verification_receipt_sha256, loaded=(bundle, grant)
        )
        repository = services.registry.by_identity(evidence.grant.repository_identity)
    if checked.error is not None:
        return
    lock = repo_lock(services, repository)
    with refusing(refused) as locked:
        lock.acquire()
    if locked.error is not None:
        return
    try:
        run_locked(
            services, operation_id, fence, evidence, repository, lock, attempt=ticket.attempt
        )
        if repository.config.snapshots:
            _snapshot(services, repository, operation_id, "post")
    finally:
        lock.release()


def _snapshot(services: Capturing, repository: Repository, operation_id: str, which: str) -> None:
    """Record a pre/post shadow snapshot of the worktree; a failure is logged, not fatal."""
    try:
        snapshots.capture_for_operation(services, repository, operation_id, which)  # type: ignore[arg-type]
    except PromoterError as exc:
        log.warning("%s snapshot of %s failed: %s", which, operation_id, exc.detail)


def run_locked(
    services: Attempting,
    operation_id: str,
    fence: int,
    evidence: Evidence,
    repository: Repository,
    lock: RepoLock,
    *,
    attempt: int | None = None,
) -> None:
    """Steps (3) to (7) under the repository lock. ``attempt``: the ticket's, named when
    the attempt waits for its database (``_wait_out``)."""
    with refusing(functools.partial(refuse, services.db, operation_id)) as opened:
        root = Root.open(repository.worktree)
    if opened.error is not None:
        return
    with root:
        deadline: float | None = None
        while True:
            try:
                planned = _plan(services, operation_id, fence, evidence, repository, root)
            except (DatabaseUnavailable, DatabaseBusy) as exc:
                # the database went away before the plan was journaled: nothing is written,
                # so the attempt waits for it (bounded) and plans again
                # (protocol: promotion#outage-before-plan)
                if deadline is None:
                    deadline = time.monotonic() + services.settings.outage_retry_seconds
                _wait_out(services, operation_id, attempt, exc, deadline)
                continue
            if planned is None:  # refused, and journaled as such
                return
            attempt, creates, changes, recorded = planned
            break
        faults.point("after_journal")
        apply_changes(
            services,
            operation_id,
            root,
            lock,
            changes,
            evidence,
            attempt=attempt,
            journaled_dirs=creates,
            planned=recorded,
        )


def _plan(
    services: Attempting,
    operation_id: str,
    fence: int,
    evidence: Evidence,
    repository: Repository,
    root: Root,
) -> tuple[int, list[str], list[Change], Planned] | None:
    """Read back, check links, journal the plan: (attempt, directories, changes, what the
    plan recorded), or None
    when the attempt was refused (and that journaled). The database lost on the way raises
    ``database_unavailable`` or ``database_busy`` with nothing journaled."""
    refused = functools.partial(refuse, services.db, operation_id)
    outage = (DatabaseUnavailable, DatabaseBusy)  # raised on: the attempt waits for it
    with refusing(refused, passing=outage) as read:
        readback = read_back(repository.layout, root, evidence.grant, evidence.bundle)
    if read.error is not None:
        return None
    if not readback.ok:
        drift = TargetDrift(
            "the repository is not in an authorized old state",
            drifted=readback.drifted,
        )
        refuse(services.db, operation_id, drift, drift_report=readback.report().wire())
        return None
    # (4) links by resolution against the disk as it is now
    # (protocol: bundles#symlinks-by-resolution)
    with refusing(refused, passing=outage) as linked:
        refuse_escapes_on_disk(services, repository, root, evidence.grant, evidence.bundle)
    if linked.error is not None:
        return None
    if repository.config.snapshots:
        _snapshot(services, repository, operation_id, "pre")
    faults.point("before_journal")
    changes = list(evidence.bundle.changes)
    with refusing(refused, passing=outage) as journaled:  # a failure rolled it back
        attempt, creates, planned = _journal(
            services.db, operation_id, fence, evidence, readback, root
        )
    if journaled.error is not None:  # nothing is journaled
        return None
    return attempt, creates, changes, planned


def _wait_out(
    services: Pacing,
    operation_id: str,
    attempt: int | None,
    error: DatabaseUnavailable | DatabaseBusy,
    deadline: float,
) -> None:
    """Wait for the database an attempt lost before its plan; past ``deadline`` raise
    ``database_unavailable`` naming the attempt (the put-back records it ``refused``).
    A plan whose commit happened though its answer was lost is not planned twice: the
    error is raised on, and the put-back finds the steps (``needs_recovery``); so is one
    whose operation a lost commit already closed."""
    named = "an attempt" if attempt is None else f"attempt {attempt}"
    what = f"{named} of {operation_id}, before its plan"
    if not outage.wait_for_database(services.db, what, deadline):
        bound = services.settings.outage_retry_seconds
        raise DatabaseUnavailable(
            f"{named} of {operation_id} waited {bound:g} s "
            "(outage_retry_seconds) for the database before its plan was journaled; "
            "nothing was written: ask again",
            operation_id=operation_id,
            attempt=attempt,
        ) from error
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None or row.status not in RUNNING or step_rows.steps(session, operation_id):
            raise error
    log.warning("%s: the database answers again; planning again", what)


def _journal(
    db: Database,
    operation_id: str,
    fence: int,
    evidence: Evidence,
    readback: ReadBack,
    root: Root,
) -> tuple[int, list[str], Planned]:
    """(5) In one transaction: authority again, the steps, the directories, the events.

    The lease is read again here, atomically with the plan: time passed while the lock
    and the read-back were waited for. The steps carry their temp names, so nothing about
    the writes needs journaling later unless a directory went missing meanwhile. Returns
    the attempt, the directories journaled as to be created and what the outcome builds on.
    """
    changes = list(evidence.bundle.changes)
    creates = dirs.missing_dirs(root, [disk_path(c.path) for c in changes if not c.old.exists])
    grant = evidence.grant
    # the host's epoch, with the plan (``engine.fencing``)
    with journal.unit_of_work(db, fenced=True) as session:
        lease = repo.get_lease(session, grant.workflow_id, grant.stage, lock=True)
        check_lease(grant, fence, lease)
        # read as plain columns: the plan's events are written only while it still has
        # the status read here (``journal.write_plan_events``)
        row = journal.read_required(session, operation_id)
        step_rows.delete_steps(session, operation_id)
        session.flush()
        step_rows.add_steps(
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
                "already_new": [p.path for p in readback.paths if p.verdict == Finding.NEW],
            },
        )
        action = ledger.append(
            session,
            operation_id,
            "action",
            {"target_count": len(changes), "targets_sha256": targets_digest(changes)},
        )
        journal.write_plan_events(session, row, decision, action)
        step_rows.add_created_dirs(session, operation_id, [wire_path(d) for d in creates])
        link = ledger.appended(session, operation_id)
        assert link is not None  # the action's, appended above
        return row.attempt, creates, Planned(decision, action, row.repository_identity, link)


def plan_steps(
    services: Archive, operation_id: str, attempt: int, changes: list[Change], wanted: set[int]
) -> list[Step]:
    """The typed steps of ``wanted``, in bundle order: each new file streamed from the
    blob store (checked against its sha256 as it is written)."""
    blobs = services.blobs

    def opener(sha256: str | None) -> Callable[[], Source] | None:
        return None if sha256 is None else lambda: blobs.stream(sha256)

    return [
        Step.between(
            seq,
            disk_path(change.path),
            State.of(change.old),
            State.of(change.new),
            temp_name(operation_id, attempt, seq),
            opener(change.new.sha256 if change.new.exists else None),
        )
        for seq, change in enumerate(changes)
        if seq in wanted
    ]


class Planner(Protocol):
    """What a pass over the driver does where a promotion and a recovery differ."""

    def staging_failed(
        self, services: Records, operation_id: str, error: PromoterError, exc: Exception
    ) -> None:
        """The staging failed and was abandoned (no temp of someone else's was found)."""

    def before_placing(
        self,
        services: Records,
        operation_id: str,
        attempt: int,
        planned: tuple[list[Change], set[int]],
        driver: Driver,
    ) -> None:
        """Every temp is staged; nothing is placed yet."""


class Promotion:
    """A promotion's pass: a failed staging deletes the directories it created and refuses
    the operation (nothing was written); nothing was placed before it."""

    def staging_failed(
        self, services: Ledger, operation_id: str, error: PromoterError, exc: Exception
    ) -> None:
        with journal.attempt(services.db, operation_id) as j:
            j.delete_created_dirs()
        refuse(services.db, operation_id, error, stage="staging temp files")

    def before_placing(
        self,
        services: Records,
        operation_id: str,
        attempt: int,
        planned: tuple[list[Change], set[int]],
        driver: Driver,
    ) -> None:
        return


PROMOTION = Promotion()


def apply_changes(
    services: Placing,
    operation_id: str,
    root: Root,
    lock: RepoLock,
    changes: list[Change],
    evidence: Evidence,
    *,
    todo: set[int] | None = None,
    planner: Planner | None = None,
    attempt: int | None = None,
    journaled_dirs: list[str] | None = None,
    planned: Planned | None = None,
) -> None:
    """Write the steps in ``todo`` (default: all), then read back every target.

    ``planner``: what the pass does where a promotion and a recovery differ (default: a
    promotion's, ``PROMOTION``; recovery's is ``operation.recover.RECOVERY``).
    ``journaled_dirs``: the directories the caller journaled as to be created (None: they
    are found and journaled here first). ``planned``: what the caller's plan recorded, for
    the outcome (None: the outcome reads it).
    """
    planner = PROMOTION if planner is None else planner
    try:
        fencing.check(services.db)  # the host's epoch, before the first worktree write
    except HostFenced as exc:
        exc.context["worktree"] = "nothing written"
        raise
    attempt = attempt_of(services.db, operation_id) if attempt is None else attempt
    wanted = set(range(len(changes))) if todo is None else todo
    steps = plan_steps(services, operation_id, attempt, changes, wanted)
    driver = Driver(
        root,
        Ordering.STAGE_THEN_PLACE,
        group_sync_limit=services.settings.group_sync_limit,
        between_groups=lambda: fencing.check(services.db),  # and between groups of temps
        before_temp=lambda: fencing.check_unless_leased(services.db, services.host),
    )
    try:
        if journaled_dirs is not None:
            faults.point("after_dir_intent")
        else:
            creates = [s.path for s in steps if not s.old.exists]
            journaled_dirs = dirs.journal_intent(services.db, operation_id, root, creates)
        stage_temps(services.db, services.stopping, operation_id, driver, steps, journaled_dirs)
    except HostFenced as exc:
        raise _stand_down(operation_id, driver, exc) from exc
    except (PromoterError, OSError) as exc:
        error = driver.abandon(exc)
        try:
            if driver.kept:  # someone else's bytes were found at a temp name: fail closed
                finish(services, operation_id, root, changes, evidence, (-1, error))
                return
            planner.staging_failed(services, operation_id, error, exc)
        except HostFenced as fenced:  # seen only now: the staging was abandoned already
            raise _noted(operation_id, driver, fenced) from exc
        return
    try:
        fencing.check(services.db)  # the host's epoch again, before the first target is replaced
    except HostFenced as exc:
        raise _stand_down(operation_id, driver, exc) from exc
    planner.before_placing(services, operation_id, attempt, (changes, wanted), driver)
    passed = driver.place_all(steps, check=lock.check_held, stopping=services.stopping)
    if isinstance(passed.halted, HostFenced):  # seen before a replace
        driver.abandon(passed.halted)
        raise _noted(operation_id, driver, passed.halted, placed=len(passed.applied))
    if passed.halted is not None:  # the epoch could not be read: no name more, recovery goes on
        _leave_for_recovery(services.db, operation_id, passed.applied, passed.halted)
        return
    try:
        if passed.stopped and passed.failure is None:
            _leave_for_recovery(services.db, operation_id, passed.applied)
            return
        finish(services, operation_id, root, changes, evidence, passed.failure, planned)
    except HostFenced as exc:  # the targets are in place: the new owner's recovery confirms
        exc.context["worktree"] = (
            f"replaced {len(passed.applied)} of its targets before it saw the fence; the new "
            "owner's recovery confirms them"
        )
        raise


def _stand_down(operation_id: str, driver: Driver, exc: HostFenced) -> HostFenced:
    """A fence seen while staging or before the first replace
    (protocol: promotion#fence-stops-every-write): the temps this pass named are removed as provably
    its own (journaled names, still the inode and bytes it wrote: ``Temps.drop_temp``) and the empty
    directories it made; anything not promoter's found at a temp name is kept in place. The lock is
    still held, so the new owner's recovery cannot run meanwhile. Returns ``exc``, naming what was
    removed."""
    return fenced.stand_down(log, operation_id, driver, exc, doing="staging")


def _noted(
    operation_id: str, driver: Driver, exc: HostFenced, *, placed: int | None = None
) -> HostFenced:
    """``exc`` naming what the abandoned pass removed and kept (and, seen before a
    replace, how many targets it ``placed`` before), logged once."""
    if placed is None:
        return fenced.noted(log, operation_id, driver, exc, doing="staging")
    done = f"replaced {placed} of its targets"
    return fenced.noted(log, operation_id, driver, exc, doing="replacing", done=done)


def _leave_for_recovery(
    db: Database, operation_id: str, applied: list[int], why: PromoterError | None = None
) -> None:
    """The daemon is stopping, or could not read its host's epoch before a replace
    (``why``): journal the steps done; recovery finishes the rest."""
    detail = f"the daemon stopped after {len(applied)} of the steps"
    with journal.attempt(db, operation_id) as j:
        j.set_steps(dict.fromkeys(applied, StepStatus.COMPLETED))
        j.set_status(
            OperationStatus.NEEDS_RECOVERY,
            code="stopped" if why is None else why.code,
            detail=detail if why is None else f"{detail}: {why.detail}",
        )
