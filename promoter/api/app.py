"""The FastAPI application: ``create_app(settings)``.

The lifespan builds the services (state directory, migrations, credentials, the
repository registry), sweeps the state directory's leftover temps
(``promoter.store.state_temps``; those of another boot only when no other host may write
there, ``promoter.engine.state_sharing``), starts the owner lease's heartbeat and the watchdog
(``promoter.engine.operation.watchdog``), runs the start-up recovery scan and rehearses a
promotion's journal (``promoter.engine.operation.rehearsal``, rolled back) before the daemon serves.
Routes are thin adapters over ``promoter.engine``, behind one ASGI layer
(``promoter.api.front``: request ids, ``Host``, admission, access line, metrics). Costly
reads pass ``promoter.api.admission`` first; the operator's work runs on its own worker threads
(``promoter.api.workers``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from promoter import __version__
from promoter.adapters import webhooks
from promoter.api import docs, observe, openapi, problems, ui, workers
from promoter.api.admission import Admission, Gate
from promoter.api.front import FrontDoor
from promoter.api.hosts import HostAllowlist
from promoter.api.routes import (
    blobs,
    bundles,
    events,
    health,
    hosts,
    keys,
    merge,
    operations,
    problem_types,
    promotions,
    registry,
    review,
    snapshots,
    trace,
)
from promoter.config import Settings
from promoter.engine import fencing, state_sharing
from promoter.engine.operation.recover import auto_recover, scan_orphans
from promoter.engine.operation.rehearsal import rehearse
from promoter.engine.operation.watchdog import Watchdog
from promoter.engine.ownership import Heartbeat
from promoter.engine.receipts.envelopes import published_keyring
from promoter.engine.services import Services
from promoter.store.state_temps import sweep as sweep_state_temps

API_DESCRIPTION = (
    "Executors hand in sealed, content-addressed patch bundles; the orchestrator promotes "
    "them under a grant and a lease; the operator recovers, reconciles, rolls back and "
    "restores snapshots. Every error is `application/problem+json` with a stable `code`, "
    "whose `type` is a page of this daemon (`/problems/{code}`)."
)


def create_app(
    settings: Settings,
    services: Services | None = None,
    *,
    primary: bool = True,
    shared_metrics: Path | None = None,
) -> FastAPI:
    """The app; ``primary=False`` for every worker of ``serve --workers N`` but the first:
    no start-up recovery scan and no webhook dispatcher (``promoter.api.fleet``), whose
    gauges it still exports; ``shared_metrics``: the workers' metrics directory."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = services is None
        app.state.services = services or webhooks.daemon_services(settings)
        state_dir = app.state.services.settings.state_dir
        sweep_state_temps(  # leftovers of a killed writer; a shared directory's kept
            state_dir,
            shared_with=state_sharing.others(
                state_dir,
                app.state.services.owner.host,
                settings.replaces_host,
                app.state.services.db,
            ),
        )
        published_keyring(app.state.services)  # created on first start, into the ledger
        registration = fencing.register(app.state.services)  # its epoch; fenced: no writes
        heartbeat = Heartbeat(
            app.state.services.db,
            app.state.services.owner,
            app.state.services.settings.owner_lease_seconds,
            app.state.services.live.now,  # only operations an attempt still runs
            epoch=None if registration.fenced else registration.epoch,
            state=app.state.services.host,  # the database's state and a fence, in memory
        )
        watchdog = Watchdog(app.state.services)  # no operation left in_progress by a dead attempt
        if not registration.fenced:
            heartbeat.start()
            watchdog.start()
        orphaned = [] if registration.fenced or not primary else scan_orphans(app.state.services)
        if settings.auto_recover and orphaned:
            auto_recover(app.state.services, orphaned)
        if app.state.services.settings.rehearse_at_start:
            rehearse(app.state.services)  # the first promotion finds its statements compiled
        dispatcher = (
            webhooks.start(app.state.services, app.state.metrics.registry) if primary else None
        )
        if not primary and settings.webhooks:  # the queue's gauges, whichever worker answers
            app.state.metrics.registry.register(webhooks.WebhookGauges(app.state.services.db))
        try:
            yield
        finally:
            if dispatcher is not None:
                await dispatcher.stop()
            watchdog.stop()
            heartbeat.stop()
            if app.state.services.runner is not None:
                app.state.services.runner.shutdown()
            if owned:
                app.state.services.close()

    app = FastAPI(
        title="promoter",
        version=__version__,
        summary="The trusted gate that promotes sealed patch bundles into a git worktree.",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served offline by promoter.api.docs
        redoc_url=None,
        separate_input_output_schemas=False,
    )
    problems.install(app)
    openapi.install(app)
    app.include_router(docs.router)
    workers.install(app.state, settings.operator_workers)  # the operator's own threads
    metrics = observe.install(app, shared_metrics)  # outcome lines, lock waits, registry
    # one layer: request id, /healthz, Host, admission of costly reads, access line, metrics
    # (protocol: api#work-bounded-per-caller)
    app.add_middleware(
        FrontDoor,
        recorder=observe.Recorder(metrics),
        hosts=HostAllowlist(settings.host, settings.allowed_hosts),
        admission=Admission(Gate(settings)),  # a costly read, once its Host passed
    )

    # the one-request promotion first: its one literal path, which no other route matches,
    # is found without walking every other router (the hot route of a flow)
    for module in (
        promotions,
        health,
        registry,
        blobs,
        bundles,
        operations,
        hosts,
        keys,
        snapshots,
        trace,
        merge,
        problem_types,
    ):
        app.include_router(module.router)
    app.include_router(review.router)
    app.include_router(events.router)  # the watch feed
    ui.install(app, settings)  # the operator's console at /ui
    return app
