"""How a promotion attempt ends: read-back, check, receipt.

After the writes every target is read back (one ``Directories.read_states`` call); all
exactly new: the optional check runs, then the outcome event, the receipt built from the
read-back, its envelope and ``completed`` are one durable commit and the receipt's file a
copy written after it (protocol: promotion#step-outcome, storage#receipt-in-outcome-commit,
recovery#post-promotion-check). Anything else fails closed as ``needs_reconciliation``,
or rolls back (protocol: recovery#rollback-on-write-failure). Fault points:
``after_readback``, ``before_check``, ``after_check``, ``before_receipt``, then the copy's
own (``audit_promotion_after_…``).

Not here: the writes (``operation.promote``), the rollback (``operation.rollback``), running
the check (``operation.check``) and fingerprinting the repository
(``operation.worktree_diff``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from pydantic import TypeAdapter

from promoter import faults
from promoter.domain.canonical import canonical_bytes, rfc3339, sha256_hex, utcnow
from promoter.domain.documents import UNSEALED, sealed, sealed_canonical
from promoter.domain.models import (
    Change,
    GitMode,
    PatchPromotionReceiptV1,
    PromotionEvents,
)
from promoter.domain.models import Target as ReceiptTarget
from promoter.domain.path_state import State, Verdict, classify
from promoter.domain.paths import disk_path, sort_key
from promoter.domain.status import OperationStatus, StepStatus
from promoter.engine.intake.authority import Evidence
from promoter.engine.operation.check import CheckWire, run_check
from promoter.engine.operation.driver import Target
from promoter.engine.operation.preconditions import leaf_report
from promoter.engine.operation.rollback import rollback_held
from promoter.engine.operation.worktree_diff import Baseline, ChangesWire
from promoter.engine.ports import Placing
from promoter.engine.receipts.envelopes import (
    PROMOTION,
    ReceiptSigner,
    make_envelope,
    receipt_signer,
)
from promoter.engine.receipts.envelopes import record as record_envelope
from promoter.engine.repos import Repository
from promoter.errors import OperationConflict, PromoterError
from promoter.fs.aside import KeptEntry
from promoter.fs.held import Directories
from promoter.fs.root import Root
from promoter.store import journal, ledger, repo, step_rows
from promoter.store.audit import AuditStore
from promoter.store.db import Database
from promoter.store.key_ledger import StoredEnvelope

CHECK_FAILED = "check_failed"
CHECK_CHANGED = "check_changed_worktree"
SHOWN_PATHS = 10
PREPARE_TRIES = 3  # an outcome made again when the chain moved before its commit

log = logging.getLogger("promoter.outcome")
# the receipt's targets from the read-back rows in one validation call: a constructor call
# per target costs a fifth more CPU on a large promotion
_TARGETS = TypeAdapter(list[ReceiptTarget])


def read_targets(root: Root, changes: list[Change]) -> tuple[list[Target], bool]:
    """Every target read from disk now: a per-path report, and whether all are exactly new."""
    paths: list[Target] = []
    all_new = True
    with closing(Directories.for_reads(root)) as directories:
        leaves = directories.read_states([disk_path(change.path) for change in changes])
    for change, leaf in zip(changes, leaves, strict=True):
        old, new = State.of(change.old), State.of(change.new)  # once per change
        actual: Mapping[str, Any]
        if isinstance(leaf, PromoterError):
            found, actual = Verdict.NEITHER, {"error": leaf.code, "detail": leaf.detail}
        else:
            found, actual = classify(leaf, old, new).verdict, leaf_report(leaf)
        all_new = all_new and found is Verdict.NEW
        paths.append(Target(change.path, found, actual, old.wire(), new.wire()))
    return paths, all_new


@dataclass(frozen=True)
class Planned:
    """What the plan's commit recorded and the outcome builds on: the row's ``decision`` and
    ``action`` events, its repository, and the chain's end (the action's link). Carried to
    the outcome so that it is not read back before the outcome's commit, which reads the
    row and the chain's end and checks both (``_commit``)."""

    decision: str
    action: str
    repository_identity: str
    link: tuple[int, str]


