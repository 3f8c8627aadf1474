"""The hosts of the ledger: list them, fence a dead one off, admit a fenced one again.

Thin adapters over ``promoter.engine.fencing``: ``GET /v1/hosts`` lists every host with
its epoch, status, leases and published address (the orchestrator may read it too: it is
the cluster's map, protocol: hosts#answers-that-route); the rest is the operator's:
``POST /v1/hosts/{host}/fence`` with ``{"to": host}`` fences a host whose leases all ran out and
hands its unfinished operations to the named daemon host; ``POST /v1/hosts/{host}/admit`` lets a
fenced host write again once its daemon restarts. Deliberately not here: the rules (the engine's).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from promoter.api.deps import (
    SMALL_BODY,
    OperatorDep,
    OrchestratorDep,
    Port,
    read_json_body,
)
from promoter.api.models import FenceRequest, parse
from promoter.api.openapi import Ok, operation
from promoter.api.params import HostIdParam
from promoter.api.responses import model_response
from promoter.api.workers import run_in_threadpool
from promoter.domain.views import Fenced, HostEntry, HostList
from promoter.engine import fencing
from promoter.engine.ports import Journaling, Pacing, Routing
from promoter.errors import DatabaseBusy, DatabaseUnavailable

router = APIRouter(prefix="/v1")
OPERATOR = ("operator",)
FENCE_EXAMPLE = {
    "host": "host-a",
    "epoch": 2,
    "to": "host-b",
    "fenced_by": "operator",
    "fenced_at": "2026-12-05T10:00:00Z",
    "operations": ["op_df01bd2f8d2ade055f2b18ab3e4824e0"],
    "already": False,
}
HOST_EXAMPLE = {
    "host_id": "host-a",
    "epoch": 2,
    "status": "active",
    "repositories": ["repo_6a9fde31bac70000000000000000000a"],
    "registered_at": "2026-12-05T09:00:00Z",
    "lease_until": None,
    "lease_expired": True,
    "fenced_at": "2026-12-05T10:00:00Z",
    "fenced_by": "operator",
    "fenced_to": "host-b",
    "this_host": False,
    "address": "http://10.0.0.1:8420",
    "fences": [
        {
            "epoch": 2,
            "to": "host-b",
            "by": "operator",
            "at": "2026-12-05T10:00:00Z",
            "operations": ["op_df01bd2f8d2ade055f2b18ab3e4824e0"],
        }
    ],
}


@router.get(
    "/hosts",
    response_model=HostList,
    **operation(
        "listHosts",
        summary="The hosts of the ledger",
        description="Every host registered in the ledger: its epoch, whether it is `active` "
        "or `fenced`, the repositories its daemon is configured for, its host lease, its "
        "fences and the base URL its daemon published (`address`). While the database does "
        "not answer, the answer is still 200, with `source: this_host`: only this host, as "
        "its daemon last saw it.",
        tags=["orchestrator", "operator"],
        roles=("orchestrator", "operator"),
        ok={
            200: Ok(
                "the hosts",
                HostList,
                {"hosts": [HOST_EXAMPLE], "source": "ledger", "database_up": True, "detail": None},
            )
        },
    ),
)
async def get_hosts(_: OrchestratorDep, services: Port[Routing]) -> Response:
    try:
        listed = await run_in_threadpool(fencing.list_hosts, services)
    except (DatabaseUnavailable, DatabaseBusy) as exc:
        services.host.database_failed(f"{exc.code}: {exc.detail}")
        detail = (
            f"the database does not answer ({exc.code}); this is {services.owner.host}'s "
            "own view, not the ledger's"
        )
        only = fencing.this_host_only(services)
        seen = HostList(hosts=[only], source="this_host", database_up=False, detail=detail)
        return model_response(seen)
    return model_response(HostList(hosts=listed, source="ledger", database_up=True, detail=None))


@router.post(
    "/hosts/{host}/fence",
    response_model=Fenced,
    **operation(
        "fenceHost",
        summary="Fence a dead host off and hand its operations over",
        description="Allowed only once the host lease and every owner lease of the host "
        "have run out (`host_live`). Raises the host's epoch (a fenced host writes nothing) "
        "and hands its unfinished operations, as `needs_recovery`, to the daemon host `to`, "
        "which must be another host, registered, active and configured for their "
        "repositories (`handover_refused`: to itself or to a fenced host even while the host "
        "is live); that daemon recovers them. A host fenced already is left as it is: to "
        "the same `to`, the answer is that fence's with `already: true` (asking again is "
        "safe); to another host, `handover_refused` naming `fenced_to`.",
        tags=["operator"],
        roles=OPERATOR,
        errors=["host_unknown", "host_live", "handover_refused", "database_busy"],
        body=FenceRequest,
        body_example={"to": "host-b"},
        ok={200: Ok("the fence", Fenced, FENCE_EXAMPLE)},
    ),
)
async def post_fence(
    host: HostIdParam, request: Request, principal: OperatorDep, services: Port[Pacing]
) -> Response:
    body = parse(FenceRequest, await read_json_body(request, services, SMALL_BODY))
    by = principal.name or principal.role
    fenced = await run_in_threadpool(fencing.fence, services.db, host, body.to, by=by)
    return model_response(fenced)


@router.post(
    "/hosts/{host}/admit",
    response_model=HostEntry,
    **operation(
        "admitHost",
        summary="Let a fenced host write again",
        description="Makes a fenced host `active` again at its raised epoch; its daemon "
        "writes again once restarted (a daemon that started fenced stays fenced).",
        tags=["operator"],
        roles=OPERATOR,
        errors=["host_unknown", "database_busy"],
        ok={200: Ok("the host", HostEntry, HOST_EXAMPLE)},
    ),
)
async def post_admit(host: HostIdParam, _: OperatorDep, services: Port[Journaling]) -> Response:
    return model_response(await run_in_threadpool(fencing.admit, services, host))
