"""Review before writing: a bundle's diff, and the operator's approval decisions.

``GET /v1/bundles/{id}/diff`` (orchestrator or operator) answers the unified diff a
promotion of the bundle would write, built from its stored blobs and capped at
``max_bytes``. Thin adapters over ``promoter.engine.bundle_diff`` and
``promoter.engine.approval``; no decision is made here.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import OrchestratorDep, ServicesDep
from promoter.api.responses import json_response
from promoter.engine.bundle_diff import DEFAULT_LIMIT, MAX_LIMIT, bundle_diff

router = APIRouter(prefix="/v1")


@router.get("/bundles/{bundle_id}/diff")
async def get_bundle_diff(
    bundle_id: str,
    _: OrchestratorDep,
    services: ServicesDep,
    max_bytes: int = Query(default=DEFAULT_LIMIT, ge=0, le=MAX_LIMIT),
) -> Response:
    result = await run_in_threadpool(bundle_diff, services, bundle_id, max_bytes)
    return json_response(result)
