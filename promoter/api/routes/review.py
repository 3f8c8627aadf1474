"""Review before writing: a bundle's diff, and the operator's approval decisions.

``GET /v1/bundles/{id}/diff`` (orchestrator, operator, or the bundle's own executor, who
built both sides) answers the unified diff a promotion of the bundle would write, built
from its stored blobs and capped at ``max_bytes``. ``POST /v1/operations/{id}/approve``
and ``/reject`` (operator only) decide a promotion held in ``awaiting_approval``; with
``wait`` an approval answers once its attempt ended. The approver recorded is the
authenticated credential's name; a ``by`` in the body is journaled as ``claimed_by``
only (docs/decisions/approver-identity.md). ``POST /v1/operations/{id}/reopen``
(operator only) holds a rejected promotion for a decision again. ``GET
/v1/grants/{id}/base`` (orchestrator, or the executor of the grant's run) answers, for a
chained grant, the state its base operations left at every path they touched: what the
executor builds its next bundle against. Thin adapters over
``promoter.engine.review.diff``, ``promoter.engine.operation.decisions.decide`` and
``promoter.engine.intake.chained``; no decision is made here. ``GET /v1/bundles/{id}/operations``
lists a bundle's promotions and their status for its executor.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from promoter.api.deps import (
    SMALL_BODY,
    AnyRoleDep,
    OperatorDep,
    Port,
    read_json_body,
)
from promoter.api.models import ApproveRequest, DecisionRequest, ReopenRequest
from promoter.api.openapi import Ok, operation
from promoter.api.responses import json_response, model_response
from promoter.api.routes.bundles import check_owner
from promoter.api.routes.examples import BUNDLE_ID, OP_ID, VIEW_EXAMPLE
from promoter.api.workers import run_in_threadpool
from promoter.domain.diff_views import BundleDiffView
from promoter.domain.paths import MAX_PATH_BYTES
from promoter.domain.views import BaseState, BundleOperations, GrantBase, OperationView
from promoter.engine.intake.bundles import bundle_owner
from promoter.engine.intake.chained import chain_states
from promoter.engine.intake.grants import load_grant
from promoter.engine.operation import decisions, runner, views
from promoter.engine.ports import Guarding, Journaling, Ledger, Promoting, Provenance, Reviewing
from promoter.engine.review.diff import DEFAULT_LIMIT, MAX_LIMIT, bundle_diff
from promoter.engine.review.partial import Selection
from promoter.engine.review.seen import Seen
from promoter.errors import BundleUnknown, Forbidden, ValidationFailed
from promoter.store.credentials import Principal

router = APIRouter(prefix="/v1")
# A path asked for by name: its wire form, at most this many characters (a URL stays
# under 64 KiB however it is encoded); a longer one (many \xNN escapes) is reached by its
# cursor, which every answer's `unseen` gives.
PATH_MAX = MAX_PATH_BYTES
WAIT_SECONDS = 600.0
NOTE_LIMIT = 2000


def _diff(
    services: Reviewing,
    principal: Principal,
    bundle_id: str,
    limit: int | None,
    path: str | None,
    cursor: str | None,
) -> Any:
    check_owner(services, principal, bundle_id)
    return bundle_diff(services, bundle_id, limit, path=path, cursor=cursor)


DIFF_EXAMPLE = {
    "bundle_id": BUNDLE_ID,
    "files": [
        {
            "path": "src/app.py",
            "path_shown": "src/app.py",
            "operation": "modify",
            "old_mode": "100644",
            "new_mode": "100644",
            "old_bytes": 12,
            "new_bytes": 12,
            "old_sha256": "0" * 64,
            "new_sha256": "1" * 64,
            "old_lines": 1,
            "new_lines": 1,
            "longest_line": 11,
            "binary": False,
            "summarized": False,
            "added": 1,
            "removed": 1,
            "flags": [],
            "symlink_target": None,
            "shown": "full",
            "diff_bytes": 94,
        }
    ],
    "unified_diff": "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n"
    "@@ -1 +1 @@\n-print('v1')\n+print('v2')\n",
    "truncated": False,
    "limit": DEFAULT_LIMIT,
    "max_file_bytes": 4 * 1024 * 1024,
    "path": None,
    "cursor": "0:0",
    "next_cursor": None,
    "unseen": [],
}
DECISION_ERRORS = ["operation_unknown", "operation_conflict", "grant_expired", "lease_stale"]
APPROVE_ERRORS = [
    *DECISION_ERRORS,
    "selection_invalid",
    "selection_splits_pair",
    "diff_not_seen",
    "validation_failed",
]
REOPEN_ERRORS = ["operation_unknown", "operation_conflict"]


@router.get(
    "/bundles/{bundle_id}/diff",
    response_model=BundleDiffView,
    **operation(
        "getBundleDiff",
        summary="A bundle's diff before it lands",
        description="The unified diff a promotion of the bundle would write, built from its "
        "stored old and new blobs, cut at a line end past `max_bytes` (default "
        "`review_diff_page_bytes`, 1 MiB). `path` asks for one file; `cursor` (an answer's "
        "`next_cursor`, `I:K`: change I, byte K of its diff) for the next page, so every "
        "byte is reachable. Each file says how much of it the answer shows (`shown`); "
        "`unseen` lists every file not shown in full, with its sizes, flags and the cursor "
        "that reaches it. Binary files (a NUL "
        "byte in the first 8000 bytes) and sides over `max_file_bytes` are summarized; "
        "bytes that are not UTF-8 show as `\\xNN`, hidden characters as `<U+XXXX>`; each "
        "file's `flags` name what can hide code or make it run. An executor may read its "
        "own run's bundles only.",
        tags=["orchestrator", "operator", "executor"],
        errors=[
            "bundle_unknown",
            "owned_by_other_host",
            "not_found",
            "forbidden",
            "blob_missing",
            "validation_failed",
        ],
        ok={200: Ok("per-file summary and the unified diff", BundleDiffView, DIFF_EXAMPLE)},
    ),
)
async def get_bundle_diff(
    bundle_id: str,
    principal: AnyRoleDep,
    services: Port[Reviewing],
    max_bytes: int | None = Query(default=None, ge=0, le=MAX_LIMIT),
    path: str | None = Query(default=None, max_length=PATH_MAX, description="one file"),
    cursor: str | None = Query(
        default=None, max_length=40, description="where the page begins: a `next_cursor`"
    ),
) -> Response:
    result = await run_in_threadpool(_diff, services, principal, bundle_id, max_bytes, path, cursor)
    return json_response(result)


def _bundle_operations(services: Ledger, principal: Principal, bundle_id: str) -> BundleOperations:
    check_owner(services, principal, bundle_id)
    found = views.bundle_operations(services.db, bundle_id)
    if not found and principal.role != "executor" and bundle_owner(services.db, bundle_id) is None:
        # an unknown bundle is not one with no promotions (an executor's: ``check_owner``)
        raise BundleUnknown(f"no bundle {bundle_id!r} is stored", bundle_id=bundle_id)
    return BundleOperations(bundle_id=bundle_id, operations=found)


@router.get(
    "/bundles/{bundle_id}/operations",
    response_model=BundleOperations,
    **operation(
        "listBundleOperations",
        summary="A bundle's promotions",
        description="The promotions of a bundle with their status, attempt, code and receipt "
        "hash. An executor may read its own run's bundles only.",
        tags=["orchestrator", "operator", "executor"],
        errors=["bundle_unknown", "not_found", "forbidden"],
        ok={
            200: Ok(
                "the promotions",
                BundleOperations,
                {
                    "bundle_id": BUNDLE_ID,
                    "operations": [
                        {
                            "operation_id": OP_ID,
                            "status": "completed",
                            "attempt": 1,
                            "code": None,
                            "detail": None,
                            "receipt_sha256": "7d1a3c55" + "0" * 56,
                            "updated_at": "2026-11-30T21:05:12Z",
                        }
                    ],
                },
            )
        },
    ),
)
async def get_bundle_operations(
    bundle_id: str, principal: AnyRoleDep, services: Port[Ledger]
) -> Response:
    """The promotions of a bundle with their status (its executor may ask)."""
    result = await run_in_threadpool(_bundle_operations, services, principal, bundle_id)
    return model_response(result)


def _decision_body(raw: Any, allowed: frozenset[str]) -> dict[str, Any]:
    body = {} if raw is None else raw
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    unknown = set(body) - allowed
    if unknown:
        raise ValidationFailed(f"unknown fields: {sorted(unknown)}")
    for name in ("note", "by"):
        value = body.get(name, "")
        if not isinstance(value, str) or len(value) > NOTE_LIMIT:
            raise ValidationFailed(f"{name} must be a string of at most {NOTE_LIMIT} characters")
    if not isinstance(body.get("wait", False), bool):
        raise ValidationFailed("wait must be a boolean")
    return body


def _paths(body: dict[str, Any], name: str) -> tuple[str, ...] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ValidationFailed(f"{name} must be a list of paths in wire form")
    return tuple(value)


def _hunks(body: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    value = body.get("hunks") or {}
    if not isinstance(value, dict):
        raise ValidationFailed("hunks must map paths to lists of hunk numbers")
    chosen: dict[str, tuple[int, ...]] = {}
    for path, numbers in value.items():
        if not isinstance(numbers, list) or not all(
            type(n) is int and 1 <= n < 2**31 for n in numbers
        ):
            raise ValidationFailed(f"hunks of {path!r} must be a list of numbers from 1")
        chosen[path] = tuple(numbers)
    return chosen


def _seen(body: dict[str, Any]) -> Seen:
    all_seen = body.get("all_seen", False)
    if not isinstance(all_seen, bool):
        raise ValidationFailed("all_seen must be a boolean")
    return Seen(all_seen, _paths(body, "seen") or ())


def _selection(body: dict[str, Any]) -> Selection | None:
    """The part of the bundle an approval accepts, or None for all of it."""
    selection = Selection(_paths(body, "only"), _paths(body, "except"), _hunks(body))
    return selection if selection.partial else None


DECISION_FIELDS = frozenset({"note", "by", "wait"})
APPROVE_FIELDS = DECISION_FIELDS | {"only", "except", "hunks", "seen", "all_seen"}
REOPEN_FIELDS = frozenset({"note"})


def _decide(
    services: Promoting, principal: Principal, operation_id: str, verdict: str, body: dict[str, Any]
) -> OperationView:
    decided = decisions.decide(
        services,
        operation_id,
        verdict,
        note=body.get("note", ""),
        by=principal.name,  # the credential, never the body (protocol: runs#approvals)
        role=principal.role,
        claimed_by=body.get("by", ""),
        selection=_selection(body) if verdict == "approve" else None,
        seen=_seen(body) if verdict == "approve" else None,
    )
    if decided.started and body.get("wait"):
        runner.wait_for(services, decided.operation_id, WAIT_SECONDS)
    return views.operation_view(services.db, decided.operation_id)


async def _post_decision(
    operation_id: str, verdict: str, request: Request, principal: Principal, services: Promoting
) -> Response:
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    body = _decision_body(raw, APPROVE_FIELDS if verdict == "approve" else DECISION_FIELDS)
    view = await run_in_threadpool(_decide, services, principal, operation_id, verdict, body)
    return model_response(view)


@router.post(
    "/operations/{operation_id}/approve",
    response_model=OperationView,
    **operation(
        "approveOperation",
        summary="Approve a held promotion",
        description="The operator's approval of a promotion in `awaiting_approval`, journaled "
        "as a `decision` event that records the authenticated credential as the approver "
        "(a `by` in the body is kept as `claimed_by` only); its attempt starts and re-checks "
        "everything. Any other status is `operation_conflict`. The body is optional. "
        "`only` (paths to accept) or `except` (paths to decline), and `hunks` (per text "
        "path, the hunk numbers of the review diff to accept) accept a part: the host "
        "derives a sub-bundle (`derived_from` names the parent bundle and the selection), "
        "verifies it against the same grant and promotes it as its own operation, whose "
        "view is answered; the held operation is refused with `approved_in_part`. When "
        "the review's first page (`review_diff_page_bytes`) does not show every file in "
        "full, the approval names each accepted one in `seen`, or says `all_seen`: else "
        "`422 diff_not_seen`, listing them, and nothing changes.",
        tags=["operator"],
        roles=["operator"],
        errors=APPROVE_ERRORS,
        body=ApproveRequest,
        body_required=False,
        body_example={"note": "reviewed the diff", "wait": True, "except": ["docs/notes.md"]},
        ok={200: Ok("the operation afterwards", OperationView, VIEW_EXAMPLE)},
    ),
)
async def post_approve(
    operation_id: str, request: Request, principal: OperatorDep, services: Port[Promoting]
) -> Response:
    """Approve a promotion held in ``awaiting_approval``: its attempt starts."""
    return await _post_decision(operation_id, "approve", request, principal, services)


@router.post(
    "/operations/{operation_id}/reject",
    response_model=OperationView,
    **operation(
        "rejectOperation",
        summary="Reject a held promotion",
        description="The operator's rejection of a promotion in `awaiting_approval`: it is "
        "refused (`approval_rejected`) and nothing is written; the rejection is final "
        "(asking again answers `409 approval_rejected`) until an operator reopens it. The "
        "approver recorded is the authenticated credential. The body is optional.",
        tags=["operator"],
        roles=["operator"],
        errors=DECISION_ERRORS,
        body=DecisionRequest,
        body_required=False,
        body_example={"note": "touches the wrong module"},
        ok={200: Ok("the operation afterwards", OperationView, VIEW_EXAMPLE)},
    ),
)
async def post_reject(
    operation_id: str, request: Request, principal: OperatorDep, services: Port[Promoting]
) -> Response:
    """Reject a promotion held in ``awaiting_approval``: it is refused, nothing written."""
    return await _post_decision(operation_id, "reject", request, principal, services)


def _reopen(
    services: Journaling, principal: Principal, operation_id: str, note: str
) -> OperationView:
    decisions.reopen(services, operation_id, note=note, by=principal.name, role=principal.role)
    return views.operation_view(services.db, operation_id)


@router.post(
    "/operations/{operation_id}/reopen",
    response_model=OperationView,
    **operation(
        "reopenOperation",
        summary="Reopen a rejected promotion",
        description="The operator's reopening of a promotion a person rejected, journaled as "
        "a `decision` event (`approval: reopened`, the credential that reopened it): it is "
        "held in `awaiting_approval` again for a new decision. Until then a rejection is "
        "final: asking to promote it again answers `409 approval_rejected`. Any other "
        "status is `operation_conflict`. The body is optional.",
        tags=["operator"],
        roles=["operator"],
        errors=REOPEN_ERRORS,
        body=ReopenRequest,
        body_required=False,
        body_example={"note": "rejected by mistake"},
        ok={200: Ok("the operation afterwards", OperationView, VIEW_EXAMPLE)},
    ),
)
async def post_reopen(
    operation_id: str, request: Request, principal: OperatorDep, services: Port[Guarding]
) -> Response:
    """Reopen a rejected promotion: held in ``awaiting_approval`` again."""
    raw = await read_json_body(request, services, SMALL_BODY, empty=None)
    body = _decision_body(raw, REOPEN_FIELDS)
    view = await run_in_threadpool(_reopen, services, principal, operation_id, body.get("note", ""))
    return model_response(view)


def _grant_base(services: Provenance, grant_id: str, run_id: str | None) -> GrantBase:
    grant = load_grant(services, grant_id)
    if run_id is not None and grant.executor_run_id != run_id:
        raise Forbidden("an executor may read the grants of its own run only")
    states = chain_states(services, grant)
    return GrantBase(
        grant_id=grant.grant_id,
        base_operation=grant.base_operation,
        states=[BaseState(path=p, state=s) for p, s in sorted(states.items())],
    )


@router.get(
    "/grants/{grant_id}/base",
    response_model=GrantBase,
    **operation(
        "getGrantBase",
        summary="A chained grant's base states",
        description="For a grant naming `base_operation`: per path, the state its chain of "
        "completed base promotions left, which the executor builds against. An executor may "
        "read its own run's grants only.",
        tags=["orchestrator", "executor"],
        errors=["grant_unknown", "grant_invalid", "forbidden", "operation_unknown"],
        ok={
            200: Ok(
                "the base states",
                GrantBase,
                {"grant_id": "grt_demo1", "base_operation": OP_ID, "states": []},
            )
        },
    ),
)
async def get_grant_base(
    grant_id: str, principal: AnyRoleDep, services: Port[Provenance]
) -> Response:
    """A chained grant's base: per path the state its base operations left."""
    run_id = principal.run_id if principal.role == "executor" else None
    result = await run_in_threadpool(_grant_base, services, grant_id, run_id)
    return model_response(result)
