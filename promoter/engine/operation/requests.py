"""Promotion requests, operation identity and idempotency, scheduling and views.

``request_promotion`` derives the deterministic operation id
(protocol: promotion#operation-identity) and never starts a second run of the same operation:
completed returns the stored receipt's state, in progress its status, needs recovery or
reconciliation that status; only a ``refused`` operation gets a new attempt, unless a person
rejected it (``approval_rejected``; final until an operator reopens it). Attempts run on a small
worker pool off the request thread; ``wait`` blocks on the attempt's future. Under the approval gate
(always for a merged bundle, whatever the grant and the repository say)
(``promoter.engine.review.approval``) a request is held as ``awaiting_approval`` until
``decide``, and an approval starts the attempt. The protocol itself is in
``operation.promote``; preflight (protocol: promotion#preflight) reuses its read-back and writes
nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError

from promoter.domain.canonical import canonical_bytes
from promoter.domain.documents import operation_id_for
from promoter.domain.path_state import Verdict, classify
from promoter.domain.paths import disk_path
from promoter.domain.records import Ticket
from promoter.domain.status import FINAL, RUNNING, OperationKind, OperationStatus
from promoter.domain.views import (
    Attempt,
    BundleOperation,
    CurrentTarget,
    EventIds,
    OperationView,
    Preflight,
    PreflightCheck,
    PreflightChecks,
    Step,
)
from promoter.engine import repo_settings, routing
from promoter.engine.intake.bundles import load_bundle, load_verification
from promoter.engine.intake.grants import load_grant
from promoter.engine.operation import promote
from promoter.engine.operation.ownership import owner_view
from promoter.engine.operation.preconditions import leaf_report, read_back
from promoter.engine.operation.recover import auto_recover
from promoter.engine.operation.rollback import rollback_id
from promoter.engine.queries import guarded_here
from promoter.engine.review import approval, partial
from promoter.engine.review.seen import Seen
from promoter.engine.review.seen import require as require_seen
from promoter.engine.services import AttemptRunner, Services
from promoter.engine.verify.authority import check_authority, check_grant_window, recheck_evidence
from promoter.engine.verify.link_resolution import refuse_escapes_on_disk
from promoter.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    HostFenced,
    OperationConflict,
    OperationUnknown,
    OwnedByOtherHost,
    PromoterError,
    ReceiptConflict,
    ReceiptUnavailable,
    TargetDrift,
    ValidationFailed,
    VerificationFailed,
    stopped_by,
)
from promoter.fs.held import Directories
from promoter.fs.root import Root
from promoter.store import journal, ledger, step_rows
from promoter.store.outage import through_outage

log = logging.getLogger("promoter.operations")


@dataclass(frozen=True)
class Requested:
    operation_id: str
    status: str
    started: bool


class Runner:
    """Runs attempts off the request thread and remembers their futures."""

    def __init__(self, services: Services, workers: int = 4) -> None:
        self._services = services
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="promoter-op")
        self._futures: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def submit(self, ticket: Ticket) -> Future[None]:
        with self._lock:
            run = contextvars.copy_context().run  # the request's context (its id) goes along
            self._services.live.enter(ticket.operation_id)  # left when the attempt ends
            try:
                future = self._pool.submit(run, _guarded_run, self._services, ticket)
            except BaseException:
                self._services.live.leave(ticket.operation_id)
                raise
            self._futures[ticket.operation_id] = future
            return future

    def future(self, operation_id: str) -> Future[None] | None:
        with self._lock:
            return self._futures.get(operation_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


def _guarded_run(services: Services, ticket: Ticket) -> None:
    """Run an attempt; an unexpected fault leaves the operation for recovery, never stuck.

    The operation is put back (``_put_back``) through a database outage
    (``promoter.store.outage``); once it is ``needs_recovery`` because the database went
    away, a daemon with ``auto_recover`` recovers it at once."""
    operation_id = ticket.operation_id
    try:
        try:
            promote.run(services, ticket)
        except HostFenced as exc:  # logged by the check; the operation is the new owner's
            log.error(
                "the attempt of %s stopped: this host is fenced; in the worktree: %s",
                operation_id,
                exc.context.get("worktree", "nothing written"),
            )
            raise
        except Exception as exc:
            outage = isinstance(exc, DatabaseUnavailable | DatabaseBusy)
            if outage:
                log.warning("attempt of %s lost its database: %s", operation_id, exc)
            else:
                log.exception("attempt of %s failed unexpectedly", operation_id)
            error = stopped_by(exc, "the attempt")
            status = through_outage(
                lambda: _put_back(services, operation_id, error),
                f"putting back operation {operation_id}",
                services.settings.outage_retry_seconds,
            )
            log.warning("operation %s put back: %s", operation_id, status)
            if (
                outage
                and status == OperationStatus.NEEDS_RECOVERY
                and services.settings.auto_recover
            ):
                auto_recover(services, [operation_id])
    finally:
        services.live.leave(operation_id)


def _put_back(services: Services, operation_id: str, error: PromoterError) -> str:
    """The outcome the journal proves after a failed attempt, recorded: ``refused`` when no
    step was journaled (nothing was written), else ``needs_recovery``. Read afresh each
    time: a commit whose answer was lost may have happened. Returns the status. A host
    fenced meanwhile puts nothing back (``host_fenced``, noted for ``/readyz``): the
    operation is the new owner's (protocol: promotion#fence-stops-every-write)."""
    with services.db.session() as session:
        services.db.guard_writes(session)
        row = journal.get_operation(session, operation_id)
        if row is None or row.status not in RUNNING:
            return "unknown" if row is None else str(row.status)
        if step_rows.steps(session, operation_id):
            journal.set_status(
                session,
                row.operation_id,
                OperationStatus.NEEDS_RECOVERY,
                code=error.code,
                detail=error.detail,
            )
            return OperationStatus.NEEDS_RECOVERY
    promote.refuse(services.db, operation_id, error)
    return OperationStatus.REFUSED