def finish(
    services: Placing,
    operation_id: str,
    root: Root,
    changes: list[Change],
    evidence: Evidence,
    failure: tuple[int, PromoterError] | None,
    planned: Planned | None = None,
) -> None:
    """Read every target back; complete with a receipt, or fail closed. ``planned``: what
    this attempt's plan recorded (None: the outcome reads it)."""
    paths, all_new = read_targets(root, changes)
    faults.point("after_readback")
    if failure is not None or not all_new:
        fail_closed(services.db, operation_id, paths, failure)
        repository = services.registry.by_identity(evidence.grant.repository_identity)
        if failure is not None and repository.config.on_write_failure == "rollback":
            note = f"on_write_failure = rollback: [{failure[1].code}] {failure[1].detail}"
            rollback_held(services, operation_id, root, note)  # by CAS, under the same lock
        return
    repository = services.registry.by_identity(evidence.grant.repository_identity)
    if repository.config.check_command:
        checked = post_check(services, operation_id, root, repository, changes)
        if checked is None:
            return
        paths = checked
        planned = None  # the check's decision event moved the chain's end
    signer = receipt_signer(services)  # published before the receipt's transaction
    complete(services.db, services.audit, operation_id, changes, evidence, paths, signer, planned)


def post_check(
    services: Placing,
    operation_id: str,
    root: Root,
    repository: Repository,
    changes: list[Change],
) -> list[Target] | None:
    """Run the repository's check and compare the repository before and after it.

    Returns the targets as read back after the check when it passed and changed
    nothing (the caller completes with them); otherwise the operation has ended
    (``needs_reconciliation``, or a rollback under ``on_check_failure = "rollback"``)
    and None is returned.
    """
    config = repository.config
    assert config.check_command is not None
    with journal.attempt(services.db, operation_id) as j:
        step_rows.mark_all_steps(j.session, operation_id, StepStatus.COMPLETED)
        j.set_status(OperationStatus.APPLIED_UNVERIFIED)
    try:
        baseline = Baseline.take(repository.layout)
    except PromoterError as exc:
        detail = f"the repository could not be fingerprinted before the check: {exc.detail}"
        _end_check(services, operation_id, root, config.on_check_failure, CHECK_FAILED, detail)
        return None
    faults.point("before_check")
    result = run_check(config.check_command, repository.worktree, config.check_timeout)
    faults.point("after_check")
    paths, _ = read_targets(root, changes)
    drifted: list[Drifted] = [
        {"path": p.path, "actual": p.actual, "expected": p.expected_new} for p in paths if not p.new
    ]
    changed: CheckChanged | CheckUncompared
    named = [t["path"] for t in drifted]
    count = len(named)
    try:
        found = baseline.changes([disk_path(c.path) for c in changes])
        changed = {"targets": drifted, **found.wire()}
        named += found.summary(SHOWN_PATHS)
        count += found.count
    except PromoterError as exc:
        changed = {"targets": drifted, "error": {"code": exc.code, "detail": exc.detail}}
        named.append(f"(the comparison failed: {exc.detail})")
        count += 1
    shown = ", ".join(named[:SHOWN_PATHS]) + (" …" if count > SHOWN_PATHS else "")
    with journal.attempt(services.db, operation_id) as j:
        row = j.row
        decided: CheckDecision = {
            "check": result.wire(),
            "check_changed": count,
            "check_changed_shown": shown,
        }
        j.event("decision", decided)
        j.set_report(
            {
                **(row.report or {}),
                "check": result.wire(),
                "paths": [p.wire() for p in paths],
                "check_changed": changed,
            },
        )
    if result.passed and count == 0:
        return paths
    if not result.passed:
        code = CHECK_FAILED
        detail = (
            f"the post-promotion check {'timed out' if result.timed_out else 'failed'}"
            f" (exit code {result.exit_code})"
        )
        if count:
            detail += f"; it also changed {count} path(s): {shown}"
    else:
        code = CHECK_CHANGED
        detail = f"the post-promotion check changed {count} path(s): {shown}"
    _end_check(services, operation_id, root, config.on_check_failure, code, detail)
    return None


