"""The operator's web console at ``/ui``: server-rendered pages over the engine.

``install(app)`` adds the console's routers (login, pages, actions, the merge,
repositories and snapshots, hosts) and serves ``/ui/static`` (one stylesheet; no
script); its sessions are in the ledger (``promoter.api.ui.sessions``). Every route is
HTML and left out of the OpenAPI contract.

Deliberately not here: any decision; the console calls the same engine functions as the
API routes and the engine's guard decides.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from promoter.api.ui import actions, hosts, login, merge, pages, repositories
from promoter.config import Settings


def install(app: FastAPI, settings: Settings) -> None:
    app.state.ui_sessions = None  # made from the services' ledger on first use
    static = StaticFiles(directory=Path(__file__).parent / "static")
    app.mount("/ui/static", static, name="ui-static")
    for module in (login, merge, actions, pages, repositories, hosts):  # merge before /{action}
        app.include_router(module.router)
