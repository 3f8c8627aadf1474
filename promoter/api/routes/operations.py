"""Promotions, preflight and operations (protocol: promotion#operation-identity,
promotion#preflight, api#routes-and-roles, recovery#guards).

Thin adapters over the engine. Roles: the orchestrator (or operator) requests, polls,
reads receipts and recovers promotions; ``reconcile`` and ``rollback`` are the operator's.
Whether an existing operation may move at all is the engine's one guard
(``promoter.domain.status.guard``), never decided here. Bodies are small and bounded
while they stream (``SMALL_BODY``); every engine call and every read of an operation's
journal runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from promoter.api.deps import (
    SMALL_BODY,
    OperatorDep,
    OrchestratorDep,
    Port,
    read_json_body,
    read_json_bytes,
)
from promoter.api.longpoll import MAX_WAIT_SECONDS, long_poll
from promoter.api.models import (
    PreflightRequest,
    PromotionRequest,
    ReconcileRequest,
    RecoverRequest,
    RollbackRequest,
    parse,
)
from promoter.api.openapi import Ok, operation
from promoter.api.params import BundleIdParam, OperationIdParam
from promoter.api.responses import canonical_response, model_response
from promoter.api.routes.examples import BUNDLE_ID, OP_ID, VIEW_EXAMPLE
from promoter.api.workers import run_in_threadpool
from promoter.domain.models import PatchPromotionReceiptV1, RollbackReceiptV1
from promoter.domain.parsing import load_json
from promoter.domain.status import FINAL, OperationStatus
from promoter.domain.views import OperationAccepted, OperationList, OperationView, Preflight
from promoter.engine import queries
from promoter.engine.operation import (
    preflight,
    receipts,
    recover,
    requests,
    rollback,
    runner,
    views,
)
from promoter.engine.ports import (
    Attempting,
    Ledger,
    Observing,
    Placing,
    Promoting,
    Reconciling,
    Records,
)
from promoter.errors import DatabaseUnavailable, RepositoryUnknown, ValidationFailed

router = APIRouter(prefix="/v1")
WAIT_SECONDS = 600.0
ENDED = FINAL | {
    OperationStatus.NEEDS_RECOVERY,
    OperationStatus.NEEDS_RECONCILIATION,
}  # a waiting request returns
ORCHESTRATOR = ("orchestrator", "operator")
OPERATOR = ("operator",)
PROMOTE_CODES = [
    "bundle_unknown",
    "owned_by_other_host",
    "grant_unknown",
    "grant_expired",
    "lease_stale",
    "receipt_conflict",
    "verification_failed",
    "target_drift",
    "lock_unavailable",
    "operation_conflict",
    "path_unsafe",
    "repository_unknown",
    "git_error",
    "write_failed",
    "stopped",
    "database_busy",
    "database_unavailable",
    "host_fenced",
]


def _ended(services: Promoting, view: OperationView) -> Response:
    """An ended operation's answer: 200 with its view, and its stored receipt when it
    completed (protocol: promotion#operation-identity)."""
    if view.status == OperationStatus.COMPLETED:
        view.receipt = json.loads(receipts.promotion_receipt(services, view.operation_id))
    return model_response(view, 200)


def _promote(services: Promoting, body: PromotionRequest) -> Response:
    requested = requests.request_promotion(
        services, body.bundle_id, body.verification_receipt_sha256, body.fence
    )
    if not requested.started:  # an operation that already ended is answered as it is
        view = views.operation_view(services.db, requested.operation_id)
        if view.status in ENDED:
            return _ended(services, view)
    if body.wait:
        runner.wait_for(services, requested.operation_id, WAIT_SECONDS)
        view = views.operation_view(services.db, requested.operation_id)
        if view.status == OperationStatus.REFUSED and view.code == "database_unavailable":
            # the attempt waited out its bound for the database
            # (protocol: promotion#outage-before-plan): nothing was written; a 503 the clients
            # retry, which starts the next attempt
            attempts = view.attempts
            raise DatabaseUnavailable(
                str(view.detail or "the database could not be reached; ask again"),
                operation_id=requested.operation_id,
                attempt=attempts[-1].attempt if attempts else None,
                operation_status=view.status,
            )
        if view.status in ENDED:
            return model_response(view, 200)
    view = views.operation_view(services.db, requested.operation_id)
    accepted = OperationAccepted(operation_id=requested.operation_id, status=view.status)
    return model_response(accepted, 202)


def _promote_body(services: Promoting, raw: bytes) -> Response:
    """``_promote`` of a request body: parsed in the same worker thread (one hop, not two)."""
    return _promote(services, parse(PromotionRequest, load_json(raw)))


@router.post(
    "/promotions",
    response_model=OperationView | OperationAccepted,
    **operation(
        "createPromotion",
        summary="Promote a verified bundle",
        description="Request the promotion of a bundle under its passed verification receipt "
        "and the lease's fence: 202 with the operation id; with `wait`, 200 with the "
        "operation once it ended (or 202 if it is still running after the wait). The same "
        "request for an operation that already ended answers 200 with it at once: its "
        "stored `receipt` when completed, `next` (what to do) when it needs recovery or "
        "reconciliation.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=PROMOTE_CODES,
        body=PromotionRequest,
        body_example={
            "bundle_id": BUNDLE_ID,
            "verification_receipt_sha256": "5539f0ee" + "0" * 56,
            "fence": 1,
            "wait": True,
        },
        ok={
            202: Ok(
                "accepted; poll the operation",
                OperationAccepted,
                {"operation_id": OP_ID, "status": "requested"},
            ),
            200: Ok("the operation after it ended (`wait`)", OperationView, VIEW_EXAMPLE),
        },
    ),
)
async def post_promotion(
    request: Request, _: OrchestratorDep, services: Port[Promoting]
) -> Response:
    raw = await read_json_bytes(request, services, SMALL_BODY)
    return await run_in_threadpool(_promote_body, services, raw)


@router.post(
    "/bundles/{bundle_id}/preflight",
    response_model=Preflight,
    **operation(
        "preflightBundle",
        summary="Check a bundle against the worktree without writing",
        description="Steps 1, 2 and 4 of the protocol (authority, evidence, read-back) with "
        "per-path verdicts; writes nothing. A refusal is a 200 with `status: refused` and its "
        "code. The body is optional.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=[
            "bundle_unknown",
            "not_found",
            "receipt_unavailable",
            "repository_unknown",
            "git_error",
        ],
        body=PreflightRequest,
        body_required=False,
        body_example={"fence": 1},
        ok={
            200: Ok(
                "the verdicts",
                Preflight,
                {
                    "bundle_id": BUNDLE_ID,
                    "status": "passed",
                    "code": None,
                    "detail": "",
                    "checks": {"authority": {"ok": True}, "evidence": {"ok": True}},
                },
            )
        },
    ),
)
async def post_preflight(
    bundle_id: BundleIdParam, request: Request, _: OrchestratorDep, services: Port[Reconciling]
) -> Response:
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    fence = None if raw is None else parse(PreflightRequest, raw).fence
    result = await run_in_threadpool(preflight.preflight, services, bundle_id, fence)
    return model_response(result)


