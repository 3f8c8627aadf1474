"""FastAPI dependencies: services, the caller's principal and role checks, bounded bodies.

Roles: the operator may do everything the orchestrator may; an executor token is bound
to one run. Each route declares the roles it admits with one of the ``Annotated``
aliases below. The dependencies that only read or compare (the services, the role
checks, a trusted token) are coroutines, run on the event loop; any other token is
authenticated in a worker thread (a named operator's file, an executor token's row), on
the pool ``promoter.api.workers`` chooses; an operator's request goes on on the
operator's own pool. A principal the admission middleware already found, or its
refusal (``PRINCIPAL_KEY`` in the scope), is taken as it is. ``caller_token`` is the token of the
request being served (a long-poll checks it again while it waits).

Bodies (protocol: api#hostile-input): ``read_body`` streams with a byte limit, ``read_json_bytes``
also counts depth and values chunk by chunk (``promoter.api.jsonshape``) so hostile JSON is
refused before it is held whole, and ``read_json_body`` parses in a worker thread.
``document_slot`` bounds how many large documents are parsed and verified at once;
``run_quota`` is the daemon's one ledger of executor storage quotas. Nothing here
validates a document's schema: the engine's wire models do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import Depends, Request
from starlette.datastructures import State
from starlette.types import Scope

from promoter.api import phases, workers
from promoter.api.jsonshape import ShapeBudget
from promoter.api.workers import run_in_threadpool
from promoter.domain.parsing import load_json
from promoter.engine.ports import Configured, Credentials, Observing, Promoting, Slots
from promoter.engine.services import Services
from promoter.errors import BadRequest, Forbidden, PayloadTooLarge, PromoterError
from promoter.store.credentials import Principal
from promoter.store.quota import RunQuota


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def _services(request: Request) -> Services:
    """``get_services`` as a dependency, on the event loop: it only reads an attribute, and
    a plain function would cost a hop to a worker thread and back on every request."""
    return get_services(request)


ServicesDep = Annotated[Services, Depends(_services)]
P = TypeVar("P")
# a route's services as the port it uses (``services: Port[Ledger]``, ``promoter.engine.ports``)
Port = Annotated[P, Depends(_services)]


def _fits_every_port(services: Services) -> tuple[Promoting, Observing]:
    """Never called: mypy checks here that ``Services`` fits every port a route takes, as
    ``Port`` hands the request's ``Services`` over unchecked."""
    return services, services


@asynccontextmanager
async def document_slot(services: Slots) -> AsyncIterator[None]:
    """Hold one of ``max_concurrent_documents`` slots while a large body is handled.

    Taken after the (bounded) body has arrived, around parsing and verification: the
    work that builds large object graphs and holds the GIL. More requests wait here, on
    the event loop, so neither memory nor contention for the GIL grows with the number of
    hostile submissions, and a client that sends slowly cannot hold a slot.
    """
    slots = services.once(
        "document_slots", lambda: anyio.Semaphore(services.settings.max_concurrent_documents)
    )
    async with slots:
        yield


def run_quota(services: Slots) -> RunQuota:
    """The daemon's one ledger of executor-run storage quotas (protocol: storage#storage-quota)."""
    settings = services.settings
    return services.once(
        "run_quota", lambda: RunQuota(settings.state_dir / "quota", settings.executor_quota_bytes)
    )


PRINCIPAL_KEY = "promoter.principal"  # in the scope's state: who the admission found
_TOKEN: ContextVar[str | None] = ContextVar("promoter_caller_token", default=None)