_request_lock = threading.Lock()


def runner(services: Services) -> AttemptRunner:
    """The daemon's attempt runner, made on first use."""
    return services.once("runner", lambda: Runner(services))


def request_promotion(
    services: Services, bundle_id: str, receipt_sha256: str, fence: int
) -> Requested:
    bundle = load_bundle(services, bundle_id)
    grant = load_grant(services, bundle.grant_id)
    assert grant.grant_sha256 is not None
    stored = load_verification(services, bundle_id)
    if stored.get("status") != "passed":
        raise VerificationFailed("the bundle has no passed verification receipt")
    if stored["receipt_sha256"] != receipt_sha256:
        raise ReceiptConflict(
            "the request names another verification receipt than the stored one",
            stored_receipt_sha256=stored["receipt_sha256"],
        )
    repository = services.registry.by_identity(grant.repository_identity)
    operation_id = operation_id_for(
        grant_sha256=grant.grant_sha256,
        bundle_sha256=bundle.bundle_sha256,
        verification_receipt_sha256=receipt_sha256,
        repository_identity=repository.identity,
    )
    # a merged bundle (protocol: runs#merges-are-new-bundles) always waits for a person's approval
    gated = (
        approval.required(repository, grant)
        or bundle.merge is not None
        or repo_settings.requires_approval(services, repository)  # set by `repos set`
    )
    if gated:  # held for a decision: the lease and the evidence must hold already
        approval.precheck(services, grant, bundle.bundle_id, receipt_sha256, fence)
    with services.live.running(operation_id):  # live before the row can be in_progress
        return _request(services, operation_id, (bundle, grant), receipt_sha256, fence, gated)