def _end_check(
    services: Placing, operation_id: str, root: Root, policy: str, code: str, detail: str
) -> None:
    """Hold for the operator, or roll back by compare-and-swap; never a receipt."""
    if policy == "rollback":
        rollback_held(services, operation_id, root, detail)
        with journal.attempt(services.db, operation_id) as j:
            j.set_status(j.row.status, code=code, detail=detail)
        return
    with journal.attempt(services.db, operation_id) as j:
        held: Held = {
            "status": OperationStatus.NEEDS_RECONCILIATION,
            "code": code,
            "detail": detail,
        }
        j.event("outcome", held)
        j.set_status(OperationStatus.NEEDS_RECONCILIATION, code=code, detail=detail)


def fail_closed(
    db: Database,
    operation_id: str,
    paths: list[Target],
    failure: tuple[int, PromoterError] | None,
    *,
    kept: list[KeptEntry] | None = None,
) -> None:
    """Close the attempt as ``needs_reconciliation``; the report names any kept bytes."""
    kept = [*(kept or []), *(failure[1].context.get("kept", []) if failure else [])]
    code = failure[1].code if failure else "target_drift"
    detail = failure[1].detail if failure else "a target did not read back as its new state"
    with journal.attempt(db, operation_id) as j:
        row = j.row
        statuses: dict[int, StepStatus] = {}
        details: dict[int, str] = {}
        for step, path in zip(j.steps(), paths, strict=True):
            if path.verdict is Verdict.NEW:
                statuses[step.seq] = StepStatus.COMPLETED
            elif (failure and step.seq == failure[0]) or path.verdict is Verdict.NEITHER:
                statuses[step.seq] = StepStatus.FAILED
                details[step.seq] = (
                    detail
                    if failure and step.seq == failure[0]
                    else "read back as neither old nor new"
                )
        j.set_steps(statuses, details)
        held: Held = {
            "status": OperationStatus.NEEDS_RECONCILIATION,
            "code": code,
            "detail": detail,
        }
        if kept:
            held["kept"] = kept
        j.event("outcome", held)
        wired = [p.wire() for p in paths]
        report = {**(row.report or {}), "paths": wired, "error": {"code": code, "detail": detail}}
        if kept:
            report["kept"] = kept
        j.set_status(
            OperationStatus.NEEDS_RECONCILIATION,
            code=code,
            detail=detail,
            report=report,
        )


def build_receipt(
    operation_id: str,
    evidence: Evidence,
    repository_identity: str,
    targets: list[ReceiptTarget],
    events: PromotionEvents,
) -> PatchPromotionReceiptV1:
    """The sealed receipt of a completed promotion (targets in path order)."""
    return sealed(_unsealed(operation_id, evidence, repository_identity, targets, events))[0]


def _unsealed(
    operation_id: str,
    evidence: Evidence,
    repository_identity: str,
    targets: list[ReceiptTarget],
    events: PromotionEvents,
) -> PatchPromotionReceiptV1:
    """``build_receipt`` before its ``receipt_sha256`` (``UNSEALED``)."""
    derived = evidence.bundle.derived_from  # a part accepted at review names its parent
    assert evidence.grant.grant_sha256 is not None  # a stored grant is sealed
    return PatchPromotionReceiptV1(
        schema_="PatchPromotionReceiptV1",
        receipt_sha256=UNSEALED,
        operation_id=operation_id,
        repository_identity=repository_identity,
        grant_id=evidence.grant.grant_id,
        grant_sha256=evidence.grant.grant_sha256,
        bundle_id=evidence.bundle.bundle_id,
        bundle_sha256=evidence.bundle.bundle_sha256,
        verification_receipt_sha256=evidence.receipt_sha256,
        targets=sorted(targets, key=lambda t: sort_key(t.path)),
        events=events,
        promoted_at=rfc3339(utcnow()),
        base_operation=evidence.grant.base_operation,  # a chained run names its base
        parent_bundle_id=None if derived is None else derived.parent_bundle_id,
        declined_paths=None if derived is None else list(derived.declined_paths),
        composed=None if derived is None else list(derived.composed),
    )


