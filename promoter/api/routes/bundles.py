"""Bundle submission and retrieval (SPEC §7).

The body is bounded while it streams (``read_json_body``); parsing, verification (blob
hashing, base-tree lookups) and the audit and database writes run in a worker thread, so
a large or slow submission never stalls the event loop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import (
    AnyRoleDep,
    ExecutorDep,
    ServicesDep,
    document_slot,
    read_json_bytes,
)
from promoter.api.responses import canonical_response, json_response
from promoter.domain.documents import canonical
from promoter.domain.parsing import load_json
from promoter.engine.bundles import bundle_owner, load_bundle, load_verification, submit_bundle
from promoter.engine.services import Services
from promoter.errors import Forbidden, NotFound
from promoter.store.credentials import Principal

router = APIRouter(prefix="/v1")


def _submit(services: Services, raw: bytes, run_id: str | None) -> Response:
    result = submit_bundle(services, load_json(raw), run_id=run_id)
    return json_response(
        {
            "bundle_id": result.bundle.bundle_id,
            "bundle_sha256": result.bundle.bundle_sha256,
            "verification_receipt": result.receipt.wire(),
        },
        201 if result.created else 200,
    )


@router.post("/bundles")
async def post_bundle(request: Request, principal: ExecutorDep, services: ServicesDep) -> Response:
    raw = await read_json_bytes(request, services)
    async with document_slot(services):
        return await run_in_threadpool(_submit, services, raw, principal.run_id)


def _check_owner(services: Services, principal: Principal, bundle_id: str) -> None:
    if principal.role != "executor":
        return
    owner = bundle_owner(services, bundle_id)
    if owner is None:
        raise NotFound(f"no bundle {bundle_id!r} is on record", bundle_id=bundle_id)
    if owner != principal.run_id:
        raise Forbidden("an executor may read the bundles of its own run only")


@router.get("/bundles/{bundle_id}")
def get_bundle(bundle_id: str, principal: AnyRoleDep, services: ServicesDep) -> Response:
    _check_owner(services, principal, bundle_id)
    return canonical_response(canonical(load_bundle(services, bundle_id)))


@router.get("/bundles/{bundle_id}/verification")
def get_verification(bundle_id: str, principal: AnyRoleDep, services: ServicesDep) -> Response:
    _check_owner(services, principal, bundle_id)
    return canonical_response(load_verification(services, bundle_id))
