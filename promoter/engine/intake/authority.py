"""Step 1 and step 2 of the host protocol (protocol: promotion#step-authority,
promotion#step-evidence): authority and evidence.

``check_authority`` requires the current lease of the grant's ``(workflow_id, stage)`` to
exist, be unexpired, carry the request's fence (not lower than the grant's) and match the
grant's run, attempt, generation and resume epoch; and the grant to be inside its window
(``check_lease`` is the same rule against a lease the caller read in its own transaction).
``check_recovery_lease`` is recovery's narrower rule. Every lease check lives here.
``recheck_evidence`` re-reads grant, bundle and blobs from the audit store and recomputes
the verification receipt, which must be byte-identical to the stored one and to the
sha256 the request names.
"""

from __future__ import annotations

from dataclasses import dataclass

from promoter.domain.canonical import parse_rfc3339, utcnow
from promoter.domain.models import GrantV1, LeaseV1, PatchBundleV1
from promoter.engine.intake.bundles import load_bundle, verify_bundle
from promoter.engine.intake.grants import load_grant
from promoter.engine.ports import Checking
from promoter.errors import GrantExpired, LeaseStale, ReceiptConflict, VerificationFailed
from promoter.store import journal, repo
from promoter.store.db import Database


@dataclass(frozen=True)
class Evidence:
    grant: GrantV1
    bundle: PatchBundleV1
    receipt_sha256: str


def check_grant_window(grant: GrantV1) -> None:
    now = utcnow()
    if now < parse_rfc3339(grant.not_before):
        raise GrantExpired("the grant is not valid yet", not_before=grant.not_before)
    if now >= parse_rfc3339(grant.expires_at):
        raise GrantExpired("the grant has expired", expires_at=grant.expires_at)


def check_authority(db: Database, grant: GrantV1, fence: int) -> None:
    """Step 1 with the lease read in a transaction of its own."""
    with journal.unit_of_work(db) as session:
        lease = repo.get_lease(session, grant.workflow_id, grant.stage)
    check_lease(grant, fence, lease)


def check_lease(grant: GrantV1, fence: int, lease: LeaseV1 | None) -> None:
    """Step 1 against ``lease``, the current lease of the grant's stage (None: none is set)."""
    check_grant_window(grant)
    where = {"workflow_id": grant.workflow_id, "stage": grant.stage}
    if lease is None:
        raise LeaseStale("no lease is set for the grant's workflow stage", **where)
    if parse_rfc3339(lease.expires_at) <= utcnow():
        raise LeaseStale("the lease has expired", expires_at=lease.expires_at, **where)
    problems: list[str] = []
    if lease.fence != fence:
        problems.append(f"the request's fence {fence} is not the lease's fence {lease.fence}")
    if lease.fence < grant.fence:
        problems.append(f"the lease's fence {lease.fence} is lower than the grant's {grant.fence}")
    mine: dict[str, str | int] = {
        "run_id": grant.executor_run_id,
        "attempt": grant.attempt,
        "generation": grant.generation,
        "resume_epoch": grant.resume_epoch,
    }
    problems += [
        f"the lease's {name} is {getattr(lease, name)!r}, the grant's is {value!r}"
        for name, value in mine.items()
        if getattr(lease, name) != value
    ]
    if problems:
        raise LeaseStale("; ".join(problems), lease=lease.wire(), **where)


def check_recovery_lease(grant: GrantV1, fence: int, lease: LeaseV1 | None) -> None:
    """Recovery's lease rule (protocol: recovery#recovery): the stage's lease, at the request's
    fence, not lower than the grant's. The grant's window and the lease's run are not required: the
    operation was authorized when it started, and recovery only finishes it.
    """
    if lease is None:
        raise LeaseStale("recovery needs a lease for the grant's workflow stage")
    if lease.fence != fence:
        raise LeaseStale(f"the request's fence {fence} is not the lease's fence {lease.fence}")
    if lease.fence < grant.fence:
        raise LeaseStale(f"the lease's fence {lease.fence} is lower than the grant's {grant.fence}")


def recheck_evidence(
    services: Checking,
    bundle_id: str,
    receipt_sha256: str,
    *,
    loaded: tuple[PatchBundleV1, GrantV1] | None = None,
) -> Evidence:
    """Step 2; ``loaded`` is the bundle and grant when the caller has just read them."""
    if loaded is None:
        bundle = load_bundle(services, bundle_id)
        grant = load_grant(services, bundle.grant_id)
    else:
        bundle, grant = loaded
    stored = services.audit.get("verification", bundle_id)
    if stored is None:
        raise VerificationFailed("the bundle has no passed verification receipt")
    outcome = verify_bundle(services, bundle.wire(), bundle, grant)
    if not outcome.passed:
        raise VerificationFailed(
            "the bundle no longer passes verification",
            verification_receipt=outcome.receipt.wire(),
        )
    if outcome.receipt_bytes != stored:  # canonical(outcome.receipt)
        raise ReceiptConflict("re-verification differs from the stored passed receipt")
    if outcome.receipt.receipt_sha256 != receipt_sha256:
        raise ReceiptConflict(
            "the request names another verification receipt",
            expected=outcome.receipt.receipt_sha256,
            requested=receipt_sha256,
        )
    return Evidence(grant, bundle, receipt_sha256)