def _request(
    services: Services,
    operation_id: str,
    loaded: tuple[Any, Any],
    receipt_sha256: str,
    fence: int,
    gated: bool,
) -> Requested:
    bundle, grant = loaded
    repository = services.registry.by_identity(grant.repository_identity)
    # not flushed: the attempt's plan is a durable commit made before its first write, and
    # that flush of the WAL makes this earlier commit durable too; a request lost with a
    # power failure before then has changed nothing and is asked again
    with _request_lock, services.db.session(durable=False) as session:
        services.db.guard_writes(session)  # a fenced host starts nothing
        row = journal.get_operation(session, operation_id)
        if row is not None and row.status != OperationStatus.REFUSED:
            return Requested(operation_id, row.status, False)
        # a person's rejection is final (protocol: runs#approvals): nothing is written
        if row is not None:
            approval.refuse_if_rejected(session, row)
        held = gated and (row is None or not approval.approved(session, row, grant))
        status = OperationStatus.AWAITING_APPROVAL if held else OperationStatus.IN_PROGRESS
        if row is None:
            journal.create_operation(
                session,
                operation_id=operation_id,
                kind=OperationKind.PROMOTION,
                status=status,
                repository_identity=repository.identity,
                repository_name=repository.name,
                owner=services.stamp(),
                grant_id=grant.grant_id,
                bundle_id=bundle.bundle_id,
                grant_sha256=grant.grant_sha256,
                bundle_sha256=bundle.bundle_sha256,
                verification_receipt_sha256=receipt_sha256,
                fence=fence,
            )
        else:
            journal.next_attempt(session, operation_id, status, owner=services.stamp(), fence=fence)
        try:
            session.flush()
        except IntegrityError as exc:  # another daemon created it first
            raise OperationConflict(
                "the operation was created concurrently by another daemon; ask again",
                operation_id=operation_id,
            ) from exc
        journal.start_attempt(session, operation_id)
        ticket = None if held else promote.ticket(session, operation_id, grant, (bundle, grant))
    if ticket is None:
        return Requested(operation_id, OperationStatus.AWAITING_APPROVAL, False)
    runner(services).submit(ticket)
    return Requested(operation_id, OperationStatus.IN_PROGRESS, True)


def decide(
    services: Services,
    operation_id: str,
    verdict: str,
    *,
    note: str,
    by: str,
    role: str,
    claimed_by: str = "",
    selection: partial.Selection | None = None,
    seen: Seen | None = None,
) -> Requested:
    """The operator's decision on a held promotion; an approval starts its attempt.

    ``by`` and ``role`` are the authenticated principal's; ``claimed_by`` a name the
    request carried, journaled apart and deciding nothing. ``selection``: the part an
    approval accepts; then the operation answered is the derived one, which runs.
    ``seen``: what the approval says its person saw beyond the review's first page; an
    approval that does not name a file that page does not show in full is refused
    (``diff_not_seen``, ``promoter.engine.review.seen``) before anything is decided."""
    if verdict not in ("approve", "reject"):
        raise ValidationFailed("the decision must be approve or reject")
    if verdict == "approve":  # outside the lock: it builds a page of the diff
        require_seen(services, operation_id, seen or Seen(), selection)
    with services.live.running(operation_id):  # live until its attempt is submitted
        with _request_lock:
            decided = approval.decide(
                services,
                operation_id,
                "approve" if verdict == "approve" else "reject",
                note=note,
                by=by,
                role=role,
                claimed_by=claimed_by,
                selection=selection,
                seen=seen if verdict == "approve" else None,
            )
        derived = decided.derived_operation_id  # live from before its row was committed
        try:
            if decided.ticket is not None:
                runner(services).submit(decided.ticket)
                if derived is not None:
                    return Requested(derived, OperationStatus.IN_PROGRESS, True)
                return Requested(operation_id, decided.status, True)
        finally:
            if derived is not None:
                services.live.leave(derived)
    return Requested(operation_id, decided.status, False)


def reopen(services: Services, operation_id: str, *, note: str, by: str, role: str) -> Requested:
    """The operator's reopening of a rejected promotion: held for a decision again."""
    with _request_lock:
        decided = approval.reopen(services, operation_id, note=note, by=by, role=role)
    return Requested(operation_id, decided.status, False)


def wait_for(services: Services, operation_id: str, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the running attempt; return early if none runs here.

    An attempt that had already failed before this request (its failure could not even be
    recorded: the database was unreachable) is not waited for and its error is never
    answered again: the request answers the operation's recorded status instead."""
    future = runner(services).future(operation_id)
    if future is None or (future.done() and (future.cancelled() or future.exception())):
        return
    with contextlib.suppress(FutureTimeout):
        future.result(timeout=timeout)


def operation_view(services: Services, operation_id: str) -> OperationView:
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        steps = step_rows.steps(session, operation_id)
        events = ledger.events(session, operation_id)
        dirs = step_rows.created_dirs(session, operation_id)
        attempts = journal.attempts(session, operation_id)
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
        )