def complete(
    db: Database,
    audit: AuditStore,
    operation_id: str,
    changes: list[Change],
    evidence: Evidence,
    paths: list[Target],
    signer: ReceiptSigner,
    planned: Planned | None = None,
) -> None:
    """Complete the operation in one durable commit (protocol: storage#receipt-in-outcome-commit):
    the outcome event, the receipt built from ``paths`` (what was read from disk), its envelope
    signed by ``signer`` and ``completed``; then the receipt's copy into the audit store, unflushed.

    The outcome event is worked out (``ledger.prepare``), the receipt that names it built
    and signed, all before the transaction opens; the transaction appends the prepared
    event only while the chain still ends where it did and the row still names the events
    and repository the receipt does (else everything is made again, from what is read).
    ``planned``: what the plan's commit recorded, for the first making (no read before
    the transaction); None, or a second making, reads the row and the chain's end.
    A row that already holds a receipt (recorded by a version that recorded it before its
    status, then interrupted) keeps it: its bytes are the ones completed and copied.
    """
    assert [p.path for p in paths] == [c.path for c in changes]
    assert all(p.new for p in paths)
    targets: list[TargetState] = [
        {
            "path": p.path,
            "exists": p.actual["exists"],
            "sha256": p.actual["sha256"],
            "mode": p.actual["mode"],
        }
        for p in paths
    ]
    faults.point("before_receipt")  # the one point of the commit: before it, nothing of it
    for _ in range(PREPARE_TRIES):
        made = _made(db, operation_id, evidence, targets, signer, planned)
        planned = None  # made again: from what is read
        try:
            _commit(db, operation_id, evidence, made)
        except ledger.ChainMoved:
            continue
        break
    else:
        raise OperationConflict(
            f"the event chain of {operation_id} kept changing while its outcome was recorded;"
            " nothing of the outcome was recorded",
            operation_id=operation_id,
        )
    # the copy, after the commit and never flushed: the row is the record; a crash, a full
    # disk or a damaged file here is repaired from the row when the receipt is read
    try:
        aside = audit.copy("promotion", operation_id, made.data)
    except PromoterError as exc:
        log.warning(
            "the receipt copy of %s is not written (%s); the row is the record, "
            "the copy is written when the receipt is read",
            operation_id,
            exc.detail,
        )
        return
    if aside is not None:
        log.warning("a damaged receipt copy of %s was kept at %s", operation_id, aside)


class Drifted(TypedDict):
    """A target the check left other than its new state."""

    path: str
    actual: Mapping[str, Any]
    expected: Mapping[str, Any] | None


class CheckChanged(ChangesWire):
    """The report's ``check_changed``: the targets the check moved, and the paths it
    changed elsewhere (``CheckChanges.wire``)."""

    targets: list[Drifted]


class CheckUncompared(TypedDict):
    """The report's ``check_changed`` when the repository could not be compared."""

    targets: list[Drifted]
    error: dict[str, str]


class CheckDecision(TypedDict):
    """The ``decision`` event after the post-promotion check: its result, what it changed."""

    check: CheckWire
    check_changed: int
    check_changed_shown: str


class Held(TypedDict):
    """The ``outcome`` event of an attempt held for the operator (``needs_reconciliation``)."""

    status: str
    code: str
    detail: str
    kept: NotRequired[list[KeptEntry]]


class TargetState(TypedDict):
    """A target as read back for the receipt (a ``Target`` of it), in step order."""

    path: str
    exists: bool
    sha256: str | None
    mode: GitMode | None


class CompletedOutcome(TypedDict):
    """The payload of a completed promotion's outcome event."""

    status: Literal["completed"]
    targets_sha256: str


_Basis = tuple[str | None, str | None, str]  # a row's decision and action events, repository