@router.get(
    "/operations",
    response_model=OperationList,
    **operation(
        "listOperations",
        summary="List operations",
        description="Every operation, optionally filtered by `status` (one of the "
        "operation statuses; another word is `422 validation_failed`) and `repository` (a "
        "name or identity; one no host of the ledger guards and no operation names is "
        "`404 repository_unknown`).",
        tags=["operator"],
        roles=OPERATOR,
        errors=["repository_unknown"],
        ok={
            200: Ok(
                "the operations",
                OperationList,
                {
                    "operations": [
                        {
                            "operation_id": OP_ID,
                            "kind": "promotion",
                            "status": "completed",
                            "attempt": 1,
                            "repository": "demo",
                            "bundle_id": BUNDLE_ID,
                            "code": None,
                            "updated_at": "2026-11-30T21:05:12Z",
                        }
                    ]
                },
            )
        },
    ),
)
def list_operations(
    _: OperatorDep,
    services: Port[Ledger],
    status: str | None = Query(
        default=None, max_length=40, json_schema_extra={"enum": [s.value for s in OperationStatus]}
    ),
    repository: str | None = Query(default=None, max_length=200),
) -> Response:
    if status is not None and status not in set(OperationStatus):
        # refused, never a filter that matches nothing
        raise ValidationFailed(
            f"status must be one of {', '.join(OperationStatus)}; got {status!r}", status=status
        )
    items = [
        queries.operation_summary(r)
        for r in queries.list_operations(services.db, status=status, repository=repository)
    ]
    if not items and repository and not queries.repository_known(services.db, repository):
        # a typo is refused as the status is, never a filter that matches nothing
        raise RepositoryUnknown(
            f"no repository {repository!r} is guarded by a host of the ledger or named by "
            "an operation; `promoter repos list` names the guarded ones",
            repository=repository,
        )
    return model_response(OperationList(operations=items))


@router.get(
    "/operations/{operation_id}",
    response_model=OperationView,
    **operation(
        "getOperation",
        summary="Read an operation",
        description="Status, steps, events (hash chain verified), reports and snapshot trees; "
        "with `current=true`, each target as it reads now. With `wait`, the answer comes "
        "once the status differs from `status` (by default the status at arrival), or "
        "when the wait ends.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["operation_unknown", "repository_unknown", "owned_by_other_host", "git_error"],
        ok={200: Ok("the operation", OperationView, VIEW_EXAMPLE)},
    ),
)
async def get_operation(
    operation_id: OperationIdParam,
    _: OrchestratorDep,
    services: Port[Observing],
    current: Annotated[bool, Query(description="add each target as it reads now")] = False,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="seconds to wait for a change")
    ] = 0.0,
    status: Annotated[
        str | None, Query(max_length=40, description="with `wait`: the status known")
    ] = None,
) -> Response:
    view = await run_in_threadpool(views.operation_view, services.db, operation_id)
    if wait > 0:
        known = status or view.status

        def changed() -> OperationView | None:
            latest = views.operation_view(services.db, operation_id)
            return latest if latest.status != known else None

        latest = await long_poll(services, changed, wait)
        if latest is None:
            latest = await run_in_threadpool(views.operation_view, services.db, operation_id)
        view = latest
    if current:
        view.current_targets = await run_in_threadpool(
            views.current_targets, services, operation_id
        )
    return model_response(view)


