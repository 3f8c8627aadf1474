"""The approval gate: a promotion that waits for a person's decision before it writes.

``required`` says whether a repository or a grant requires it; ``precheck`` checks a
gated request before it is held; ``approved`` and ``rejected`` find a standing decision;
``decide`` journals the operator's ``approve`` or ``reject`` (with who, why and the hashes
it binds) and moves the operation; ``reopen`` holds a rejected one again; an approval in
part derives and starts the sub-bundle's operation (``promoter.engine.review.partial``).
The rules: protocol: runs#approvals, runs#what-an-approval-binds, runs#partial-accept;
what an approval of a cut review must name is checked first (``promoter.engine.review.seen``,
protocol: api#every-byte-reviewable).

Not here: scheduling the attempt (``promoter.engine.operation.runner``), roles (the
route admits the operator only), and the attempt's own checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict

from sqlalchemy.orm import Session

from promoter.domain.documents import operation_id_for
from promoter.domain.models import GrantV1
from promoter.domain.records import Operation, Ticket
from promoter.domain.status import OperationKind, OperationStatus
from promoter.engine import tickets
from promoter.engine.intake.authority import check_authority, check_grant_window, recheck_evidence
from promoter.engine.intake.bundles import load_bundle
from promoter.engine.intake.grants import load_grant
from promoter.engine.ports import Checking, Journaling
from promoter.engine.repos import Repository
from promoter.engine.review import partial
from promoter.engine.review.partial import ComposedWire, SelectionWire
from promoter.engine.review.seen import Seen, SeenWire
from promoter.errors import (
    ApprovalRejected,
    ApprovedInPart,
    OperationConflict,
    OperationUnknown,
    PromoterError,
)
from promoter.store import journal, ledger

__all__ = ["Decided", "approved", "decide", "precheck", "rejected", "reopen", "required"]

Verdict = Literal["approve", "reject"]
REJECTED = "approval_rejected"
IN_PART = "approved_in_part"


def required(repository: Repository, grant: GrantV1) -> bool:
    """Whether a promotion of ``grant`` into ``repository`` waits for a decision."""
    return repository.config.approval == "required" or grant.approval == "required"


def precheck(
    services: Checking, grant: GrantV1, bundle_id: str, receipt_sha256: str, fence: int
) -> None:
    """Steps 1 and 2 of an attempt, before the operation is held: lease and evidence."""
    check_authority(services.db, grant, fence)
    recheck_evidence(services, bundle_id, receipt_sha256)


class Who(TypedDict):
    role: str
    name: str


class Binding(TypedDict):
    """What an approval binds (protocol: runs#what-an-approval-binds)."""

    operation_id: str
    grant_sha256: str | None
    bundle_sha256: str | None
    verification_receipt_sha256: str | None
    repository_identity: str


class Extras(TypedDict, total=False):
    """A decision's members written only when they apply, last."""

    claimed_by: str  # the name the request carried, apart from the principal's
    seen: SeenWire  # what an approval said its person saw beyond the first page
    code: str  # a refusal past the grant's window


class Decision(Binding, Extras):
    """A ``decision`` event's payload: approved or rejected (by a person or the window)."""

    approval: str
    by: Who
    note: str
    expires_at: str


class Chosen(TypedDict):
    """The part of a bundle an approval in part accepted."""

    accepted_paths: list[str]
    declined_paths: list[str]
    composed: list[ComposedWire]
    selection: SelectionWire


class InPart(Decision, Chosen):
    """The held operation's ``decision``: approved in part, naming the derived operation."""

    derived_bundle_id: str
    derived_operation_id: str


class PartApproved(Decision, Chosen):
    """The derived operation's ``decision``: approved, naming the one it was cut from."""

    parent_operation_id: str
    parent_bundle_id: str
    parent_decision_event_id: str


class Reopened(Binding):
    """A ``decision`` event's payload: a rejection undone."""

    approval: Literal["reopened"]
    by: Who
    note: str


def _binding(row: Operation) -> Binding:
    return {
        "operation_id": row.operation_id,
        "grant_sha256": row.grant_sha256,
        "bundle_sha256": row.bundle_sha256,
        "verification_receipt_sha256": row.verification_receipt_sha256,
        "repository_identity": row.repository_identity,
    }


def _bound(row: Operation) -> bool:
    """The row's operation id is the one its hashes derive
    (protocol: promotion#operation-identity)."""
    if None in (row.grant_sha256, row.bundle_sha256, row.verification_receipt_sha256):
        return False
    derived = operation_id_for(
        grant_sha256=str(row.grant_sha256),
        bundle_sha256=str(row.bundle_sha256),
        verification_receipt_sha256=str(row.verification_receipt_sha256),
        repository_identity=row.repository_identity,
    )
    return derived == row.operation_id


def _latest(session: Session, operation_id: str) -> Mapping[str, object] | None:
    """The payload of the operation's latest approval decision (approved, rejected, reopened),
    as stored (a version's ``Decision``, ``InPart``, ``PartApproved`` or ``Reopened``)."""
    latest: Mapping[str, object] | None = None
    for event in ledger.events(session, operation_id):
        payload = event.payload
        if event.kind == "decision" and isinstance(payload, dict) and "approval" in payload:
            latest = payload
    return latest


def rejected(session: Session, row: Operation) -> Mapping[str, object] | None:
    """The standing rejection of an operation by a person, if its latest decision is one.

    A refusal of an approval past the grant's window (which carries its ``code``) is not a
    person's rejection: that grant is dead anyway and every later request says so.
    """
    latest = _latest(session, row.operation_id)
    if latest is None or latest.get("approval") != "rejected" or "code" in latest:
        return None
    return latest


def refuse_if_rejected(session: Session, row: Operation) -> None:
    """Raise ``ApprovalRejected`` when a person rejected the operation and nobody reopened
    it, ``ApprovedInPart`` when a person accepted a part of it (promoted on its own)."""
    latest = _latest(session, row.operation_id)
    if latest is not None and latest.get("approval") == IN_PART:
        raise ApprovedInPart(
            f"operation {row.operation_id} was approved in part; the accepted part is "
            f"operation {latest.get('derived_operation_id')}",
            operation_id=row.operation_id,
            derived_operation_id=latest.get("derived_operation_id"),
            derived_bundle_id=latest.get("derived_bundle_id"),
        )
    standing = rejected(session, row)
    if standing is None:
        return
    claimed = standing.get("by")
    by: Mapping[str, object] = claimed if isinstance(claimed, dict) else {}
    raise ApprovalRejected(
        f"operation {row.operation_id} was rejected by {by.get('name', '?')}; a rejection is "
        f"final: it is not held again unless an operator reopens it "
        f"(promoter reopen {row.operation_id})",
        operation_id=row.operation_id,
        rejected_by=by,
        note=standing.get("note", ""),
    )


def approved(session: Session, row: Operation, grant: GrantV1) -> bool:
    """A standing approval: the latest decision is ``approved``, binds this row, in window."""
    latest = _latest(session, row.operation_id)
    if latest is None or latest.get("approval") != "approved" or not _bound(row):
        return False
    if {k: latest.get(k) for k in _binding(row)} != _binding(row):
        return False
    try:
        check_grant_window(grant)
    except PromoterError:
        return False
    return True


@dataclass(frozen=True)
class Decided:
    operation_id: str
    status: OperationStatus
    ticket: Ticket | None  # the attempt an approval starts
    derived_operation_id: str | None = None  # the operation of the part accepted


def _held(session: Session, operation_id: str) -> Operation:
    """The promotion awaiting approval whose id its hashes derive, else the error."""
    row = journal.get_operation(session, operation_id)
    if row is None:
        raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
    if row.kind != OperationKind.PROMOTION or row.status != OperationStatus.AWAITING_APPROVAL:
        rejected = row.code == ApprovalRejected.code  # final until an operator reopens it
        reopen = f"; it was rejected: promoter reopen {operation_id}" if rejected else ""
        raise OperationConflict(
            f"operation {operation_id} is {row.status}, not awaiting_approval{reopen}",
            operation_id=operation_id,
            current_status=row.status,
        )
    if not _bound(row):
        raise OperationConflict(
            f"operation {operation_id} does not derive from its grant, bundle and "
            "verification hashes; it cannot be approved",
            operation_id=operation_id,
        )
    return row


def decide(
    services: Checking,
    operation_id: str,
    verdict: Verdict,
    *,
    note: str,
    by: str,
    role: str,
    claimed_by: str = "",
    selection: partial.Selection | None = None,
    seen: Seen | None = None,
) -> Decided:
    """Journal the decision on an ``awaiting_approval`` promotion and move it.

    ``by`` and ``role`` are the authenticated principal's name and role; ``claimed_by``
    is a name the request itself carried, recorded apart (and only when given).
    ``selection``: the part of the bundle an approval accepts (``decide_part``).
    ``seen``: what the approval said its person saw beyond the review's first page,
    journaled with it (the rule is checked before: ``promoter.engine.review.seen``).

    Raises ``OperationConflict`` unless the operation is a promotion awaiting approval
    whose id its hashes derive; ``GrantExpired`` (after refusing it) when approving past
    the grant's window. The caller starts the attempt of an approved operation.
    """
    if verdict == "approve" and selection is not None and selection.partial:
        with journal.unit_of_work(services.db) as session:
            grant = load_grant(services, str(_held(session, operation_id).grant_id))
        try:
            check_grant_window(grant)
        except PromoterError:
            pass  # refused below, as a whole approval past the window is
        else:
            return decide_part(
                services,
                operation_id,
                selection,
                note=note,
                by=by,
                role=role,
                claimed_by=claimed_by,
                seen=seen,
            )
    with journal.unit_of_work(services.db) as session:
        row = _held(session, operation_id)
        grant = load_grant(services, str(row.grant_id))
        expired: PromoterError | None = None
        if verdict == "approve":
            try:
                check_grant_window(grant)
            except PromoterError as exc:
                expired = exc
        approval = "approved" if verdict == "approve" and expired is None else "rejected"
        extras: Extras = {}
        if claimed_by:
            extras["claimed_by"] = claimed_by
        if seen is not None and seen.said and approval == "approved":
            extras["seen"] = seen.wire()
        if expired is not None:
            extras["code"] = expired.code
        payload: Decision = {
            "approval": approval,
            "by": {"role": role, "name": by},
            "note": note,
            "expires_at": grant.expires_at,
            **_binding(row),
            **extras,
        }
        ledger.append(session, operation_id, "decision", payload)
        if payload["approval"] == "approved":
            services.claim(session, row.operation_id)
            journal.set_status(session, row.operation_id, OperationStatus.IN_PROGRESS)
            started = tickets.ticket(session, operation_id, grant)
            return Decided(operation_id, OperationStatus.IN_PROGRESS, started)
        code = expired.code if expired is not None else REJECTED
        detail = expired.detail if expired is not None else f"rejected by {by}: {note}".rstrip()
        ledger.append(session, operation_id, "outcome", {"status": "refused", "code": code})
        journal.set_status(
            session, row.operation_id, OperationStatus.REFUSED, code=code, detail=detail
        )
    if expired is not None:
        raise expired
    return Decided(operation_id, OperationStatus.REFUSED, None)


def decide_part(
    services: Checking,
    operation_id: str,
    selection: partial.Selection,
    *,
    note: str,
    by: str,
    role: str,
    claimed_by: str = "",
    seen: Seen | None = None,
) -> Decided:
    """Approve the part of a held promotion that ``selection`` accepts.

    The sub-bundle is derived and verified (and stored) first: a selection that is
    refused changes nothing. A selection of every path and every hunk is the whole
    bundle: an ordinary approval. Then, in one transaction, the held operation is journaled
    ``approved_in_part`` and refused with that code, and the derived bundle's operation
    is created with its approval and started (``ticket``).
    """
    with journal.unit_of_work(services.db) as session:
        parent_row = _held(session, operation_id)
        parent_bundle_id = str(parent_row.bundle_id)
    parent = load_bundle(services, parent_bundle_id)
    derived = partial.derive(services, parent, selection, by)
    if not derived.declined and not derived.composed:  # every path, every hunk: all of it
        return decide(
            services,
            operation_id,
            "approve",
            note=note,
            by=by,
            role=role,
            claimed_by=claimed_by,
            seen=seen,
        )
    receipt = partial.store(services, derived)
    bundle = derived.bundle
    # the derived operation is live from before its row commits (the caller leaves it
    # once its attempt is submitted; an error, the commit's included, leaves it at once)
    with services.live.handed_on() as adopt, journal.unit_of_work(services.db) as session:
        row = _held(session, operation_id)  # still held: decisions are serialized
        grant = load_grant(services, str(row.grant_id))
        assert grant.grant_sha256 is not None and row.fence is not None
        derived_id = operation_id_for(
            grant_sha256=grant.grant_sha256,
            bundle_sha256=bundle.bundle_sha256,
            verification_receipt_sha256=receipt.receipt_sha256,
            repository_identity=row.repository_identity,
        )
        if journal.get_operation(session, derived_id) is not None:
            raise OperationConflict(
                f"the part selected is already operation {derived_id}",
                operation_id=operation_id,
                derived_operation_id=derived_id,
            )
        who: Who = {"role": role, "name": by}
        chosen: Chosen = {
            "accepted_paths": derived.accepted,
            "declined_paths": derived.declined,
            "composed": [{"path": c.path, "hunks": c.hunks, "by": c.by} for c in derived.composed],
            "selection": selection.wire(),
        }
        said: Extras = {"seen": seen.wire()} if seen is not None and seen.said else {}
        claimed: Extras = {"claimed_by": claimed_by} if claimed_by else {}
        payload: InPart = {
            "approval": IN_PART,
            "by": who,
            "note": note,
            "expires_at": grant.expires_at,
            **chosen,
            **said,
            "derived_bundle_id": bundle.bundle_id,
            "derived_operation_id": derived_id,
            **_binding(row),
            **claimed,
        }
        decision = ledger.append(session, operation_id, "decision", payload)
        ledger.append(
            session,
            operation_id,
            "outcome",
            {"status": "refused", "code": IN_PART, "derived_operation_id": derived_id},
        )
        journal.set_status(
            session,
            operation_id,
            OperationStatus.REFUSED,
            code=IN_PART,
            detail=f"approved in part by {by}: the accepted part is operation {derived_id} "
            f"(bundle {bundle.bundle_id}); declined {len(derived.declined)} path(s)",
        )
        adopt(derived_id)
        tickets.create_promotion(
            session,
            derived_id,
            OperationStatus.IN_PROGRESS,
            (bundle, grant, receipt.receipt_sha256),
            repository=(row.repository_identity, row.repository_name),
            owner=services.stamp(),
            fence=row.fence,
        )
        session.flush()
        journal.start_attempt(session, derived_id)
        derived_row = journal.require(session, derived_id)
        approval: PartApproved = {
            "approval": "approved",
            "by": who,
            "note": note,
            "expires_at": grant.expires_at,
            **chosen,
            **said,
            "parent_operation_id": operation_id,
            "parent_bundle_id": parent.bundle_id,
            "parent_decision_event_id": decision,
            **_binding(derived_row),
            **claimed,
        }
        ledger.append(session, derived_id, "decision", approval)
        started = tickets.ticket(session, derived_id, grant)
    return Decided(operation_id, OperationStatus.REFUSED, started, derived_id)


def reopen(services: Journaling, operation_id: str, *, note: str, by: str, role: str) -> Decided:
    """Undo a person's rejection: journal ``reopened`` and hold the operation again.

    The operation must be a refused promotion whose latest decision is a person's
    rejection (else ``OperationConflict``). Its next attempt is held in
    ``awaiting_approval`` with the fence it had; nothing is written until an approval,
    whose attempt re-checks everything as usual.
    """
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        if (
            row.kind != OperationKind.PROMOTION
            or row.status != OperationStatus.REFUSED
            or rejected(session, row) is None
        ):
            raise OperationConflict(
                f"operation {operation_id} is {row.status} and not rejected by a person; "
                "only a rejected promotion can be reopened",
                operation_id=operation_id,
                current_status=row.status,
            )
        payload: Reopened = {
            "approval": "reopened",
            "by": {"role": role, "name": by},
            "note": note,
            **_binding(row),
        }
        ledger.append(session, operation_id, "decision", payload)
        journal.next_attempt(
            session, operation_id, OperationStatus.AWAITING_APPROVAL, owner=services.stamp()
        )
    return Decided(operation_id, OperationStatus.AWAITING_APPROVAL, None)
