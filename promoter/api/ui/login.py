"""Console login and logout: the operator token exchanged for a session cookie.

``GET /ui/login`` shows the form with a fresh double-submit token (also set as a
cookie), and, to a browser whose own session cookie names a session ended by its
credential's removal, why it is there (``REVOKED``; nothing for any other cookie);
``POST /ui/login`` checks that token, authenticates the pasted token exactly as the API
does (``services.auth``) and admits the operator role only, the role every console page
needs, then sets the session cookie; the session remembers the credential's
name, which its approvals and rejections record as the approver, and its token's sha256,
so removing or replacing the credential ends the session. ``POST /ui/logout`` (CSRF-checked)
drops the session. The token is never stored, logged or echoed back.

A refusal that is not the token's (the ledger busy or not answering, while the cookie's
session is looked up, the token's credential read or the session stored) is the form
again with that error's status, code, detail and ``Retry-After`` (``_not_now``): the
person learns the database does not answer, never that the token is wrong. A token that
fails is only ever "not valid", whatever the reason.

Fault point: ``console_session_open`` (in the operator's thread, after the token was
authenticated and before its session is stored): a removal of the credential in that
window leaves a session that its first use refuses (``promoter.api.ui.web``).

Deliberately not here: the pages themselves (``promoter.api.ui.pages``).
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from promoter.api.deps import authenticate, get_services
from promoter.api.ui.refusals import Page, shown, with_retry_after
from promoter.api.ui.sessions import (
    COOKIE,
    LOGIN_COOKIE,
    REVOKED,
    Session,
    Sessions,
    same_token,
)
from promoter.api.ui.web import (
    form_of,
    read_form,
    render,
    secure,
    sessions,
    set_cookie,
)
from promoter.api.workers import run_on_operator_pool
from promoter.errors import PromoterError
from promoter.faults import point
from promoter.store.credentials import token_sha256

router = APIRouter(prefix="/ui", include_in_schema=False)
ENDED_REVOKED = "Your session ended because its credential was revoked. Log in again."


def _form(
    request: Request,
    status_code: int = 200,
    message: str = "",
    problem: PromoterError | None = None,
) -> Response:
    nonce = secrets.token_urlsafe(32)
    # where the person finds a token: the daemon's own operator token, on this machine
    where = get_services(request).settings.credentials_dir / "operator.token"
    response = render(
        "login.html", status_code, nonce=nonce, message=message, where=str(where), problem=problem
    )
    set_cookie(request, response, LOGIN_COOKIE, nonce)
    return response


def _not_now(request: Request, exc: PromoterError) -> Response:
    """The form again, saying what kept the login from being looked at or made."""
    return with_retry_after(_form(request, exc.http_status, problem=exc), exc)


@router.get("/login")
@shown(Page(PromoterError, _not_now))
async def get_login(request: Request) -> Response:
    cookie = request.cookies.get(COOKIE)
    why = None
    if cookie:  # only this browser's own session: its id is the secret that finds the mark
        why = await run_on_operator_pool(request.app.state, sessions(request).ended_why, cookie)
    return _form(request, message=ENDED_REVOKED if why == REVOKED else "")


@router.post("/login")
@shown(Page(PromoterError, _not_now))
async def post_login(request: Request) -> Response:
    form = await read_form(request)
    if not same_token(request.cookies.get(LOGIN_COOKIE, ""), form.get("csrf")):
        return _form(request, 403, "The form expired or was not sent from this page; try again.")
    token = form.get("token", "").strip()
    services = get_services(request)
    try:
        principal = await authenticate(request.app.state, services, token)
    except PromoterError as exc:  # whatever the reason, the form never says why a token failed
        if exc.http_status >= 500:  # the ledger's, not the token's: said as it is
            raise
        return _form(request, 401, "That token is not valid.")
    if principal.role != "operator":
        return _form(request, 403, "The console needs the operator token.")
    session = await run_on_operator_pool(
        request.app.state,
        _open,
        sessions(request),
        principal.role,
        principal.name,
        token_sha256(token),
    )
    response = secure(RedirectResponse("/ui/operations", status_code=303))
    set_cookie(request, response, COOKIE, session.session_id)
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


def _open(table: Sessions, role: str, name: str, credential_sha256: str) -> Session:
    point("console_session_open")
    return table.open(role, name, credential_sha256)


@router.post("/logout")
@shown()
async def post_logout(request: Request) -> Response:
    session, _ = await form_of(request)
    await run_on_operator_pool(request.app.state, sessions(request).close, session.session_id)
    response = secure(RedirectResponse("/ui/login", status_code=303))
    response.delete_cookie(COOKIE, path="/ui")
    return response
