"""The console's Merge button: merge a drifted promotion into a new bundle held for approval.

``POST /ui/operations/{id}/merge`` is a CSRF-checked form post from an operator session
(as every action in ``actions.py``) that calls the same engine function as
``POST /v1/operations/{id}/merge`` with the session's credential. A clean merge sends the
browser to the held promotion of the new bundle (303), where Approve and Reject are
offered as for any held promotion. A conflicted merge, or a path that is not text, is
shown on ``merge.html``: each conflicted file's merged text with its markers, or the
old, current and new sides' hashes, modes and sizes next to each other; nothing was
written. Any other refusal is the error page with its code.

Deliberately not here: the merge and its rules (``promoter.engine.operation.merge``), and
what the operation page offers (``operation.html``'s ``merge`` block shows the button
only on a promotion refused with ``target_drift``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import get_services
from promoter.api.ui.refusals import Page, shown
from promoter.api.ui.web import answering, form_of, render, secure
from promoter.api.workers import run_in_threadpool
from promoter.engine.operation.merge import merge_operation
from promoter.errors import MergeConflict, MergeUnsupported, PromoterError

router = APIRouter(prefix="/ui/operations/{operation_id}", include_in_schema=False)


def _not_merged(request: Request, exc: PromoterError) -> Response:
    """``merge.html``: the paths that kept the merge from being made, side by side."""
    return render(
        "merge.html",
        exc.http_status,
        answering(request),
        operation_id=request.path_params["operation_id"],
        code=exc.code,
        detail=exc.detail,
        paths=exc.context.get("paths") or [],
    )


@router.post("/merge")
@shown(Page(MergeConflict, _not_merged), Page(MergeUnsupported, _not_merged))
async def post_merge(request: Request, operation_id: str) -> Response:
    session, _ = await form_of(request)
    result = await run_in_threadpool(
        merge_operation,
        get_services(request),
        operation_id,
        by=session.name,
        role=session.role,
    )
    held = result.promotion.operation_id or operation_id
    return secure(RedirectResponse(f"/ui/operations/{held}", status_code=303))