@router.get(
    "/operations/{operation_id}/receipt",
    response_model=PatchPromotionReceiptV1,
    **operation(
        "getPromotionReceipt",
        summary="Read a promotion receipt",
        description="The PatchPromotionReceiptV1 of a completed promotion "
        "(`receipt_unavailable` until then).",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["operation_unknown", "receipt_unavailable"],
        ok={200: Ok("the receipt's canonical bytes", PatchPromotionReceiptV1)},
    ),
)
def get_receipt(
    operation_id: OperationIdParam, _: OrchestratorDep, services: Port[Records]
) -> Response:
    return canonical_response(receipts.promotion_receipt(services, operation_id))


def _recover(services: Attempting, operation_id: str, fence: int, role: str) -> OperationView:
    recover.recover(services, operation_id, fence, role=role)
    return views.operation_view(services.db, operation_id)


def _reconcile(
    services: Reconciling, operation_id: str, decision: str, note: str, role: str
) -> OperationView:
    recover.reconcile(services, operation_id, decision, note, role=role)
    return views.operation_view(services.db, operation_id)


@router.post(
    "/operations/{operation_id}/recover",
    response_model=OperationView,
    **operation(
        "recoverOperation",
        summary="Recover an operation that needs recovery",
        description="Finish or undo a `needs_recovery` operation under the lease's fence; "
        "anything else is `not_recoverable`. A rollback's or restore's recovery needs the "
        "operator.",
        tags=["orchestrator", "operator"],
        roles=ORCHESTRATOR,
        errors=[*PROMOTE_CODES, "operation_unknown", "not_recoverable", "forbidden"],
        body=RecoverRequest,
        body_example={"fence": 1},
        ok={200: Ok("the operation afterwards", OperationView, VIEW_EXAMPLE)},
    ),
)
async def post_recover(
    operation_id: OperationIdParam,
    request: Request,
    principal: OrchestratorDep,
    services: Port[Attempting],
) -> Response:
    """Recover a ``needs_recovery`` operation; anything else is ``not_recoverable`` (409).

    The route admits orchestrator and operator tokens; the engine's guard then requires
    the operator for a rollback's or a restore's recovery.
    """
    body = parse(RecoverRequest, await read_json_body(request, services, SMALL_BODY))
    view = await run_in_threadpool(_recover, services, operation_id, body.fence, principal.role)
    return model_response(view)


@router.post(
    "/operations/{operation_id}/reconcile",
    response_model=OperationView,
    **operation(
        "reconcileOperation",
        summary="Decide on an operation that needs reconciliation",
        description="The operator's decision (`continue`, `rollback`, `abandon`) on a "
        "`needs_reconciliation` operation; any other status is `operation_conflict`.",
        tags=["operator"],
        roles=OPERATOR,
        errors=[*PROMOTE_CODES, "operation_unknown", "not_recoverable"],
        body=ReconcileRequest,
        body_example={"decision": "abandon", "note": "checked by hand"},
        ok={200: Ok("the operation afterwards", OperationView, VIEW_EXAMPLE)},
    ),
)
async def post_reconcile(
    operation_id: OperationIdParam,
    request: Request,
    principal: OperatorDep,
    services: Port[Reconciling],
) -> Response:
    """The operator's decision on a ``needs_reconciliation`` operation (operator only)."""
    body = parse(ReconcileRequest, await read_json_body(request, services, SMALL_BODY))
    view = await run_in_threadpool(
        _reconcile, services, operation_id, body.decision, body.note, principal.role
    )
    return model_response(view)


@router.post(
    "/operations/{operation_id}/rollback",
    response_model=RollbackReceiptV1,
    **operation(
        "rollbackOperation",
        summary="Roll back a completed promotion",
        description="Put back the old content of every target the promotion wrote, keeping "
        "any byte the user changed since; answers the RollbackReceiptV1. The body is optional.",
        tags=["operator"],
        roles=OPERATOR,
        errors=[*PROMOTE_CODES, "operation_unknown", "not_recoverable"],
        body=RollbackRequest,
        body_required=False,
        body_example={"note": "wrong change"},
        ok={200: Ok("the rollback receipt's canonical bytes", RollbackReceiptV1)},
    ),
)
async def post_rollback(
    operation_id: OperationIdParam, request: Request, _: OperatorDep, services: Port[Placing]
) -> Response:
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    note = "" if raw is None else parse(RollbackRequest, raw).note
    recorded = await run_in_threadpool(rollback.rollback, services, operation_id, note=note)
    return canonical_response(recorded.document)
