"""Liveness, readiness and metrics.

``/healthz`` is a coroutine that touches nothing but the event loop: it answers while
every worker thread is busy (a slow bundle, a write waiting on a database lock), which
is what it reports: the daemon is alive and serving. Its body is encoded once, at import:
a client may poll it in a tight loop, and every poll's CPU is taken from the interpreter
lock that a verifying worker thread needs. ``/readyz`` runs its checks on the operator's
own worker threads (``promoter.api.workers``), so a flood of other callers cannot make a
daemon look unready. A served daemon answers ``GET /healthz`` in
``promoter.api.observe`` with these same bytes, before routing; the route stays for the
contract (OpenAPI) and for an app without that middleware. It checks nothing else
(``/readyz`` does).
"""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from promoter.api.deps import Port
from promoter.api.openapi import Ok, operation
from promoter.api.responses import json_response
from promoter.api.workers import run_on_operator_pool
from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.views import Health, Readiness
from promoter.engine.fencing import admitted_epoch
from promoter.engine.ports import Guarding, Tokens
from promoter.errors import Unauthenticated

router = APIRouter()
HEALTHZ = "/healthz"
ALIVE = json_response({"status": "ok"}).body  # the same bytes json_response gives


@router.get(
    HEALTHZ,
    response_model=Health,
    **operation(
        "getHealth",
        summary="Liveness",
        description="Answers while the daemon serves, even with every worker thread busy.",
        tags=["public"],
        roles=None,
        ok={200: Ok("alive", Health, {"status": "ok"})},
    ),
)
async def healthz() -> Response:
    return Response(ALIVE, media_type="application/json")


@router.get(
    "/readyz",
    response_model=Readiness,
    **operation(
        "getReadiness",
        summary="Readiness",
        description="Whether the database answers, the state directory is writable and "
        "this daemon's host is active (a fenced host is not ready: it writes nothing); "
        "`reason` says why not.",
        tags=["public"],
        roles=None,
        ok={
            200: Ok(
                "ready",
                Readiness,
                {
                    "status": "ready",
                    "checks": {"database": True, "state_dir_writable": True, "host_active": True},
                    "reason": None,
                },
            ),
            503: Ok("not ready", Readiness),
        },
    ),
)
async def readyz(request: Request, services: Port[Guarding]) -> Response:
    checks, reasons = await run_on_operator_pool(request.app.state, _checks, services)
    ready = not reasons
    return json_response(
        {
            "status": "ready" if ready else "not_ready",
            "checks": checks,
            "reason": "; ".join(reasons) or None,
        },
        200 if ready else 503,
    )


def _checks(services: Guarding) -> tuple[dict[str, bool], list[str]]:
    """Each readiness check, and the reasons of those that fail."""
    host = services.host
    database = services.db.ping()
    if database:
        host.database_answered(rfc3339(utcnow()))
    else:
        host.database_failed("database_unavailable: /readyz could not reach it")
    checks = {
        "database": database,
        "state_dir_writable": os.access(services.settings.state_dir, os.W_OK),
        "host_active": not host.fenced,
    }
    reasons = []
    if host.fenced:
        reasons.append(_fenced_reason(services) if database else _fenced_said(services))
    if not checks["database"]:
        reasons.append("the database does not answer")
    if not checks["state_dir_writable"]:
        reasons.append(f"the state directory {services.settings.state_dir} is not writable")
    return checks, reasons


def _fenced_said(services: Guarding) -> str:
    host = services.host
    return host.fenced_reason or f"host {host.host_id} was fenced off"


def _fenced_reason(services: Guarding) -> str:
    """Why a fenced daemon is not ready: its fence, or that only a restart is left once an
    operator admitted its host again (``fencing.admitted_epoch``)."""
    host = services.host
    epoch = admitted_epoch(services.db, host.host_id)
    if epoch is None:
        return _fenced_said(services)
    return (
        f"host {host.host_id} was fenced off and an operator admitted it again (epoch "
        f"{epoch}): restart this daemon to write again"
    )


@router.get(
    "/metrics",
    **operation(
        "getMetrics",
        summary="Prometheus metrics",
        description="Counters in the Prometheus text format.",
        tags=["public", "operator"],
        roles=None,
        optional_token=True,
        ok={
            200: Ok(
                "the counters",
                {"type": "string"},
                "# TYPE promoter_http_requests_total counter\n",
                media_type="text/plain",
            )
        },
    ),
    response_class=PlainTextResponse,
)
def metrics(request: Request, services: Port[Tokens]) -> Response:
    if not services.settings.metrics_public:
        services.auth.authenticate(_token(request))
    exposition = request.app.state.metrics.exposition()
    return Response(exposition, media_type="text/plain; version=0.0.4; charset=utf-8")


def _token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("metrics need a token on this daemon")
    return token.strip() or None
