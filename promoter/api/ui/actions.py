"""The console's actions: approve, reject, reopen, recover, reconcile, roll back an operation.

Every action is a CSRF-checked form post from an operator session (no session: 401; no
or a wrong CSRF token: 403) and calls the same engine function as its API route, with
the operator role: ``decisions.decide`` (then waits for the approved attempt, as the
API's ``wait``; the review page's unchecked files make it accept a part, and the browser
is sent to the derived operation), ``decisions.reopen``, ``recover.recover``,
``recover.reconcile``, ``rollback.rollback``. A decision records the session's credential
as the approver; the form asks for a note only. An approval carries what the person saw
beyond the review page, which showed the console's page of the diff: the ticked
``seen-N`` boxes and ``all_seen``; a file of that page not shown in full and left
unticked refuses it (``diff_not_seen``, ``promoter.engine.review.seen``).
Whether the operation may move is the engine's guard; a refusal is shown with its code
(``promoter.api.ui.refusals``).
On success the browser is sent to the operation's page (303).

Deliberately not here: what the page offers (``operation.html`` shows only the actions
the status allows; the engine refuses the rest anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import get_services
from promoter.api.ui.diffview import page_bytes
from promoter.api.ui.refusals import shown
from promoter.api.ui.sessions import Session
from promoter.api.ui.web import form_of, render, secure
from promoter.api.workers import run_in_threadpool
from promoter.engine.operation import decisions, recover, rollback, runner
from promoter.engine.ports import (
    Attempting,
    Configured,
    Journaling,
    Placing,
    Promoting,
    Reconciling,
)
from promoter.engine.review.partial import Selection
from promoter.engine.review.seen import Seen
from promoter.engine.services import Services
from promoter.errors import ValidationFailed

router = APIRouter(prefix="/ui/operations/{operation_id}", include_in_schema=False)
WAIT_SECONDS = 600.0
NOTE_LIMIT = 2000


def _note(form: dict[str, str]) -> str:
    note = form.get("note", "")
    if len(note) > NOTE_LIMIT:
        raise ValidationFailed(f"the note must be at most {NOTE_LIMIT} characters")
    return note


Action = Callable[[Services, Session, str, dict[str, str]], str | None]


def _hunks(form: dict[str, str], accepted: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Per accepted file offered hunk by hunk (``hunkpath-I``, ``hunkcount-I``), the hunks
    checked (``hunk-I-N``), when some are not."""
    chosen: dict[str, tuple[int, ...]] = {}
    for key, path in form.items():
        index = key.removeprefix("hunkpath-")
        count = form.get(f"hunkcount-{index}", "")
        if key == index or not count.isdigit() or path not in accepted:
            continue
        checked = tuple(n for n in range(1, int(count) + 1) if f"hunk-{index}-{n}" in form)
        if len(checked) < int(count):
            chosen[path] = checked
    return chosen


def _selection(form: dict[str, str]) -> Selection | None:
    """The review page's checkboxes (``accept-N``, ``files`` of them shown; hunks): a part
    when some are unchecked, None when all are."""
    shown = form.get("files", "")
    if not shown.isdigit():
        return None
    accepted = tuple(v for k, v in form.items() if k.startswith("accept-"))
    hunks = _hunks(form, accepted)
    if len(accepted) == int(shown):
        return Selection(hunks=hunks) if hunks else None
    return Selection(only=accepted, hunks=hunks)


def _seen(services: Configured, form: dict[str, str]) -> Seen:
    """The review page's ``seen-N`` ticks and ``all_seen``, at the console's page."""
    ticked = tuple(v for k, v in form.items() if k.startswith("seen-"))
    return Seen("all_seen" in form, ticked, page_bytes(services.settings))


def _decide(verdict: str) -> Action:
    def act(
        services: Promoting, session: Session, operation_id: str, form: dict[str, str]
    ) -> str | None:
        decided = decisions.decide(
            services,
            operation_id,
            verdict,
            note=_note(form),
            by=session.name,
            role=session.role,
            selection=_selection(form) if verdict == "approve" else None,
            seen=_seen(services, form) if verdict == "approve" else None,
        )
        if decided.started:
            runner.wait_for(services, decided.operation_id, WAIT_SECONDS)
        return decided.operation_id  # the derived operation when a part was accepted

    return act


def _reopen(
    services: Journaling, session: Session, operation_id: str, form: dict[str, str]
) -> str | None:
    decisions.reopen(services, operation_id, note=_note(form), by=session.name, role=session.role)
    return None


def _recover(
    services: Attempting, _: Session, operation_id: str, form: dict[str, str]
) -> str | None:
    fence = form.get("fence", "")
    if not fence.isdigit():
        raise ValidationFailed("the fence must be a whole number")
    recover.recover(services, operation_id, int(fence), role="operator")
    return None


def _reconcile(
    services: Reconciling, _: Session, operation_id: str, form: dict[str, str]
) -> str | None:
    decision = form.get("decision", "")
    recover.reconcile(services, operation_id, decision, _note(form), role="operator")
    return None


def _rollback(services: Placing, _: Session, operation_id: str, form: dict[str, str]) -> str | None:
    rollback.rollback(services, operation_id, note=_note(form))
    return None


ACTIONS: dict[str, Action] = {
    "approve": _decide("approve"),
    "reject": _decide("reject"),
    "reopen": _reopen,
    "recover": _recover,
    "reconcile": _reconcile,
    "rollback": _rollback,
}


@router.post("/{action}")
@shown()
async def post_action(request: Request, operation_id: str, action: str) -> Response:
    session, form = await form_of(request)
    act = ACTIONS.get(action)
    if act is None:
        return render("error.html", 404, session, code="not_found", detail="no such action")
    moved = await run_in_threadpool(act, get_services(request), session, operation_id, form)
    target = quote(moved or operation_id, safe="")
    return secure(RedirectResponse(f"/ui/operations/{target}", status_code=303))
