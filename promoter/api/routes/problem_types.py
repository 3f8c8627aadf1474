"""``GET /problems/{code}``: the page every problem's ``type`` URI points at.

One short HTML page per code of ``promoter.api.problems.CODES``; any other code is
``not_found``. Needs no token. It does not describe which route gives which code: the
OpenAPI document does.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from promoter.api.openapi import Ok, operation
from promoter.api.problems import CODES, page
from promoter.errors import NotFound

router = APIRouter()


@router.get(
    "/problems/{code}",
    **operation(
        "getProblemType",
        summary="Describe a problem type",
        description="A short HTML page for one problem `code`: every problem's `type` URI "
        "points here.",
        tags=["public"],
        roles=None,
        errors=["not_found"],
        ok={200: Ok("the page", {"type": "string"}, page("not_found"), media_type="text/html")},
    ),
    response_class=HTMLResponse,
)
async def problem_page(code: str) -> HTMLResponse:
    if code not in CODES:
        raise NotFound(f"no problem type {code!r}", problem_code=code)
    return HTMLResponse(page(code))
