"""The console's HTTP plumbing: templates, security headers, sessions and CSRF on forms.

``render`` fills a Jinja2 template (autoescape always on: paths, diff lines and notes are
attacker-controlled; the ``shown`` filter writes every bidirectional, invisible or control
character of a name or a text as ``<U+XXXX>``, so a name cannot pose as another one,
protocol: api#what-a-review-shows) and sets the headers every ``/ui`` page carries: a
strict Content-Security-Policy that admits no script at all, ``nosniff``, no framing, no
referrer, no caching. ``session_of`` reads the session cookie and checks that its
credential still exists (removing a credential ends its sessions); ``form_of`` reads a small
URL-encoded form and refuses it (403) unless its ``csrf`` field is the session's token
(401 without a session, saying so when its credential's removal ended it);
``answering`` is the session either accepted, to which a refusal's page is shown.
``set_session_cookie`` writes the cookie ``HttpOnly``, ``SameSite=Strict``, scoped to
``/ui`` and ``Secure`` when the request came over TLS.

Deliberately not here: pages and engine calls (``promoter.api.ui.pages``) and who may log
in (``promoter.api.ui.login``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader

from promoter.api.deps import SMALL_BODY, get_services, read_body
from promoter.api.ui.sessions import COOKIE, REVOKED, Session, Sessions, same_token
from promoter.api.workers import run_on_operator_pool, use_operator_pool
from promoter.domain.hidden import visible
from promoter.errors import Forbidden, Unauthenticated

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _shown(value: object) -> str:
    """``value`` with nothing hidden in it, as the review shows a path (None: nothing)."""
    return "" if value is None else visible(str(value))


TEMPLATES.filters["shown"] = _shown
MAX_FIELDS = 4096  # a review's approve form: a box per file (the body is at most 64 KiB)


def secure(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response


def render(
    template: str, status_code: int = 200, session: Session | None = None, /, **context: Any
) -> Response:
    html = TEMPLATES.get_template(template).render(session=session, **context)
    return secure(HTMLResponse(html, status_code=status_code))


def sessions(request: Request) -> Sessions:
    """The console's sessions, in the ledger of the app's services (made on first use:
    the services may start with the app)."""
    state = request.app.state
    table: Sessions | None = getattr(state, "ui_sessions", None)
    if table is None:
        services = get_services(request)
        table = state.ui_sessions = Sessions(
            services.db,
            idle_seconds=services.settings.console_session_idle_seconds,
            lifetime_seconds=services.settings.console_session_lifetime_seconds,
        )
    return table


async def session_of(request: Request) -> Session | None:
    """The request's live session, or None: none, ended, or its credential removed since.

    The session and its credential are read from the ledger in one hop to the operator's
    worker threads (``promoter.api.workers``) before every use; a session whose
    credential is gone or was replaced is ended with every other session of that name. A
    live session's request goes on on the operator's threads. A page's refusal is shown
    to it (``answering``).
    """
    session = await _session(request)
    request.state.console_session = session
    return session


def answering(request: Request) -> Session | None:
    """The session a refusal's page is shown to: the page's, or the form's once its CSRF
    token matched; None before (``promoter.api.ui.refusals``)."""
    session: Session | None = getattr(request.state, "console_session", None)
    return session


async def _session(request: Request) -> Session | None:
    state = request.app.state
    session = await run_on_operator_pool(
        state,
        _live_session,
        sessions(request),
        get_services(request).auth.credential_live,
        request.cookies.get(COOKIE),
    )
    if session is not None:
        use_operator_pool(state)
    return session


def _live_session(
    table: Sessions, credential_live: Callable[[str, str], bool], session_id: str | None
) -> Session | None:
    session = table.get(session_id)
    if session is None:
        return None
    if not credential_live(session.name, session.credential):
        table.end_credential(session.name)
        return None
    return session


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name, value, path="/ui", httponly=True, samesite="strict", secure=is_tls(request)
    )


async def read_form(request: Request) -> dict[str, str]:
    """A small URL-encoded form, one value per field (the last one wins)."""
    body = await read_body(request, SMALL_BODY)
    try:
        text = bytes(body).decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {key: values[-1] for key, values in fields.items()}


async def form_of(request: Request) -> tuple[Session, dict[str, str]]:
    """The session and form of a state-changing post: 401 without session, 403 without CSRF."""
    session = await _session(request)
    if session is None:
        why = await run_on_operator_pool(
            request.app.state, sessions(request).ended_why, request.cookies.get(COOKIE)
        )
        if why == REVOKED:  # said only to the browser holding that session's id
            raise Unauthenticated(
                "your session ended because its credential was revoked; log in again"
            )
        raise Unauthenticated("log in to the console first")
    form = await read_form(request)
    if not same_token(session.csrf, form.get("csrf")):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page")
    request.state.console_session = session
    return session, form
