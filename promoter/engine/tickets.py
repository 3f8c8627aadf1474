"""How a promotion starts: its row, created (``create_promotion``, the one place), and the
ticket its attempt starts with: what the attempt decides on, read in the transaction
that starts it.

Deliberately not here: running the attempt (``promoter.engine.operation.promote``), or
deciding whether it runs (``operation.requests``, ``review.approval``).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.domain.records import Ticket
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
    row = journal.require(session, operation_id)
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
    identity, name = repository
    journal.create_operation(
        session,
        operation_id=operation_id,
        kind=OperationKind.PROMOTION,
        status=status,
        repository_identity=identity,
        repository_name=name,
        owner=owner,
        grant_id=grant.grant_id,
        bundle_id=bundle.bundle_id,
        grant_sha256=grant.grant_sha256,
        bundle_sha256=bundle.bundle_sha256,
        verification_receipt_sha256=receipt_sha256,
        fence=fence,
    )