@dataclass(frozen=True)
class _Made:
    """What the outcome's commit records, made before it: the prepared outcome event (None
    when the row already holds its receipt), the receipt and its bytes, the envelope."""

    outcome: ledger.Prepared | None
    basis: _Basis  # the decision, action and repository it names
    receipt: dict[str, Any]  # the receipt's JSON document, as the row keeps it
    receipt_sha256: str
    data: bytes
    sealed: StoredEnvelope


def _made(
    db: Database,
    operation_id: str,
    evidence: Evidence,
    targets: list[TargetState],
    signer: ReceiptSigner,
    planned: Planned | None,
) -> _Made:
    """The outcome event, the receipt naming it and its signed envelope (no write), on
    what the plan recorded (``planned``) or else on the row and chain's end as read."""
    payload: CompletedOutcome = {
        "status": "completed",
        "targets_sha256": sha256_hex(canonical_bytes(targets)),  # in step order
    }
    if planned is not None:
        outcome = ledger.prepare_after(planned.link, operation_id, "outcome", payload)
        planned_basis: _Basis = (planned.decision, planned.action, planned.repository_identity)
        return _sign(operation_id, evidence, targets, signer, outcome, planned_basis)
    # a read, on a plain connection (``Database.reading``): ``_commit`` decides, on its own
    with db.reading() as session:
        row = journal.read_required(session, operation_id)
        basis = (row.decision_event_id, row.action_event_id, row.repository_identity)
        if row.receipt is None:
            outcome = ledger.prepare(session, operation_id, "outcome", payload)
    if row.receipt is None:
        return _sign(operation_id, evidence, targets, signer, outcome, basis)
    assert row.receipt_sha256 is not None
    data = canonical_bytes(row.receipt)  # the row's bytes, the copy's and the signed ones
    envelope = make_envelope(signer, PROMOTION, operation_id, data)
    return _Made(None, basis, row.receipt, row.receipt_sha256, data, envelope)


def _sign(
    operation_id: str,
    evidence: Evidence,
    targets: list[TargetState],
    signer: ReceiptSigner,
    outcome: ledger.Prepared,
    basis: _Basis,
) -> _Made:
    """The receipt naming ``outcome`` and the events and repository of ``basis``, sealed
    and signed."""
    decision, action, repository_identity = basis
    assert decision is not None and action is not None
    events = PromotionEvents(decision=decision, action=action, outcome=outcome.event_id)
    built = _TARGETS.validate_python(targets)  # one pass, as the rows are read back
    receipt, recorded, data = sealed_canonical(  # the row's bytes, the copy's, the signed ones
        _unsealed(operation_id, evidence, repository_identity, built, events)
    )
    assert receipt.receipt_sha256 is not None
    envelope = make_envelope(signer, PROMOTION, operation_id, data)
    return _Made(outcome, basis, recorded, receipt.receipt_sha256, data, envelope)


def _commit(db: Database, operation_id: str, evidence: Evidence, made: _Made) -> None:
    """The outcome's one durable commit; ``ledger.ChainMoved`` leaves nothing of it."""
    # a fenced host records no outcome (``engine.fencing``)
    with journal.unit_of_work(db, fenced=True) as session:
        # read as plain columns: it is completed only while it still has the status read
        # here (``journal.complete``)
        row = journal.read_required(session, operation_id)
        receipt: tuple[str, dict[str, Any], str] | None = None
        if made.outcome is not None:
            named = (row.decision_event_id, row.action_event_id, row.repository_identity)
            if row.receipt is not None or named != made.basis:  # moved: make it all again
                raise ledger.ChainMoved(operation_id)
            outcome = ledger.append_prepared(session, made.outcome)
            receipt = (outcome, made.receipt, made.receipt_sha256)
        elif row.receipt != made.receipt:
            raise ledger.ChainMoved(operation_id)
        step_rows.mark_all_steps(session, operation_id, StepStatus.COMPLETED)
        record_envelope(session, made.sealed)
        report = {k: v for k, v in (row.report or {}).items() if k != "paths"}
        journal.complete(session, row, report=report, receipt=receipt)
        repo.set_bundle_state(session, evidence.bundle.bundle_id, "promoted")