def promotion_receipt(services: Services, operation_id: str) -> bytes:
    """The promotion receipt's bytes, only once the operation is ``completed``
    (protocol: bundles#promotion-receipt).

    The bytes are the row's (protocol: storage#receipt-in-outcome-commit: the ledger's row is the
    record), never the audit file's: the file is a copy, compared with them here and written again
    when missing or different (``AuditStore.copy``; a different one is set aside, its bytes kept). A
    copy that cannot be written is logged; the receipt is served all the same.
    """
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        receipt = row.receipt
        status = row.status
    if receipt is None or status != OperationStatus.COMPLETED:
        raise ReceiptUnavailable(
            f"operation {operation_id} has no receipt (status {status})", current_status=status
        )
    data = canonical_bytes(receipt)
    try:
        aside = services.audit.copy("promotion", operation_id, data)
    except PromoterError as exc:
        log.warning("the receipt copy of %s is not written: %s", operation_id, exc.detail)
        return data
    if aside is not None:
        log.warning(
            "the receipt copy of %s differed from the ledger's row: kept at %s, written again",
            operation_id,
            aside,
        )
    return data


def rollback_receipt(services: Services, operation_id: str) -> bytes:
    """The rollback receipt of promotion ``operation_id``: the host-local audit copy, else
    the bytes recorded in the ledger (a rollback another host carried out), once final.
    """
    if operation_id.startswith("op_") and "/" not in operation_id:
        stored = services.audit.get("rollback", operation_id)
        if stored is not None:
            return stored
        with services.db.session() as session:
            child = journal.get_operation(session, rollback_id(operation_id))
            recorded = None if child is None or child.status not in FINAL else child.receipt
        if recorded is not None:
            return canonical_bytes(recorded)
    raise ReceiptUnavailable(
        f"operation {operation_id} has no rollback receipt", operation_id=operation_id
    )


def preflight(services: Services, bundle_id: str, fence: int | None) -> Preflight:
    """Steps 1, 2 and 4 against the worktree as it is now; writes nothing. Another host's
    bundle or repository is ``owned_by_other_host`` (421), not a refusal."""
    verification = load_verification(services, bundle_id)
    checks = PreflightChecks.model_construct()
    passed = PreflightCheck.model_construct(ok=True)
    try:
        grant = load_grant(services, load_bundle(services, bundle_id).grant_id)
        if fence is not None:  # (1) authority
            check_authority(services, grant, fence)
        else:
            check_grant_window(grant)
        checks = PreflightChecks.model_construct(authority=passed)
        evidence = recheck_evidence(services, bundle_id, str(verification["receipt_sha256"]))
        checks = PreflightChecks.model_construct(authority=passed, evidence=passed)  # (2)
        repository = routing.local_repository(services, evidence.grant.repository_identity)
        with Root.open(repository.worktree) as root:
            readback = read_back(repository.layout, root, evidence.grant, evidence.bundle)
            if readback.ok:  # as the promotion does: links resolved once the read-back passed
                refuse_escapes_on_disk(services, repository, root, evidence.grant, evidence.bundle)
    except OwnedByOtherHost:
        raise  # asked of the wrong host: 421 naming the owner, as every other request
    except PromoterError as exc:
        return Preflight.model_construct(
            bundle_id=bundle_id,
            checks=checks,
            status="refused",
            code=exc.code,
            detail=exc.detail,
            error=exc.to_problem(),
        )
    drift = None if readback.ok else TargetDrift("the repository is not in an authorized old state")
    return Preflight.model_construct(
        bundle_id=bundle_id,
        checks=checks,
        status="passed" if drift is None else "refused",
        code=None if drift is None else drift.code,
        detail="" if drift is None else drift.detail,
        repository=readback.repository,
        paths=readback.paths,
        drifted=readback.drifted,
        unsafe=readback.unsafe,
    )


def current_targets(services: Services, operation_id: str) -> list[CurrentTarget]:
    """Each step's target as it reads now (read-only, without the lock)."""
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        repository = guarded_here(services.registry, services.owner.host, row)
        steps = [(s.path, s.old_state, s.new_state) for s in step_rows.steps(session, operation_id)]
    found: list[CurrentTarget] = []
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
            CurrentTarget.model_construct(path=path, matches=matches, actual=leaf_report(leaf))
        )
    return found


def bundle_operations(services: Services, bundle_id: str) -> list[BundleOperation]:
    """The promotions of one bundle: id, status, code and receipt (what its executor sees)."""
    with services.db.session() as session:
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
