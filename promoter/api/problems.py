"""RFC 9457 problem+json responses for every error the API returns.

One handler turns any ``PromoterError`` into a problem document with its stable ``code``;
FastAPI's request-validation errors and Starlette's HTTP errors are mapped to codes too, so
no response of the API is without one. An ``OSError`` of a full disk (``ENOSPC``,
``EDQUOT``) that no boundary translated still answers ``storage_error`` (507), never 500.
``database_busy`` and ``database_unavailable`` (503) carry ``Retry-After``
(``RETRY_AFTER``), and so does an error that names its own ``retry_after`` seconds
(``too_many_requests``, 429). A 421 ``owned_by_other_host`` carries the owner's base
URL from the ledger (``owner_url``, when it published one) and a ``Location`` header:
the same path and query on the owner, which the clients follow once
(protocol: hosts#answers-that-route). Unexpected exceptions answer a bare 500 ``internal`` problem
and are logged; bad input never reaches that path. A caller that closes its connection
inside a streamed body is ``bad_request``, logged as such, never an unexpected error.

Every problem's ``type`` is ``/problems/{code}``, a page this daemon serves itself
(``page``: a short HTML page per code, served by ``promoter.api.routes.problem_types``).
``CODES`` lists every code a response can carry; ``problem_schema`` is their JSON Schema
for the OpenAPI document. Nothing here decides which route gives which code
(``promoter.api.openapi`` documents that) or changes an error's status.
"""

from __future__ import annotations

import html
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from promoter.api.workers import run_in_threadpool
from promoter.engine import routing
from promoter.errors import (
    FULL_ERRNOS,
    PROBLEM_TYPE_BASE,
    BadRequest,
    OwnedByOtherHost,
    PromoterError,
    StorageError,
    all_error_classes,
)

log = logging.getLogger("promoter.api")

MEDIA_TYPE = "application/problem+json"
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}
# Codes only the HTTP layer gives (no PromoterError carries them): (status, title).
_HTTP_ONLY = {
    "method_not_allowed": (405, "The path does not take this method"),
    "unsupported_media_type": (415, "The body's media type is not accepted"),
    "http_error": (400, "The HTTP request was refused"),
}
# Codes answered with a Retry-After header (seconds): a lock held by another writer, a
# database that does not answer (a restart takes seconds).
RETRY_AFTER = {"database_busy": "1", "database_unavailable": "2"}
# Every code a problem response can carry: code -> (HTTP status, title).
CODES: dict[str, tuple[int, str]] = {
    **{cls.code: (cls.http_status, cls.title) for cls in all_error_classes()},
    **_HTTP_ONLY,
}


def problem_type(code: str) -> str:
    """The ``type`` URI of a problem with ``code``: a page this daemon serves."""
    return f"{PROBLEM_TYPE_BASE}{code}"


def problem_schema() -> dict[str, Any]:
    """The JSON Schema of every problem document (RFC 9457 members plus ``code``)."""
    return {
        "title": "Problem",
        "description": "An RFC 9457 problem document; `code` is stable, the rest is for people. "
        "Errors may add context members (ids, limits).",
        "type": "object",
        "required": ["type", "title", "status", "detail", "code"],
        "properties": {
            "type": {"type": "string", "description": "`/problems/{code}` on this daemon"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "instance": {"type": "string", "description": "the request path"},
            "code": {"type": "string", "enum": sorted(CODES)},
            "errors": {
                "type": "array",
                "description": "request validation errors (`validation_failed` only)",
                "items": {
                    "type": "object",
                    "properties": {
                        "loc": {"type": "array", "items": {"type": "string"}},
                        "msg": {"type": "string"},
                    },
                },
            },
        },
        "additionalProperties": True,
    }


def page(code: str) -> str:
    """The short HTML page that describes problem ``code`` (every text HTML-escaped)."""
    status, title = CODES[code]
    code_html, title_html = html.escape(code), html.escape(title)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{code_html}</title></head><body>\n"
        f"<h1>{code_html}</h1>\n<p>{title_html}.</p>\n"
        f"<p>HTTP status {status}. A problem document of this type "
        "(<code>application/problem+json</code>) carries this <code>code</code>; "
        "its <code>detail</code> says what happened.</p>\n</body></html>\n"
    )


def problem_response(
    problem: dict[str, Any], request: Request, headers: dict[str, str] | None = None
) -> Response:
    """The problem document as a response; ``headers``: the HTTP layer's own (a 405's
    ``Allow``), kept beside the ones a code carries."""
    problem.setdefault("instance", request.url.path)
    body = json.dumps(problem, ensure_ascii=False, sort_keys=True, default=str).encode()
    headers = dict(headers or {})
    if problem.get("status") == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if problem.get("code") in RETRY_AFTER:
        headers["Retry-After"] = RETRY_AFTER[problem["code"]]
    elif type(problem.get("retry_after")) is int:  # the error's own (too_many_requests)
        headers["Retry-After"] = str(problem["retry_after"])
    elif problem.get("code") == "owned_by_other_host" and problem.get("owner_url"):
        query = request.url.query
        target = f"{problem['owner_url']}{request.url.path}" + (f"?{query}" if query else "")
        headers["Location"] = target
    return Response(
        body, status_code=int(problem["status"]), media_type=MEDIA_TYPE, headers=headers or None
    )


async def _owner_url(request: Request, host: Any) -> str | None:
    """The base URL the ledger records for ``host``; None when it is not known or the
    database does not answer (the 421 still names the host)."""
    services = getattr(request.app.state, "services", None)
    if services is None or not isinstance(host, str):
        return None
    try:
        return await run_in_threadpool(routing.owner_address, services, host)
    except PromoterError as exc:
        log.warning("the address of host %s is not known: %s", host, exc.detail)
        return None


def install(app: FastAPI) -> None:
    @app.exception_handler(PromoterError)
    async def _promoter_error(request: Request, exc: PromoterError) -> Response:
        problem = exc.to_problem()
        if isinstance(exc, OwnedByOtherHost) and "owner_url" not in problem:
            problem["owner_url"] = await _owner_url(request, problem.get("owner_host"))
        return problem_response(problem, request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        problem = {
            "type": problem_type("validation_failed"),
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
            "type": problem_type(code),
            "title": str(exc.detail),
            "status": exc.status_code,
            "detail": str(exc.detail),
            "code": code,
        }
        # the HTTP layer's headers stay: a 405 names the methods the path takes (``Allow``)
        return problem_response(problem, request, dict(exc.headers or {}))

    @app.exception_handler(ClientDisconnect)
    async def _disconnected(request: Request, exc: ClientDisconnect) -> Response:
        # the caller closed its connection inside the body: no one hears the answer, and
        # nothing of the daemon's failed (the route dropped what it had taken)
        log.info("%s %s: the connection closed inside the body", request.method, request.url.path)
        gone = BadRequest("the connection closed before the body ended")
        return problem_response(gone.to_problem(), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            log.error("storage full on %s %s: %s", request.method, request.url.path, exc)
            full = StorageError(f"the state directory is full: {exc.strerror}")
            return problem_response(full.to_problem(), request)
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        problem = {
            "type": problem_type("internal"),
            "title": "Internal error",
            "status": 500,
            "detail": "an unexpected error occurred; see the daemon's log",
            "code": "internal",
        }
        return problem_response(problem, request)
