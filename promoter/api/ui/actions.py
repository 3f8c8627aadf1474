"""The console's actions: approve, reject, recover, reconcile and roll back an operation.

Every action is a CSRF-checked form post from an operator session (no session: 401; no
or a wrong CSRF token: 403) and calls the same engine function as its API route, with
the operator role: ``operations.decide`` (then waits for the approved attempt, as the
API's ``wait``), ``recover.recover``, ``recover.reconcile``, ``rollback.rollback``.
Whether the operation may move is the engine's guard; a refusal is shown with its code.
On success the browser is sent to the operation's page (303).

Deliberately not here: what the page offers (``operation.html`` shows only the actions
the status allows; the engine refuses the rest anyway).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from promoter.api.deps import get_services
from promoter.api.ui.web import form_of, render, secure
from promoter.engine import operations, recover, rollback
from promoter.engine.services import Services
from promoter.errors import PromoterError, ValidationFailed

router = APIRouter(prefix="/ui/operations/{operation_id}", include_in_schema=False)
WAIT_SECONDS = 600.0
NOTE_LIMIT = 2000


def _note(form: dict[str, str]) -> str:
    note = form.get("note", "")
    if len(note) > NOTE_LIMIT:
        raise ValidationFailed(f"the note must be at most {NOTE_LIMIT} characters")
    return note


def _decide(verdict: str) -> Callable[[Services, str, dict[str, str]], None]:
    def act(services: Services, operation_id: str, form: dict[str, str]) -> None:
        decided = operations.decide(
            services, operation_id, verdict, note=_note(form), by="operator", role="operator"
        )
        if decided.started:
            operations.wait_for(services, operation_id, WAIT_SECONDS)

    return act


def _recover(services: Services, operation_id: str, form: dict[str, str]) -> None:
    fence = form.get("fence", "")
    if not fence.isdigit():
        raise ValidationFailed("the fence must be a whole number")
    recover.recover(services, operation_id, int(fence), role="operator")


def _reconcile(services: Services, operation_id: str, form: dict[str, str]) -> None:
    decision = form.get("decision", "")
    recover.reconcile(services, operation_id, decision, _note(form), role="operator")


def _rollback(services: Services, operation_id: str, form: dict[str, str]) -> None:
    rollback.rollback(services, operation_id, note=_note(form))


ACTIONS: dict[str, Callable[[Services, str, dict[str, str]], None]] = {
    "approve": _decide("approve"),
    "reject": _decide("reject"),
    "recover": _recover,
    "reconcile": _reconcile,
    "rollback": _rollback,
}


@router.post("/{action}")
async def post_action(request: Request, operation_id: str, action: str) -> Response:
    session = None
    try:
        session, form = await form_of(request)
        act = ACTIONS.get(action)
        if act is None:
            return render("error.html", 404, session, code="not_found", detail="no such action")
        await run_in_threadpool(act, get_services(request), operation_id, form)
    except PromoterError as exc:
        return render("error.html", exc.http_status, session, code=exc.code, detail=exc.detail)
    return secure(RedirectResponse(f"/ui/operations/{operation_id}", status_code=303))
