"""``POST /v1/operations/{id}/merge``: merge a drifted promotion into a new, held bundle.

A thin adapter over ``promoter.engine.operation.merge``: the operator only (the merge reads
the person's worktree and makes a bundle whose old states are the person's bytes). A
clean merge answers ``201`` with the new bundle, its verification receipt and its
promotion held in ``awaiting_approval``; a conflicted one ``409 merge_conflict`` with the
merged text and its markers per path; a path that is not text ``409 merge_unsupported``
with the three sides' hashes and sizes; one whose original bundle was already merged
into a promotion that completed or is being written ``409 operation_conflict``. Nothing
is written to the worktree in any case.
Deliberately not here: the merge and its rules.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from promoter.api.deps import OperatorDep, Port
from promoter.api.openapi import Ok, operation
from promoter.api.params import OperationIdParam
from promoter.api.responses import model_response
from promoter.api.routes.examples import BUNDLE_ID, OP_ID
from promoter.api.workers import run_in_threadpool
from promoter.domain.views import MergeResult
from promoter.engine.operation.merge import merge_operation
from promoter.engine.ports import Promoting

router = APIRouter(prefix="/v1")


SIDE = {"sha256": "2" * 64, "mode": "100644", "bytes": 24}
MERGE_EXAMPLE: dict[str, Any] = {
    "operation_id": OP_ID,
    "bundle_id": "bnd_" + "7" * 32,
    "bundle_sha256": "7" * 64,
    "verification_receipt_sha256": "8" * 64,
    "merged_from": BUNDLE_ID,
    "paths": [
        {
            "path": "src/app.py",
            "result": "clean",
            "reason": "",
            "old": SIDE,
            "current": {"kind": "file", **SIDE},
            "new": SIDE,
        }
    ],
    "promotion": {
        "operation_id": "op_" + "9" * 32,
        "status": "awaiting_approval",
        "code": None,
        "detail": "",
    },
}
MERGE_ERRORS = [
    "operation_unknown",
    "operation_conflict",
    "merge_conflict",
    "merge_unsupported",
    "path_unsafe",
    "owned_by_other_host",
    "repository_unknown",
    "verification_failed",
    "blob_missing",
    "git_error",
]


def _merge(services: Promoting, operation_id: str, by: str, role: str) -> MergeResult:
    return merge_operation(services, operation_id, by=by, role=role)


@router.post(
    "/operations/{operation_id}/merge",
    response_model=MergeResult,
    **operation(
        "mergeOperation",
        summary="Merge a drifted promotion into a new bundle",
        description="For a promotion refused with `target_drift`: a three-way merge "
        "(`git merge-file`, in promoter's state directory, never the worktree) of the "
        "bundle's old, the person's current and the bundle's new bytes of every drifted "
        "file. Clean: a new bundle bound to the original and the three input hashes, whose "
        "old states are the person's bytes, verified against the original grant and held "
        "for approval (`201`). Conflicts: `409 merge_conflict` with the merged text and its "
        "markers. Binary files, symlinks and files over the limit: `409 merge_unsupported`, "
        "shown side by side. A promotion whose original bundle was already merged into one "
        "that completed or is being written: `409 operation_conflict` naming it "
        "(`merged_operation_id`, `merged_status`), nothing made. Nothing is written to the "
        "worktree. Operator only.",
        tags=["operator"],
        roles=["operator"],
        errors=MERGE_ERRORS,
        ok={201: Ok("the merged bundle and its held promotion", MergeResult, MERGE_EXAMPLE)},
    ),
)
async def post_merge(
    operation_id: OperationIdParam, principal: OperatorDep, services: Port[Promoting]
) -> Response:
    """Merge a drifted promotion's files into a new bundle held for approval."""
    # who merged is the authenticated credential, never a name the request carries
    result = await run_in_threadpool(_merge, services, operation_id, principal.name, principal.role)
    return model_response(result, 201)
