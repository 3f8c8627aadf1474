"""Bundle submission and retrieval (protocol: api#routes-and-roles).

The body is bounded while it streams (``read_json_body``); parsing, verification (blob
hashing, base-tree lookups) and the audit and database writes run in a worker thread, so
a large or slow submission never stalls the event loop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from promoter.api import gc_policy
from promoter.api.deps import (
    AnyRoleDep,
    ExecutorDep,
    Port,
    document_slot,
    read_json_bytes,
)
from promoter.api.openapi import Ok, operation
from promoter.api.params import BundleIdParam
from promoter.api.responses import canonical_response, json_response
from promoter.api.workers import run_in_threadpool
from promoter.domain.documents import canonical
from promoter.domain.models import PatchBundleV1, PatchVerificationReceiptV1
from promoter.domain.parsing import load_json
from promoter.domain.views import BundleSubmitted
from promoter.engine.intake.bundles import (
    bundle_owner,
    load_bundle,
    load_verification,
    submit_bundle,
)
from promoter.engine.ports import Ledger, Loading, Promoting, Reconciling, Records
from promoter.errors import Forbidden, NotFound
from promoter.store.credentials import Principal

router = APIRouter(prefix="/v1")
SUBMIT_CODES = [
    "derived_bundle_refused",
    "bundle_hash_mismatch",
    "blob_missing",
    "blob_hash_mismatch",
    "path_invalid",
    "symlink_policy",
    "verification_failed",
    "grant_unknown",
    "grant_expired",
    "bundle_conflict",
    "receipt_conflict",
    "repository_unknown",
    "git_error",
    "database_busy",
]


def _submit(services: Reconciling, raw: bytes, run_id: str | None) -> Response:
    # the collector waits while the document is decoded, parsed and verified; the answer
    # keeps three small members, so the document is freed before collection resumes
    with gc_policy.paused():
        result = submit_bundle(services, load_json(raw), run_id=run_id)
        answer = {
            "bundle_id": result.bundle.bundle_id,
            "bundle_sha256": result.bundle.bundle_sha256,
            "verification_receipt": result.receipt.wire(),
        }
        status = 201 if result.created else 200
        del result
    return json_response(answer, status)


@router.post(
    "/bundles",
    response_model=BundleSubmitted,
    **operation(
        "submitBundle",
        summary="Submit a sealed patch bundle",
        description="Store and verify a PatchBundleV1 of the token's own run: 201 with the "
        "passed verification receipt; the same bundle again answers 200. A failed verification "
        "answers 422 with the code of the first failed check and the whole failed receipt, "
        "and stores nothing. A bundle carrying `derived_from` (made only by the host, when "
        "an operator accepts part of a bundle) is refused: `derived_bundle_refused`.",
        tags=["executor"],
        roles=["executor"],
        errors=SUBMIT_CODES,
        body=PatchBundleV1,
        ok={
            201: Ok("stored and verified", BundleSubmitted),
            200: Ok("the same bundle was already stored", BundleSubmitted),
        },
    ),
)
async def post_bundle(
    request: Request, principal: ExecutorDep, services: Port[Promoting]
) -> Response:
    raw = await read_json_bytes(request, services)
    async with document_slot(services):
        return await run_in_threadpool(_submit, services, raw, principal.run_id)


def check_owner(services: Ledger, principal: Principal, bundle_id: str) -> None:
    """An executor reads only its own run's bundles (orchestrator and operator: any)."""
    if principal.role != "executor":
        return
    owner = bundle_owner(services.db, bundle_id)
    if owner is None:
        raise NotFound(f"no bundle {bundle_id!r} is on record", bundle_id=bundle_id)
    if owner != principal.run_id:
        raise Forbidden("an executor may read the bundles of its own run only")


@router.get(
    "/bundles/{bundle_id}",
    response_model=PatchBundleV1,
    **operation(
        "getBundle",
        summary="Read a bundle",
        description="The stored canonical bytes of a bundle. An executor may read the "
        "bundles of its own run only.",
        tags=["orchestrator", "executor"],
        errors=["bundle_unknown", "owned_by_other_host", "not_found", "forbidden"],
        ok={200: Ok("the bundle's canonical bytes", PatchBundleV1)},
    ),
)
def get_bundle(
    bundle_id: BundleIdParam, principal: AnyRoleDep, services: Port[Loading]
) -> Response:
    check_owner(services, principal, bundle_id)
    return canonical_response(canonical(load_bundle(services, bundle_id)))


@router.get(
    "/bundles/{bundle_id}/verification",
    response_model=PatchVerificationReceiptV1,
    **operation(
        "getVerification",
        summary="Read a bundle's verification receipt",
        description="The stored PatchVerificationReceiptV1: the passed one, or the latest "
        "failed one if none passed. An executor may read those of its own run only.",
        tags=["orchestrator", "executor"],
        errors=["bundle_unknown", "not_found", "forbidden", "receipt_unavailable"],
        ok={200: Ok("the receipt's canonical bytes", PatchVerificationReceiptV1)},
    ),
)
def get_verification(
    bundle_id: BundleIdParam, principal: AnyRoleDep, services: Port[Records]
) -> Response:
    check_owner(services, principal, bundle_id)
    return canonical_response(load_verification(services, bundle_id))