def _bearer_value(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_of(scope: Scope) -> str | None:
    """The bearer token of a request's scope (its first ``Authorization`` header)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return _bearer_value(value.decode("latin-1"))
    return None


def caller_token() -> str | None:
    """The bearer token of the request this task serves, once it was authenticated."""
    return _TOKEN.get()


async def authenticate(state: State, services: Credentials, token: str | None) -> Principal:
    """Who ``token`` is; an operator's request goes on on the operator's pool.

    A trusted token is compared in memory, on the event loop; a named operator's
    credential is read from its folder on the operator's pool, an executor token from
    the database on the shared one (``promoter.api.workers``).
    """
    phases.mark("request")  # the debug timing's phases; nothing without the switch
    found = services.auth.trusted(token)
    if found is None and token and token.startswith(workers.OPERATOR_TOKEN_PREFIX):
        found = await workers.run_on_operator_pool(state, services.auth.named_operator, token)
    if found is None:
        found = await workers.run_in_threadpool(services.auth.authenticate, token)
    if found.role == "operator":
        workers.use_operator_pool(state)
    _TOKEN.set(token)
    phases.mark("auth")
    return found


async def get_principal(request: Request, services: Port[Credentials]) -> Principal:
    known = request.scope.get("state", {}).get(PRINCIPAL_KEY)
    if isinstance(known, Principal):
        return known  # found by the admission middleware, in this same task
    if isinstance(known, PromoterError):
        raise known  # refused by it: the same answer, without a second look-up
    return await authenticate(request.app.state, services, token_of(request.scope))


PrincipalDep = Annotated[Principal, Depends(get_principal)]


# the role checks compare strings only: coroutines, run on the event loop
def _require(principal: Principal, *roles: str) -> Principal:
    if principal.role not in roles:
        raise Forbidden(
            f"this needs the {' or '.join(roles)} role; the token is an {principal.role} token",
            role=principal.role,
        )
    return principal


async def orchestrator(principal: PrincipalDep) -> Principal:
    return _require(principal, "orchestrator", "operator")


async def operator(principal: PrincipalDep) -> Principal:
    return _require(principal, "operator")


async def executor(principal: PrincipalDep) -> Principal:
    return _require(principal, "executor")


async def any_role(principal: PrincipalDep) -> Principal:
    return principal


SMALL_BODY = 64 * 1024  # requests, tokens, leases, decisions: a few fields each

OrchestratorDep = Annotated[Principal, Depends(orchestrator)]
OperatorDep = Annotated[Principal, Depends(operator)]
ExecutorDep = Annotated[Principal, Depends(executor)]
AnyRoleDep = Annotated[Principal, Depends(any_role)]


async def read_body(request: Request, limit: int, shape: ShapeBudget | None = None) -> bytearray:
    """The request body, refused as soon as it passes ``limit`` bytes or ``shape``.

    The body is streamed into one buffer; each chunk is first counted by ``shape``
    (depth and values, see ``promoter.api.jsonshape``), so a hostile body is refused
    after its first chunks and is never held whole, let alone parsed.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        if int(declared) > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes", limit=limit)
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes", limit=limit)
        if shape is not None:
            shape.feed(chunk)
        body += chunk
    return body


async def read_json_bytes(
    request: Request, services: Configured, limit: int | None = None
) -> bytes:
    """The raw JSON body, size- and shape-bounded while it streams, not yet parsed.

    ``limit`` defaults to ``max_document_bytes``; routes with small bodies pass
    ``SMALL_BODY``. Parse it with ``load_json`` in a worker thread.
    """
    settings = services.settings
    shape = ShapeBudget(max_depth=settings.max_json_depth, max_items=settings.max_json_items)
    return bytes(await read_body(request, limit or settings.max_document_bytes, shape))


async def read_json_body(
    request: Request, services: Configured, limit: int | None = None, *, empty: object = ...
) -> Any:
    """The JSON body, bounded as ``read_json_bytes`` says and parsed in a worker thread.

    With ``empty`` given, an all-whitespace body yields it instead of failing as invalid
    JSON.
    """
    raw = await read_json_bytes(request, services, limit)
    if empty is not ... and not raw.strip():
        return empty
    return await run_in_threadpool(load_json, raw)
