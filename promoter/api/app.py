"""The FastAPI application: ``create_app(settings)``.

The lifespan builds the services (state directory, migrations, credentials, the
repository registry) and runs the start-up recovery scan before the daemon serves.
Routes are thin adapters over ``promoter.engine``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import Response

from promoter import __version__
from promoter.api import problems
from promoter.api.metrics import Metrics
from promoter.api.routes import (
    blobs,
    bundles,
    health,
    keys,
    operations,
    registry,
    review,
    snapshots,
)
from promoter.config import Settings
from promoter.engine.recover import auto_recover, scan_orphans
from promoter.engine.services import Services, build_services
from promoter.engine.signing import host_key


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = services is None
        app.state.services = services or build_services(settings)
        host_key(app.state.services)  # created on first start (SPEC §3.9)
        orphaned = scan_orphans(app.state.services)
        if settings.auto_recover and orphaned:
            auto_recover(app.state.services, orphaned)
        try:
            yield
        finally:
            if app.state.services.runner is not None:
                app.state.services.runner.shutdown()
            if owned:
                app.state.services.close()

    app = FastAPI(title="promoter", version=__version__, lifespan=lifespan)
    app.state.metrics = Metrics()
    problems.install(app)

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        app.state.metrics.inc(
            "promoter_http_requests_total",
            method=request.method,
            route=path,
            status=str(response.status_code),
        )
        return response

    for module in (health, registry, blobs, bundles, operations, keys, snapshots):
        app.include_router(module.router)
    app.include_router(review.router)
    return app
