"""Repositories, executor tokens, grants and leases (orchestrator side of SPEC §7).

Bodies are bounded while they stream; registration, token minting and lease writes (git
reads and database writes) run in a worker thread, off the event loop.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import (
    SMALL_BODY,
    AnyRoleDep,
    OrchestratorDep,
    ServicesDep,
    read_json_body,
)
from promoter.api.responses import canonical_response, json_response
from promoter.domain.documents import canonical
from promoter.domain.models import NAME_PATTERN
from promoter.engine.grants import load_grant, register_grant, set_lease
from promoter.errors import Forbidden, ValidationFailed
from promoter.git.readback import head_commit, symbolic_head

router = APIRouter(prefix="/v1")
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=200)]


@router.get("/repositories")
def list_repositories(_: OrchestratorDep, services: ServicesDep) -> Response:
    items = [
        {
            "name": repo.name,
            "repository_identity": repo.identity,
            "worktree": repo.worktree,
            "branch": symbolic_head(repo.layout),
            "head": head_commit(repo.layout),
        }
        for repo in services.registry.all()
    ]
    return json_response({"repositories": items})


@router.post("/executor-tokens")
async def mint_executor_token(
    request: Request, _: OrchestratorDep, services: ServicesDep
) -> Response:
    body = await read_json_body(request, services, SMALL_BODY)
    run_id, ttl = _token_request(body, services.settings.executor_token_max_ttl)
    token, expires_at = await run_in_threadpool(services.auth.mint_executor_token, run_id, ttl)
    return json_response({"token": token, "executor_run_id": run_id, "expires_at": expires_at}, 201)


def _token_request(body: Any, max_ttl: int) -> tuple[str, int]:
    if not isinstance(body, dict) or set(body) - {"executor_run_id", "ttl_seconds"}:
        raise ValidationFailed("body must be {executor_run_id, ttl_seconds}")
    run_id = body.get("executor_run_id")
    ttl = body.get("ttl_seconds", 3600)
    if (
        not isinstance(run_id, str)
        or not re.fullmatch(NAME_PATTERN[1:-1], run_id)
        or len(run_id) > 200
    ):
        raise ValidationFailed("executor_run_id must be a name of [A-Za-z0-9_.:-]")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= max_ttl:
        raise ValidationFailed(f"ttl_seconds must be an integer from 1 to {max_ttl}")
    return run_id, ttl


@router.post("/grants")
async def post_grant(request: Request, _: OrchestratorDep, services: ServicesDep) -> Response:
    body = await read_json_body(request, services)
    grant, created = await run_in_threadpool(register_grant, services, body)
    return json_response(
        {"grant_id": grant.grant_id, "grant_sha256": grant.grant_sha256}, 201 if created else 200
    )


@router.get("/grants/{grant_id}")
def get_grant(grant_id: str, principal: AnyRoleDep, services: ServicesDep) -> Response:
    grant = load_grant(services, grant_id)
    if principal.role == "executor" and grant.executor_run_id != principal.run_id:
        raise Forbidden("an executor may read the grants of its own run only")
    return canonical_response(canonical(grant))


@router.put("/leases/{workflow_id}/{stage}")
async def put_lease(
    workflow_id: NameParam,
    stage: NameParam,
    request: Request,
    _: OrchestratorDep,
    services: ServicesDep,
) -> Response:
    body = await read_json_body(request, services, SMALL_BODY)
    lease, changed = await run_in_threadpool(set_lease, services, workflow_id, stage, body)
    return json_response(
        {"workflow_id": workflow_id, "stage": stage, **lease.wire(), "changed": changed}
    )
