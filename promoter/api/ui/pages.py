"""The console's pages: operations, one operation, the review of held promotions, and one
file's diff of a held promotion, page by page.

The review page shows, first, every file its page of the diff does not show in full
(sizes, flags, a link to the file's own page and a box to tick: an approval must name
each, protocol: api#every-byte-reviewable), then the file table and the diff. A file's own page is
one request of at most a page, with a link to the next.

Every page needs an operator session (no session: a redirect to ``/ui/login``). Each
reads through the same engine functions the API routes call
(``promoter.engine.queries.list_operations``, ``promoter.engine.operation.views.operation_view``
and ``current_targets``, ``promoter.engine.review.diff``), in a worker thread. Receipts
are offered as downloads of the same bytes the API answers.

Deliberately not here: anything that changes an operation (``promoter.api.ui.actions``).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import get_services
from promoter.api.routes.review import PATH_MAX
from promoter.api.ui.diffview import Block, file_blocks, page_bytes
from promoter.api.ui.refusals import shown
from promoter.api.ui.web import render, secure, session_of
from promoter.api.workers import run_in_threadpool
from promoter.domain.answers import BundleDiffView
from promoter.domain.status import STATUSES, OperationStatus
from promoter.domain.views import CurrentTarget
from promoter.engine import queries
from promoter.engine.operation import receipts, served, views
from promoter.engine.ports import Ledger, Reviewing, Routing, Serving
from promoter.engine.review.diff import SMALL_BYTES, SMALL_LINES, bundle_diff
from promoter.errors import OperationConflict, PromoterError

router = APIRouter(prefix="/ui", include_in_schema=False)
LOGIN = "/ui/login"


def _login() -> Response:
    return secure(RedirectResponse(LOGIN, status_code=303))


def _list(services: Ledger, status: str | None, repository: str | None) -> list[dict[str, Any]]:
    return [
        {**queries.operation_summary(r).wire(), "created_at": r.created_at}
        for r in queries.list_operations(services.db, status=status, repository=repository)
    ]


@router.get("")
def get_root() -> Response:
    return secure(RedirectResponse("/ui/operations", status_code=303))


@router.get("/operations")
@shown()
async def get_operations(
    request: Request,
    status: str | None = Query(default=None, max_length=40),
    repository: str | None = Query(default=None, max_length=200),
) -> Response:
    session = await session_of(request)
    if session is None:
        return _login()
    services = get_services(request)
    rows = await run_in_threadpool(_list, services, status or None, repository or None)
    return render(
        "operations.html",
        200,
        session,
        rows=rows,
        status=status or "",
        repository=repository or "",
        statuses=STATUSES,
        repositories=sorted(r.name for r in services.registry.all()),
    )


def _operation(services: Routing, operation_id: str) -> dict[str, Any]:
    view = views.operation_view(services.db, operation_id)
    try:
        current: list[CurrentTarget] | str = views.current_targets(services, operation_id)
    except PromoterError as exc:
        current = f"{exc.code}: {exc.detail}"
    return {"op": view, "current": current}


@router.get("/operations/{operation_id}")
@shown()
async def get_operation(request: Request, operation_id: str) -> Response:
    session = await session_of(request)
    if session is None:
        return _login()
    found = await run_in_threadpool(_operation, get_services(request), operation_id)
    return render("operation.html", 200, session, S=OperationStatus, **found)


def _receipt(services: Serving, operation_id: str, which: str) -> bytes:
    if which.endswith(".dsse"):  # as stored when the receipt was made
        if which.startswith("rollback"):
            return served.rollback_envelope(services, operation_id)
        return served.promotion_envelope(services, operation_id)
    if which.startswith("rollback"):
        return receipts.rollback_receipt(services, operation_id)
    return receipts.promotion_receipt(services, operation_id)


OP_ID = re.compile(r"op_[0-9a-f]{32}")  # the id names the downloaded file
RECEIPTS = ("receipt.json", "receipt.dsse", "rollback-receipt.json", "rollback-receipt.dsse")


@router.get("/operations/{operation_id}/{which}")
@shown()
async def get_receipt(request: Request, operation_id: str, which: str) -> Response:
    session = await session_of(request)
    if session is None:
        return _login()
    if which not in RECEIPTS or OP_ID.fullmatch(operation_id) is None:
        return render("error.html", 404, session, code="not_found", detail="no such download")
    data = await run_in_threadpool(_receipt, get_services(request), operation_id, which)
    name = f"{operation_id}-{which}"
    response = Response(data, media_type="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
    return secure(response)


def _review(services: Reviewing) -> list[dict[str, Any]]:
    held = _list(services, OperationStatus.AWAITING_APPROVAL, None)
    for item in held:
        diff = bundle_diff(services, item["bundle_id"], page_bytes(services.settings))
        item["diff"] = diff
        item["blocks"] = file_blocks(diff["unified_diff"])
        _mark_choosable(diff, item["blocks"])
    return held


def _mark_choosable(diff: BundleDiffView, blocks: list[Block]) -> None:
    """Offer hunk checkboxes in the modified text files whose hunks an approval may choose
    (``promoter.engine.review.partial``: diffed in memory, more than one hunk)."""
    if diff["truncated"] or len(blocks) != len(diff["files"]):
        return
    for index, (entry, block) in enumerate(zip(diff["files"], blocks, strict=True)):
        small = all(
            (size or 0) <= SMALL_BYTES and (lines or 0) <= SMALL_LINES
            for size, lines in (
                (entry["old_bytes"], entry["old_lines"]),
                (entry["new_bytes"], entry["new_lines"]),
            )
        )
        text = not entry["binary"] and not entry["summarized"]
        links = "120000" in (entry["old_mode"], entry["new_mode"])
        if entry["operation"] == "modify" and text and small and not links and block.hunks > 1:
            block.choosable, block.path, block.index = True, entry["path"], index


@router.get("/review")
@shown()
async def get_review(request: Request) -> Response:
    session = await session_of(request)
    if session is None:
        return _login()
    held = await run_in_threadpool(_review, get_services(request))
    return render("review.html", 200, session, held=held)


def _held_bundle(services: Ledger, operation_id: str) -> str:
    view = views.operation_view(services.db, operation_id)
    if view.status != OperationStatus.AWAITING_APPROVAL or not view.bundle_id:
        raise OperationConflict(
            f"operation {operation_id} is {view.status}, not awaiting_approval",
            operation_id=operation_id,
        )
    return view.bundle_id


def _file_page(
    services: Reviewing, operation_id: str, path: str, cursor: str | None
) -> dict[str, Any]:
    bundle_id = _held_bundle(services, operation_id)
    limit = page_bytes(services.settings)
    diff = bundle_diff(services, bundle_id, limit, path=path, cursor=cursor)
    return {"diff": diff, "blocks": file_blocks(diff["unified_diff"]), "entry": diff["files"][0]}


@router.get("/review/{operation_id}/file")
@shown()
async def get_review_file(
    request: Request,
    operation_id: str,
    path: str = Query(max_length=PATH_MAX),
    cursor: str | None = Query(default=None, max_length=40),
) -> Response:
    """One file of a held promotion: a page of its diff, and a link to the next."""
    session = await session_of(request)
    if session is None:
        return _login()
    services = get_services(request)
    found = await run_in_threadpool(_file_page, services, operation_id, path, cursor)
    return render("review_file.html", 200, session, operation_id=operation_id, **found)
