"""Promotion requests: operation identity, idempotency and the approval gate.

``request_promotion`` derives the deterministic operation id
(protocol: promotion#operation-identity) and never starts a second run of the same
operation: completed returns the stored receipt's state, in progress its status, needs
recovery or reconciliation that status; only a ``refused`` operation gets a new attempt,
unless a person rejected it (``approval_rejected``; final until an operator reopens it).
Under the approval gate (always for a merged bundle, whatever the grant and the
repository say) (``promoter.engine.review.approval``) a request is held as
``awaiting_approval`` until a decision (``operation.decisions``).
Deliberately not here: running the attempt (``operation.runner``, the protocol itself in
``operation.promote``), views (``operation.views``), receipts (``operation.receipts``) and
preflight (``operation.preflight``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError

from promoter.domain.documents import operation_id_for
from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.domain.status import OperationKind, OperationStatus
from promoter.engine import repo_settings, tickets
from promoter.engine.intake.bundles import load_bundle, load_verification
from promoter.engine.intake.grants import load_grant
from promoter.engine.operation.runner import runner
from promoter.engine.ports import Promoting
from promoter.engine.review import approval
from promoter.errors import OperationConflict, ReceiptConflict, VerificationFailed
from promoter.store import journal


@dataclass(frozen=True)
class Requested:
    operation_id: str
    status: str
    started: bool


# one request or decision at a time writes an operation's row in this process
request_lock = threading.Lock()


def request_promotion(
    services: Promoting, bundle_id: str, receipt_sha256: str, fence: int
) -> Requested:
    bundle = load_bundle(services, bundle_id)
    grant = load_grant(services, bundle.grant_id)
    stored = load_verification(services, bundle_id)
    return request_verified(services, (bundle, grant), stored, receipt_sha256, fence)


def request_verified(
    services: Promoting,
    loaded: tuple[PatchBundleV1, GrantV1],
    stored: dict[str, Any],  # the verification receipt as stored (``load_verification``)
    receipt_sha256: str,
    fence: int,
) -> Requested:
    """``request_promotion`` of a bundle and its grant (``loaded``) whose verification
    receipt is ``stored``: as read from the store, or as ``submit_bundle`` just stored
    them (``operation.with_evidence``: the same documents, not parsed again)."""
    bundle, grant = loaded
    assert grant.grant_sha256 is not None
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
        or repo_settings.requires_approval(services.db, repository)  # set by `repos set`
    )
    if gated:  # held for a decision: the lease and the evidence must hold already
        approval.precheck(services, grant, bundle.bundle_id, receipt_sha256, fence)
    with services.live.running(operation_id):  # live before the row can be in_progress
        return _request(services, operation_id, (bundle, grant), receipt_sha256, fence, gated)


def _request(
    services: Promoting,
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
    # a fenced host starts nothing
    with request_lock, journal.unit_of_work(services.db, fenced=True, durable=False) as session:
        # a new operation (the common case) is looked for and written with plain statements;
        # one already journaled is read again and held, as every status decided on is
        row = journal.read_operation(session, operation_id)
        if row is not None:
            row = journal.get_operation(session, operation_id)
        if row is not None and row.status != OperationStatus.REFUSED:
            return Requested(operation_id, row.status, False)
        # a person's rejection is final (protocol: runs#approvals): nothing is written
        if row is not None:
            approval.refuse_if_rejected(session, row)
        held = gated and (row is None or not approval.approved(session, row, grant))
        status = OperationStatus.AWAITING_APPROVAL if held else OperationStatus.IN_PROGRESS
        try:
            if row is None:
                row = journal.start_operation(
                    session,
                    operation_id=operation_id,
                    kind=OperationKind.PROMOTION,
                    status=status,
                    repository=(repository.identity, repository.name),
                    owner=services.stamp(),
                    evidence=(
                        grant.grant_id,
                        grant.grant_sha256,
                        bundle.bundle_id,
                        bundle.bundle_sha256,
                        receipt_sha256,
                    ),
                    fence=fence,
                )
            else:
                journal.next_attempt(
                    session, operation_id, status, owner=services.stamp(), fence=fence
                )
                session.flush()
                journal.start_attempt(session, operation_id)
                row = journal.require(session, operation_id)
        except IntegrityError as exc:  # another daemon created it first
            raise OperationConflict(
                "the operation was created concurrently by another daemon; ask again",
                operation_id=operation_id,
            ) from exc
        ticket = None if held else tickets.ticket_of(session, row, grant, (bundle, grant))
    if ticket is None:
        return Requested(operation_id, OperationStatus.AWAITING_APPROVAL, False)
    runner(services).submit(ticket)
    return Requested(operation_id, OperationStatus.IN_PROGRESS, True)
