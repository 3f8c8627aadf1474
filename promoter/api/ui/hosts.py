"""The console's hosts page and its fence form.

``/ui/hosts``: every host of the ledger with its epoch, status and host lease
(``promoter.engine.fencing.list_hosts``). A host that is active and whose lease ran out
gets a fence form naming the daemon host to take its operations over (the active hosts);
the post (CSRF-checked, operator session) calls ``fencing.fence`` as the API route does,
with the session's credential as who fenced. A refusal (``host_live``,
``handover_refused``) is shown with its code. Deliberately not here: whether the host
may be fenced (the engine's).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import get_services
from promoter.api.ui.refusals import shown
from promoter.api.ui.web import form_of, render, secure, session_of
from promoter.api.workers import run_in_threadpool
from promoter.engine import fencing

router = APIRouter(prefix="/ui/hosts", include_in_schema=False)


@router.get("")
@shown()
async def get_hosts(request: Request) -> Response:
    session = await session_of(request)
    if session is None:
        return secure(RedirectResponse("/ui/login", status_code=303))
    hosts = await run_in_threadpool(fencing.list_hosts, get_services(request))
    takers = [h.host_id for h in hosts if h.status == "active" and not h.lease_expired]
    return render("hosts.html", 200, session, hosts=hosts, takers=takers)


@router.post("/{host}/fence")
@shown()
async def post_fence(request: Request, host: str) -> Response:
    session, form = await form_of(request)
    services = get_services(request)
    by = session.name or session.role
    await run_in_threadpool(fencing.fence, services.db, host, form.get("to", ""), by=by)
    return secure(RedirectResponse("/ui/hosts", status_code=303))
