"""RFC 9457 problem+json responses for every error the API returns.

One handler turns any ``PromoterError`` into a problem document with its stable ``code``;
FastAPI's request-validation errors and Starlette's HTTP errors are mapped to codes too, so
no response of the API is without one. An ``OSError`` of a full disk (``ENOSPC``,
``EDQUOT``) that no boundary translated still answers ``storage_error`` (507), never 500.
Unexpected exceptions answer a bare 500 ``internal`` problem and are logged; bad input
never reaches that path.
"""

from __future__ import annotations

import errno
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from promoter.errors import PromoterError, StorageError

log = logging.getLogger("promoter.api")

MEDIA_TYPE = "application/problem+json"
_FULL = {errno.ENOSPC, errno.EDQUOT}
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def problem_response(problem: dict[str, Any], request: Request) -> Response:
    problem.setdefault("instance", request.url.path)
    body = json.dumps(problem, ensure_ascii=False, sort_keys=True, default=str).encode()
    headers = {"WWW-Authenticate": "Bearer"} if problem.get("status") == 401 else None
    return Response(
        body, status_code=int(problem["status"]), media_type=MEDIA_TYPE, headers=headers
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(PromoterError)
    async def _promoter_error(request: Request, exc: PromoterError) -> Response:
        return problem_response(exc.to_problem(), request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        problem = {
            "type": "https://promoter.dev/problems/validation_failed",
            "title": "The request does not match its schema",
            "status": 422,
            "detail": errors[0]["msg"] if errors else "invalid request",
            "code": "validation_failed",
            "errors": errors[:50],
        }
        return problem_response(problem, request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        problem = {
            "type": f"https://promoter.dev/problems/{code}",
            "title": str(exc.detail),
            "status": exc.status_code,
            "detail": str(exc.detail),
            "code": code,
        }
        return problem_response(problem, request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        if isinstance(exc, OSError) and exc.errno in _FULL:
            log.error("storage full on %s %s: %s", request.method, request.url.path, exc)
            full = StorageError(f"the state directory is full: {exc.strerror}")
            return problem_response(full.to_problem(), request)
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        problem = {
            "type": "https://promoter.dev/problems/internal",
            "title": "Internal error",
            "status": 500,
            "detail": "an unexpected error occurred; see the daemon's log",
            "code": "internal",
        }
        return problem_response(problem, request)
