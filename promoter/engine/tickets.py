"""How an operation starts: its row, created (``create_operation_row``, the one place for
every kind: a promotion through ``create_promotion``, a rollback, a restore, the
rehearsal's), and the ticket a promotion's attempt starts with: what the attempt decides
on, read in the transaction that starts it.

Deliberately not here: running the attempt (``promoter.engine.operation.promote``), or
deciding whether it runs (``operation.requests``, ``review.approval``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.domain.records import Operation, Ticket
from promoter.domain.status import OperationKind, OperationStatus
from promoter.store import journal, repo


def ticket(
    session: Session,
    operation_id: str,
    grant: GrantV1,
    loaded: tuple[PatchBundleV1, GrantV1] | None = None,
) -> Ticket:
    """The attempt the operation starts, with the stage's lease as read in this transaction
    (``loaded``: the bundle and grant the caller has just read, handed on to the attempt)."""
    return ticket_of(session, journal.require(session, operation_id), grant, loaded)


def ticket_of(
    session: Session,
    row: Operation,
    grant: GrantV1,
    loaded: tuple[PatchBundleV1, GrantV1] | None = None,
) -> Ticket:
    """``ticket`` of the operation as this transaction wrote it (``journal.start_operation``)."""
    assert row.bundle_id is not None and row.verification_receipt_sha256 is not None
    assert row.fence is not None
    return Ticket(
        operation_id=row.operation_id,
        attempt=row.attempt,
        fence=row.fence,
        bundle_id=row.bundle_id,
        verification_receipt_sha256=row.verification_receipt_sha256,
        lease=repo.get_lease(session, grant.workflow_id, grant.stage),
        loaded=loaded,
    )


@dataclass(frozen=True)
class Evidence:
    """What a promotion's row names: its grant, bundle and verification receipt."""

    grant_id: str
    grant_sha256: str | None  # as the grant names it
    bundle_id: str
    bundle_sha256: str
    verification_receipt_sha256: str


def create_operation_row(
    session: Session,
    operation_id: str,
    kind: OperationKind,
    status: OperationStatus,
    *,
    repository: tuple[str, str],
    owner: journal.Owner,
    evidence: Evidence | None = None,
    bundle_id: str | None = None,
    parent_operation_id: str | None = None,
    fence: int | None = None,
    pre_snapshot: str | None = None,
) -> None:
    """Add operation ``operation_id`` of ``kind`` at its first attempt (``flush`` to learn
    of a concurrent twin): ``repository`` is its (identity, name); a promotion names its
    ``evidence``, a rollback its ``parent_operation_id`` and that one's ``bundle_id``, a
    restore its ``pre_snapshot``."""
    identity, name = repository
    journal.create_operation(
        session,
        operation_id=operation_id,
        kind=kind,
        status=status,
        repository_identity=identity,
        repository_name=name,
        owner=owner,
        grant_id=evidence.grant_id if evidence else None,
        bundle_id=evidence.bundle_id if evidence else bundle_id,
        grant_sha256=evidence.grant_sha256 if evidence else None,
        bundle_sha256=evidence.bundle_sha256 if evidence else None,
        verification_receipt_sha256=evidence.verification_receipt_sha256 if evidence else None,
        parent_operation_id=parent_operation_id,
        fence=fence,
        pre_snapshot=pre_snapshot,
    )


def create_promotion(
    session: Session,
    operation_id: str,
    status: OperationStatus,
    evidence: tuple[PatchBundleV1, GrantV1, str],
    *,
    repository: tuple[str, str],
    owner: journal.Owner,
    fence: int | None,
) -> None:
    """Add promotion ``operation_id`` at its first attempt: ``evidence`` is its bundle, grant
    and verification receipt's sha256, ``repository`` its (identity, name)."""
    bundle, grant, receipt_sha256 = evidence
    named = Evidence(
        grant_id=grant.grant_id,
        grant_sha256=grant.grant_sha256,
        bundle_id=bundle.bundle_id,
        bundle_sha256=bundle.bundle_sha256,
        verification_receipt_sha256=receipt_sha256,
    )
    create_operation_row(
        session,
        operation_id,
        OperationKind.PROMOTION,
        status,
        repository=repository,
        owner=owner,
        evidence=named,
        fence=fence,
    )
