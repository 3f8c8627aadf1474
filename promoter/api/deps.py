"""FastAPI dependencies: the services, the caller's principal and role checks.

Roles: the operator may do everything the orchestrator may; an executor token is bound
to one run. Each route declares the roles it admits with one of the ``Annotated``
aliases below.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from promoter.domain.parsing import load_json
from promoter.engine.services import Services
from promoter.errors import BadRequest, Forbidden, PayloadTooLarge
from promoter.store.credentials import Principal


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def get_principal(request: Request, services: ServicesDep) -> Principal:
    return services.auth.authenticate(_bearer(request))


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def _require(principal: Principal, *roles: str) -> Principal:
    if principal.role not in roles:
        raise Forbidden(
            f"this needs the {' or '.join(roles)} role; the token is an {principal.role} token",
            role=principal.role,
        )
    return principal


def orchestrator(principal: PrincipalDep) -> Principal:
    return _require(principal, "orchestrator", "operator")


def operator(principal: PrincipalDep) -> Principal:
    return _require(principal, "operator")


def executor(principal: PrincipalDep) -> Principal:
    return _require(principal, "executor")


def any_role(principal: PrincipalDep) -> Principal:
    return principal


OrchestratorDep = Annotated[Principal, Depends(orchestrator)]
OperatorDep = Annotated[Principal, Depends(operator)]
ExecutorDep = Annotated[Principal, Depends(executor)]
AnyRoleDep = Annotated[Principal, Depends(any_role)]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused early when larger than ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        if int(declared) > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes", limit=limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes", limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_body(request: Request, services: Services) -> object:
    return load_json(await read_body(request, services.settings.max_document_bytes))
