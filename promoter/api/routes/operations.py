"""Promotions, preflight and operations (SPEC §5.2–5.7, §7, §10.3).

Thin adapters over the engine. Roles: the orchestrator (or operator) requests, polls,
reads receipts and recovers promotions; ``reconcile`` and ``rollback`` are the operator's.
Whether an existing operation may move at all is the engine's one guard
(``promoter.domain.states.guard``), never decided here. Bodies are small and bounded
while they stream (``SMALL_BODY``); every engine call and every read of an operation's
journal runs in a worker thread, off the event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import (
    SMALL_BODY,
    OperatorDep,
    OrchestratorDep,
    ServicesDep,
    read_json_body,
)
from promoter.api.responses import canonical_response, json_response
from promoter.domain.states import FINAL, OperationStatus
from promoter.engine import operations, recover, rollback
from promoter.engine.services import Services
from promoter.errors import ValidationFailed
from promoter.store import journal

router = APIRouter(prefix="/v1")
WAIT_SECONDS = 600.0
ENDED = FINAL | {
    OperationStatus.NEEDS_RECOVERY,
    OperationStatus.NEEDS_RECONCILIATION,
}  # a waiting request returns


def _fields(body: Any, required: dict[str, type], optional: dict[str, type]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    unknown = set(body) - set(required) - set(optional)
    if unknown:
        raise ValidationFailed(f"unknown fields: {sorted(unknown)}")
    out: dict[str, Any] = {}
    for name, kind in {**required, **optional}.items():
        if name not in body:
            if name in required:
                raise ValidationFailed(f"{name} is required")
            continue
        value: Any = body[name]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            raise ValidationFailed(f"{name} must be of type {kind.__name__}")
        if isinstance(value, int) and not 0 <= value < 2**53:
            raise ValidationFailed(f"{name} must be a non-negative safe integer")
        out[name] = value
    return out


def _promote(services: Services, body: dict[str, Any]) -> Response:
    requested = operations.request_promotion(
        services, body["bundle_id"], body["verification_receipt_sha256"], body["fence"]
    )
    if body.get("wait"):
        operations.wait_for(services, requested.operation_id, WAIT_SECONDS)
        view = operations.operation_view(services, requested.operation_id)
        if view["status"] in ENDED:
            return json_response(view, 200)
    view = operations.operation_view(services, requested.operation_id)
    return json_response({"operation_id": requested.operation_id, "status": view["status"]}, 202)


@router.post("/promotions")
async def post_promotion(request: Request, _: OrchestratorDep, services: ServicesDep) -> Response:
    body = _fields(
        await read_json_body(request, services, SMALL_BODY),
        {"bundle_id": str, "verification_receipt_sha256": str, "fence": int},
        {"wait": bool},
    )
    return await run_in_threadpool(_promote, services, body)


@router.post("/bundles/{bundle_id}/preflight")
async def post_preflight(
    bundle_id: str, request: Request, _: OrchestratorDep, services: ServicesDep
) -> Response:
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    fence = None if raw is None else _fields(raw, {}, {"fence": int}).get("fence")
    result = await run_in_threadpool(operations.preflight, services, bundle_id, fence)
    return json_response(result)


@router.get("/operations")
def list_operations(
    _: OperatorDep,
    services: ServicesDep,
    status: str | None = Query(default=None, max_length=40),
    repository: str | None = Query(default=None, max_length=200),
) -> Response:
    with services.db.session() as session:
        rows = journal.list_operations(session, status=status, repository=repository)
        items = [
            {
                "operation_id": r.operation_id,
                "kind": r.kind,
                "status": r.status,
                "attempt": r.attempt,
                "repository": r.repository_name,
                "bundle_id": r.bundle_id,
                "code": r.code,
                "updated_at": r.updated_at,
            }
            for r in rows
        ]
    return json_response({"operations": items})


@router.get("/operations/{operation_id}")
def get_operation(
    operation_id: str, _: OrchestratorDep, services: ServicesDep, current: bool = False
) -> Response:
    view = operations.operation_view(services, operation_id)
    if current:
        view["current_targets"] = operations.current_targets(services, operation_id)
    return json_response(view)


@router.get("/operations/{operation_id}/receipt")
def get_receipt(operation_id: str, _: OrchestratorDep, services: ServicesDep) -> Response:
    return canonical_response(operations.promotion_receipt(services, operation_id))


def _recover(services: Services, operation_id: str, fence: int, role: str) -> dict[str, Any]:
    recover.recover(services, operation_id, fence, role=role)
    return operations.operation_view(services, operation_id)


def _reconcile(
    services: Services, operation_id: str, decision: str, note: str, role: str
) -> dict[str, Any]:
    recover.reconcile(services, operation_id, decision, note, role=role)
    return operations.operation_view(services, operation_id)


@router.post("/operations/{operation_id}/recover")
async def post_recover(
    operation_id: str, request: Request, principal: OrchestratorDep, services: ServicesDep
) -> Response:
    """Recover a ``needs_recovery`` operation; anything else is ``not_recoverable`` (409).

    The route admits orchestrator and operator tokens; the engine's guard then requires
    the operator for a rollback's or a restore's recovery.
    """
    body = _fields(await read_json_body(request, services, SMALL_BODY), {"fence": int}, {})
    view = await run_in_threadpool(_recover, services, operation_id, body["fence"], principal.role)
    return json_response(view)


@router.post("/operations/{operation_id}/reconcile")
async def post_reconcile(
    operation_id: str, request: Request, principal: OperatorDep, services: ServicesDep
) -> Response:
    """The operator's decision on a ``needs_reconciliation`` operation (operator only)."""
    body = _fields(
        await read_json_body(request, services, SMALL_BODY), {"decision": str}, {"note": str}
    )
    view = await run_in_threadpool(
        _reconcile, services, operation_id, body["decision"], body.get("note", ""), principal.role
    )
    return json_response(view)


@router.post("/operations/{operation_id}/rollback")
async def post_rollback(
    operation_id: str, request: Request, _: OperatorDep, services: ServicesDep
) -> Response:
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    note = "" if raw is None else _fields(raw, {}, {"note": str}).get("note", "")
    receipt = await run_in_threadpool(rollback.rollback, services, operation_id, note=note)
    return canonical_response(receipt)
