"""Repositories, executor tokens, grants, leases and runs (orchestrator side,
protocol: api#routes-and-roles).

Bodies are bounded while they stream; registration, token minting and lease writes (git
reads and database writes) run in a worker thread, off the event loop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from promoter.api.deps import (
    SMALL_BODY,
    AnyRoleDep,
    OperatorDep,
    OrchestratorDep,
    Port,
    read_json_body,
)
from promoter.api.models import ExecutorTokenRequest, RepositoryApprovalRequest, RunRequest, parse
from promoter.api.openapi import Ok, operation
from promoter.api.params import GrantIdParam, NameParam
from promoter.api.responses import canonical_response, json_response
from promoter.api.workers import run_in_threadpool
from promoter.domain.documents import canonical
from promoter.domain.models import GrantV1, LeaseV1
from promoter.domain.parsing import parse_model
from promoter.domain.views import (
    Caller,
    ExecutorToken,
    GrantRegistered,
    LeaseSet,
    RepositoryApproval,
    RepositoryList,
    RunOpened,
)
from promoter.engine import queries, repo_settings, routing
from promoter.engine.intake.grants import load_grant, register_grant, set_lease
from promoter.engine.intake.runs import check_token_ttl, open_run
from promoter.engine.ports import (
    Catalogue,
    Guarding,
    Ledger,
    Operating,
    Provenance,
    Routing,
    Tokens,
)
from promoter.engine.repos import Repository
from promoter.errors import DatabaseBusy, DatabaseUnavailable, Forbidden

router = APIRouter(prefix="/v1")
ORCHESTRATOR = ("orchestrator", "operator")
REPO_IDENTITY = "repo_" + "1f" * 16
GRANT_EXAMPLE = {
    "schema": "GrantV1",
    "grant_id": "grt_demo1",
    "repository_identity": REPO_IDENTITY,
    "branch": "refs/heads/main",
    "base_commit": "95429c8518c8" + "0" * 28,
    "base_tree": "6a9fde31bac7" + "0" * 28,
    "executor_run_id": "run_demo",
    "workflow_id": "wf_demo",
    "stage": "implement",
    "attempt": 1,
    "generation": 1,
    "resume_epoch": 0,
    "fence": 1,
    "not_before": "2020-01-01T00:00:00Z",
    "expires_at": "2099-01-01T00:00:00Z",
    "write_allowlist": [{"pattern": "src/**", "operations": ["create", "modify", "delete"]}],
    "target_preconditions": [],
    "limits": {"max_changes": 100, "max_total_bytes": 1048576},
}
LEASE_EXAMPLE = {
    "run_id": "run_demo",
    "attempt": 1,
    "generation": 1,
    "resume_epoch": 0,
    "fence": 1,
    "expires_at": "2099-01-01T00:00:00Z",
}


@router.get(
    "/repositories",
    response_model=RepositoryList,
    **operation(
        "listRepositories",
        summary="List the guarded repositories",
        description="Each repository configured here: name, identity, worktree, branch and "
        "HEAD; under `cluster`, every repository of the ledger's hosts with the host that "
        "guards it and that host's address (send its promotions there).",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["git_error"],
        ok={
            200: Ok(
                "the repositories",
                RepositoryList,
                {
                    "repositories": [
                        {
                            "name": "demo",
                            "repository_identity": REPO_IDENTITY,
                            "worktree": "/home/me/demo",
                            "branch": "refs/heads/main",
                            "head": "95429c8518c8" + "0" * 28,
                        }
                    ],
                    "host_id": "host-a",
                    "cluster": [
                        {
                            "repository_identity": REPO_IDENTITY,
                            "name": "demo",
                            "host_id": "host-a",
                            "address": "http://10.0.0.1:8420",
                            "this_host": True,
                        }
                    ],
                },
            )
        },
    ),
)
def list_repositories(_: OrchestratorDep, services: Port[Routing]) -> Response:
    items = [
        {
            "name": now.name,
            "repository_identity": now.identity,
            "worktree": now.worktree,
            "branch": now.branch,
            "head": now.head,
        }
        for now in map(queries.repository_head, services.registry.all())
    ]
    try:
        cluster: list[dict[str, object]] | None = [
            {
                "repository_identity": entry["identity"],
                "name": entry["name"],
                "host_id": entry["host_id"],
                "address": entry["address"],
                "this_host": entry["this_host"],
            }
            for entry in routing.repositories(services)
        ]
    except (DatabaseUnavailable, DatabaseBusy):
        cluster = None  # this host's own still answer through an outage
    return json_response(
        {"repositories": items, "host_id": services.owner.host, "cluster": cluster}
    )


@router.get(
    "/whoami",
    response_model=Caller,
    **operation(
        "whoami",
        summary="Who the request's credential is",
        description="The credential's role and name (an executor token's: its run). Never "
        "the token itself. `promoter status` shows it.",
        tags=["orchestrator", "executor", "operator"],
        ok={
            200: Ok("the caller", Caller, {"role": "operator", "name": "operator", "run_id": None})
        },
    ),
)
async def whoami(principal: AnyRoleDep) -> Response:
    return json_response(
        {"role": principal.role, "name": principal.name, "run_id": principal.run_id}
    )


APPROVAL_EXAMPLE = {
    "name": "demo",
    "repository_identity": REPO_IDENTITY,
    "approval": "required",
    "source": "ledger",
    "set_by": "operator",
    "set_at": "2026-12-06T08:00:00Z",
}


def _approval_view(services: Ledger, repository: Repository) -> dict[str, object]:
    setting = repo_settings.approval(services.db, repository)
    return {
        "name": repository.name,
        "repository_identity": repository.identity,
        "approval": setting.value,
        "source": setting.source,
        "set_by": setting.by,
        "set_at": setting.at,
    }


@router.get(
    "/repositories/{name}/approval",
    response_model=RepositoryApproval,
    **operation(
        "getRepositoryApproval",
        summary="A repository's approval setting in force",
        description="`required`: every promotion into it waits in `awaiting_approval` for an "
        "operator's decision. `source` says whether the configuration file or an operator's "
        "`PUT` (newest first, in the ledger) set it.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["repository_unknown", "database_busy"],
        ok={200: Ok("the setting", RepositoryApproval, APPROVAL_EXAMPLE)},
    ),
)
def get_repository_approval(
    name: NameParam, _: OrchestratorDep, services: Port[Catalogue]
) -> Response:
    return json_response(_approval_view(services, services.registry.by_name(name)))


@router.put(
    "/repositories/{name}/approval",
    response_model=RepositoryApproval,
    **operation(
        "setRepositoryApproval",
        summary="Turn a repository's approval gate on or off",
        description="Recorded in the ledger with the credential that asked (its name), the "
        "time, the host and what was in force before, and logged; in force on every host "
        "from the next promotion request on, over the configuration file. A promotion "
        "already held stays held. Operator only.",
        tags=["operator"],
        roles=("operator",),
        errors=["repository_unknown", "database_busy", "host_fenced"],
        body=RepositoryApprovalRequest,
        body_example={"approval": "required"},
        ok={200: Ok("the setting now in force", RepositoryApproval, APPROVAL_EXAMPLE)},
    ),
)
async def put_repository_approval(
    name: NameParam, request: Request, principal: OperatorDep, services: Port[Guarding]
) -> Response:
    body = parse(RepositoryApprovalRequest, await read_json_body(request, services, SMALL_BODY))
    repository = services.registry.by_name(name)

    def change() -> dict[str, object]:
        repo_settings.set_approval(
            services, repository, body.approval, role=principal.role, name=principal.name
        )
        return _approval_view(services, repository)

    return json_response(await run_in_threadpool(change))


@router.post(
    "/executor-tokens",
    response_model=ExecutorToken,
    **operation(
        "createExecutorToken",
        summary="Mint an executor token",
        description="A token bound to one executor run, expiring after `ttl_seconds` "
        "(at most the daemon's `executor_token_max_ttl`).",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["database_busy"],
        body=ExecutorTokenRequest,
        body_example={"executor_run_id": "run_demo", "ttl_seconds": 3600},
        ok={
            201: Ok(
                "the token (shown once)",
                ExecutorToken,
                {
                    "token": "pe_...",
                    "executor_run_id": "run_demo",
                    "expires_at": "2026-11-30T23:35:07Z",
                },
            )
        },
    ),
)
async def mint_executor_token(
    request: Request, _: OrchestratorDep, services: Port[Tokens]
) -> Response:
    body = parse(ExecutorTokenRequest, await read_json_body(request, services, SMALL_BODY))
    check_token_ttl(services, body.ttl_seconds)
    run_id = body.executor_run_id
    token, expires_at = await run_in_threadpool(
        services.auth.mint_executor_token, run_id, body.ttl_seconds
    )
    return json_response({"token": token, "executor_run_id": run_id, "expires_at": expires_at}, 201)


# what registering a grant can answer, alone or as part of a run
GRANT_ERRORS = (
    "grant_invalid",
    "grant_conflict",
    "repository_unknown",
    "repository_invalid",
    "git_error",
)


@router.post(
    "/grants",
    response_model=GrantRegistered,
    **operation(
        "createGrant",
        summary="Register a grant",
        description="Register a GrantV1; it is stored as its exact canonical bytes. The same "
        "grant again answers 200; other content under the same id is `grant_conflict`.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=[
            *GRANT_ERRORS,
            "database_busy",
        ],
        body=GrantV1,
        body_example=GRANT_EXAMPLE,
        ok={
            201: Ok(
                "registered",
                GrantRegistered,
                {"grant_id": "grt_demo1", "grant_sha256": "b1880c2c" + "0" * 56},
            ),
            200: Ok("the same grant was already registered", GrantRegistered),
        },
    ),
)
async def post_grant(request: Request, _: OrchestratorDep, services: Port[Operating]) -> Response:
    body = await read_json_body(request, services)
    grant, created = await run_in_threadpool(register_grant, services, body)
    return json_response(
        {"grant_id": grant.grant_id, "grant_sha256": grant.grant_sha256}, 201 if created else 200
    )


@router.get(
    "/grants/{grant_id}",
    response_model=GrantV1,
    **operation(
        "getGrant",
        summary="Read a grant",
        description="The stored canonical bytes of a registered grant. An executor may read "
        "the grants of its own run only.",
        tags=["orchestrator", "executor"],
        errors=["grant_unknown", "forbidden"],
        ok={200: Ok("the grant's canonical bytes", GrantV1, GRANT_EXAMPLE)},
    ),
)
def get_grant(
    grant_id: GrantIdParam, principal: AnyRoleDep, services: Port[Provenance]
) -> Response:
    grant = load_grant(services, grant_id)
    if principal.role == "executor" and grant.executor_run_id != principal.run_id:
        raise Forbidden("an executor may read the grants of its own run only")
    return canonical_response(canonical(grant))


@router.put(
    "/leases/{workflow_id}/{stage}",
    response_model=LeaseSet,
    **operation(
        "putLease",
        summary="Set the current lease of a workflow stage",
        description="Set the lease a promotion's fence is checked against (a LeaseV1 body). "
        "Fences only move forward; the same fence with other fields is `lease_conflict`.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=["lease_fence_regression", "lease_conflict", "database_busy"],
        body=LeaseV1,
        body_example=LEASE_EXAMPLE,
        ok={
            200: Ok(
                "the lease as set; `changed` is false when it was already so",
                LeaseSet,
                {"workflow_id": "wf_demo", "stage": "implement", **LEASE_EXAMPLE, "changed": True},
            )
        },
    ),
)
async def put_lease(
    workflow_id: NameParam,
    stage: NameParam,
    request: Request,
    _: OrchestratorDep,
    services: Port[Guarding],
) -> Response:
    body = await read_json_body(request, services, SMALL_BODY)
    lease, changed = await run_in_threadpool(set_lease, services, workflow_id, stage, body)
    return json_response(
        {"workflow_id": workflow_id, "stage": stage, **lease.wire(), "changed": changed}
    )


@router.post(
    "/runs",
    response_model=RunOpened,
    **operation(
        "openRun",
        summary="Register a run's grant, set its lease and mint its executor token",
        description="What `POST /v1/grants`, `PUT /v1/leases/{workflow_id}/{stage}` and "
        "`POST /v1/executor-tokens` do, with the same checks, in one request and one "
        "database transaction: a refusal of any part changes nothing. The lease must be "
        "the grant's workflow stage's and name the grant's `executor_run_id`; the token "
        "is that run's. Every call mints a new token.",
        tags=["orchestrator"],
        roles=ORCHESTRATOR,
        errors=[
            *GRANT_ERRORS,
            "lease_fence_regression",
            "lease_conflict",
            "database_busy",
        ],
        body=RunRequest,
        body_example={
            "grant": GRANT_EXAMPLE,
            "lease": {"workflow_id": "wf_demo", "stage": "implement", **LEASE_EXAMPLE},
            "token_ttl_seconds": 3600,
        },
        ok={
            201: Ok(
                "registered, set and minted",
                RunOpened,
                {
                    "grant": {"grant_id": "grt_demo1", "grant_sha256": "b1880c2c" + "0" * 56},
                    "grant_created": True,
                    "lease": {
                        "workflow_id": "wf_demo",
                        "stage": "implement",
                        **LEASE_EXAMPLE,
                        "changed": True,
                    },
                    "token": {
                        "token": "pex_...",
                        "executor_run_id": "run_demo",
                        "expires_at": "2026-11-30T23:35:07Z",
                    },
                },
            )
        },
    ),
)
async def post_run(request: Request, _: OrchestratorDep, services: Port[Operating]) -> Response:
    body = parse(RunRequest, await read_json_body(request, services))
    lease = parse_model(LeaseV1, body.lease.lease())
    workflow_id, stage = body.lease.workflow_id, body.lease.stage
    opened = await run_in_threadpool(
        open_run, services, body.grant, workflow_id, stage, lease, body.token_ttl_seconds
    )
    grant = opened.grant
    return json_response(
        {
            "grant": {"grant_id": grant.grant_id, "grant_sha256": grant.grant_sha256},
            "grant_created": opened.grant_created,
            "lease": {
                "workflow_id": workflow_id,
                "stage": stage,
                **lease.wire(),
                "changed": opened.lease_changed,
            },
            "token": {
                "token": opened.token,
                "executor_run_id": grant.executor_run_id,
                "expires_at": opened.token_expires_at,
            },
        },
        201,
    )
