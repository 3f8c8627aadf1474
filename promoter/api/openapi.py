"""The published contract: per-operation metadata and the OpenAPI 3.1 document.

Each route's decorator takes ``**operation(...)``: a stable ``operationId``, the tag of
the actors that call it, a description that states the role it needs, and (kept in
``_CONTRACT`` for the document) its request body, success responses with examples, every
problem+json response it can give with the enum of their codes, and its security
requirement (the bearer scheme with the roles admitted as the requirement's "scopes",
which OpenAPI 3.1 allows for role names). ``install(app)`` makes ``app.openapi()``
build the document from FastAPI's paths plus these entries. Writing the document to
``schemas/`` is ``promoter.api.openapi_export``'s (it builds the app; this module never
imports it, so the routes can import this one).

This module does not check roles or validate bodies: ``promoter.api.deps`` and the
models do. Which codes an operation lists is its documentation, kept true by the contract
tests (schemathesis fails on any status or code an operation does not list).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from promoter.api.admission import may_be_costly
from promoter.api.problems import CODES, MEDIA_TYPE, problem_schema, problem_type

BEARER = "bearer"
ROLES = ("orchestrator", "operator", "executor")
TAGS = [
    {"name": "executor", "description": "Low-trust code executors: blobs and bundles of one run."},
    {"name": "orchestrator", "description": "The orchestrator: grants, leases, promotions."},
    {"name": "operator", "description": "The person who owns the worktree: recovery, snapshots."},
    {"name": "public", "description": "No token needed: health, signing keys, problem types."},
]
BODY_CODES = ("bad_request", "payload_too_large", "json_too_deep", "json_too_many_items")
ALWAYS = ("internal",)


@dataclass(frozen=True)
class Ok:
    """One success response: its description, schema (a model or a JSON Schema), example."""

    description: str
    schema: type[BaseModel] | dict[str, Any] | None = None
    example: Any = None
    media_type: str = "application/json"


@dataclass(frozen=True)
class Entry:
    responses: dict[str, Any]
    codes: frozenset[str]
    request_body: dict[str, Any] | None
    security: list[dict[str, list[str]]]
    roles: tuple[str, ...] | None
    models: tuple[type[BaseModel], ...]


_CONTRACT: dict[str, Entry] = {}


def _ref(schema: type[BaseModel] | dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, dict):
        return schema
    return {"$ref": f"#/components/schemas/{schema.__name__}"}


def _content(media_type: str, schema: Any, example: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if schema is not None:
        body["schema"] = _ref(schema)
    if example is not None:
        body["example"] = example
    return {media_type: body}


# The headers a problem of a code carries (``promoter.api.problems.problem_response``).
_SECONDS = {"type": "integer", "minimum": 1}
PROBLEM_HEADERS: dict[str, dict[str, dict[str, Any]]] = {
    "unauthenticated": {
        "WWW-Authenticate": {
            "description": "`Bearer`: the scheme a token is sent with",
            "schema": {"type": "string", "const": "Bearer"},
        }
    },
    "too_many_requests": {
        "Retry-After": {"description": "seconds to wait before asking again", "schema": _SECONDS}
    },
    "database_busy": {
        "Retry-After": {
            "description": "seconds to wait before asking again (`database_busy`, "
            "`database_unavailable`)",
            "schema": _SECONDS,
        }
    },
    "owned_by_other_host": {
        "Location": {
            "description": "the same path and query on the owner's published base URL (when "
            "the ledger names it)",
            "schema": {"type": "string", "format": "uri"},
        }
    },
}
PROBLEM_HEADERS["database_unavailable"] = PROBLEM_HEADERS["database_busy"]


def problem_responses(codes: Iterable[str]) -> dict[str, Any]:
    """One response per HTTP status of ``codes``, each listing its codes as an enum and the
    headers they carry (``PROBLEM_HEADERS``)."""
    by_status: dict[int, list[str]] = {}
    for code in sorted(set(codes)):
        by_status.setdefault(CODES[code][0], []).append(code)
    out: dict[str, Any] = {}
    for status, group in sorted(by_status.items()):
        first = group[0]
        example = {
            "type": problem_type(first),
            "title": CODES[first][1],
            "status": status,
            "detail": CODES[first][1],
            "code": first,
            "instance": "/v1/...",
        }
        schema = {
            "allOf": [
                {"$ref": "#/components/schemas/Problem"},
                {"properties": {"code": {"enum": group}}},
            ]
        }
        out[str(status)] = {
            "description": "Problem: " + ", ".join(f"`{c}`" for c in group),
            "content": {MEDIA_TYPE: {"schema": schema, "example": example}},
        }
        headers = {name: h for c in group for name, h in PROBLEM_HEADERS.get(c, {}).items()}
        if headers:
            out[str(status)]["headers"] = headers
    return out


def _role_sentence(roles: tuple[str, ...] | None, optional_token: bool) -> str:
    if optional_token:
        return "Role: none unless the daemon is configured to require a token."
    if roles is None:
        return "Role: none (no token needed)."
    if set(roles) == set(ROLES):
        return "Role: any valid token (an executor's for its own run only)."
    return "Role: " + " or ".join(roles) + " token."


def operation(
    operation_id: str,
    *,
    summary: str,
    description: str,
    tags: Iterable[str],
    ok: dict[int, Ok],
    errors: Iterable[str] = (),
    roles: Iterable[str] | None = ROLES,
    body: type[BaseModel] | None = None,
    body_example: Any = None,
    body_required: bool = True,
    body_media_type: str = "application/json",
    body_schema: dict[str, Any] | None = None,
    optional_token: bool = False,
) -> dict[str, Any]:
    """The decorator arguments of one route; its contract is kept for ``build``."""
    role_list = None if roles is None else tuple(roles)
    codes = set(errors) | set(ALWAYS)
    if role_list is not None or optional_token:
        # a credential other than this host's own tokens is read from the ledger: any
        # route that takes one can meet a database that does not answer
        codes.update(("unauthenticated", "storage_error", "database_unavailable"))
    if role_list is not None and set(role_list) != set(ROLES):
        codes.add("forbidden")
    request_body = None
    if body is not None or body_schema is not None:
        codes.update(BODY_CODES if body_media_type == "application/json" else BODY_CODES[:2])
        codes.update(("validation_failed", "storage_error"))
        schema = body_schema if body_schema is not None else body
        request_body = {
            "required": body_required,
            "content": _content(body_media_type, schema, body_example),
        }
    responses: dict[str, Any] = {
        str(status): {
            "description": item.description,
            **(
                {"content": _content(item.media_type, item.schema, item.example)}
                if item.schema is not None or item.example is not None
                else {}
            ),
        }
        for status, item in ok.items()
    }
    if role_list is not None:
        security = [{BEARER: list(role_list)}]
    elif optional_token:
        security = [{}, {BEARER: []}]
    else:
        security = []
    models = tuple(
        m
        for m in (body, *(item.schema for item in ok.values()))
        if isinstance(m, type) and issubclass(m, BaseModel)
    )
    _CONTRACT[operation_id] = Entry(
        responses, frozenset(codes), request_body, security, role_list, models
    )
    return {
        "operation_id": operation_id,
        "summary": summary,
        "description": f"{description}\n\n{_role_sentence(role_list, optional_token)}",
        "tags": list(tags),
        "status_code": min(ok),
    }


def _add_models(schemas: dict[str, Any], models: Iterable[type[BaseModel]]) -> None:
    for model in models:
        schema = model.model_json_schema(
            by_alias=True, mode="validation", ref_template="#/components/schemas/{model}"
        )
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas.setdefault(model.__name__, schema)


def build(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of ``app``: FastAPI's paths with each operation's contract."""
    doc = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
        tags=TAGS,
        separate_input_output_schemas=False,
    )
    components = doc.setdefault("components", {})
    # FastAPI's own schemas (its validation errors, and its rendering of each route's
    # ``response_model``) are dropped: every schema published is the models' own, as
    # ``_add_models`` renders it from each operation's contract
    schemas: dict[str, Any] = {"Problem": problem_schema()}
    components["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "The orchestrator's or operator's token from "
            "`<state>/credentials/`, or an executor token minted by the orchestrator. "
            "Each operation's requirement lists the roles it admits.",
        }
    }
    for path, path_item in doc.get("paths", {}).items():
        for method, op in path_item.items():
            entry = _CONTRACT.get(op.get("operationId", ""))
            if entry is None:
                continue
            codes = set(entry.codes)
            if op.get("parameters"):
                codes.add("validation_failed")  # a malformed name, tree or query value
            if may_be_costly(method.upper(), path):
                codes.add("too_many_requests")  # admitted per role and credential
            op["responses"] = {**entry.responses, **problem_responses(codes)}
            op["security"] = entry.security
            if entry.roles is not None:
                op["x-roles"] = list(entry.roles)
            if entry.request_body is not None:
                op["requestBody"] = entry.request_body
            _add_models(schemas, entry.models)
    components["schemas"] = dict(sorted(schemas.items()))
    return doc


def install(app: FastAPI) -> None:
    """Serve ``build(app)`` at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
