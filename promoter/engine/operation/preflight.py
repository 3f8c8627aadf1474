"""Preflight: steps 1, 2 and 4 of a promotion against the worktree as it is now
(protocol: promotion#preflight).

Reuses the promotion's checks and read-back; writes nothing. Fault point:
``preflight_read_back`` (the evidence re-read, the worktree not yet). Deliberately not here: the
promotion itself (``operation.promote``).
"""

from __future__ import annotations

from promoter.domain.views import Preflight, PreflightCheck, PreflightChecks
from promoter.engine import routing
from promoter.engine.intake.authority import check_authority, check_grant_window, recheck_evidence
from promoter.engine.intake.bundles import load_bundle, load_verification
from promoter.engine.intake.grants import load_grant
from promoter.engine.operation.preconditions import read_back
from promoter.engine.ports import Checking
from promoter.engine.verify.link_resolution import refuse_escapes_on_disk
from promoter.errors import OwnedByOtherHost, PromoterError, TargetDrift
from promoter.faults import point
from promoter.fs.root import Root


def preflight(services: Checking, bundle_id: str, fence: int | None) -> Preflight:
    """Steps 1, 2 and 4 against the worktree as it is now; writes nothing. ``checks``
    lists authority and evidence as far as they ran, the one that refused as failed.
    Another host's bundle or repository is ``owned_by_other_host`` (421), not a refusal."""
    verification = load_verification(services, bundle_id)
    passed = PreflightCheck.model_construct(ok=True)
    failed = PreflightCheck.model_construct(ok=False)
    # until a check passes, a refusal is its failure: shown failed, never left out
    checks = PreflightChecks.model_construct(authority=failed)
    try:
        grant = load_grant(services, load_bundle(services, bundle_id).grant_id)
        if fence is not None:  # (1) authority
            check_authority(services.db, grant, fence)
        else:
            check_grant_window(grant)
        checks = PreflightChecks.model_construct(authority=passed, evidence=failed)
        evidence = recheck_evidence(services, bundle_id, str(verification["receipt_sha256"]))
        checks = PreflightChecks.model_construct(authority=passed, evidence=passed)  # (2)
        repository = routing.local_repository(services, evidence.grant.repository_identity)
        point("preflight_read_back")  # the evidence re-read, the worktree not yet
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
