"""Swagger UI at ``/docs``, served entirely by the daemon (it works offline).

The page and its assets (``/docs/assets/...``: the Swagger UI bundle, its stylesheet and
a favicon) come from the ``fastapi-offline`` package's static files, which ship Swagger
UI 5 (needed for OpenAPI 3.1); no URL on the page leaves the daemon. Only the listed
asset names are served. This module does not build the OpenAPI document
(``promoter.api.openapi`` does) and serves no ReDoc.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from promoter.errors import NotFound

router = APIRouter(include_in_schema=False)
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}
_PACKAGE = "fastapi_offline"


def asset_bytes(name: str) -> bytes:
    """One asset's bytes, from the installed package."""
    return resources.files(_PACKAGE).joinpath("static", name).read_bytes()


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="promoter API",
        swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs/assets/favicon.png",
        oauth2_redirect_url=None,
        swagger_ui_parameters={"persistAuthorization": False, "displayOperationId": True},
    )


@router.get("/docs/assets/{name}")
async def swagger_asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no documentation asset {name!r}")
    return Response(
        asset_bytes(name),
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400"},
    )
