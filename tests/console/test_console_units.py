"""Console sessions, cookies and refusals without a daemon: expiry, bounds, the Secure
flag, every route's refusals through one translation."""

from __future__ import annotations

import inspect
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.testclient import TestClient

from promoter.api.app import create_app
from promoter.api.ui.refusals import SHOWN, shown
from promoter.api.ui.sessions import MAX_SESSIONS, Sessions, same_token
from promoter.api.ui.web import CSP, set_cookie
from promoter.config import load_settings
from promoter.errors import DatabaseBusy, DatabaseUnavailable, PromoterError, TooManyRequests
from promoter.store.db import Database


def _request(scheme: str) -> Request:
    scope = {
        "type": "http",
        "scheme": scheme,
        "method": "GET",
        "path": "/ui/login",
        "headers": [],
        "query_string": b"",
        "server": ("127.0.0.1", 443),
    }
    return Request(scope)


def test_session_cookie_is_secure_over_tls_only() -> None:
    for scheme, secure in (("https", True), ("http", False)):
        response = Response()
        set_cookie(_request(scheme), response, "promoter_ui", "v")
        flags = {p.strip().lower() for p in response.headers["set-cookie"].split(";")}
        assert ("secure" in flags) is secure, scheme
        assert {"httponly", "samesite=strict", "path=/ui"} <= flags


def test_an_idle_session_ends_and_a_used_one_stays(ledger: Database) -> None:
    now = [0.0]
    table = Sessions(ledger, clock=lambda: now[0], idle_seconds=100.0)
    used, idle = table.open("operator"), table.open("operator")
    now[0] = 60.0
    assert table.get(used.session_id) is not None
    now[0] = 120.0
    assert table.get(used.session_id) is not None  # 60 s since its last use
    assert table.get(idle.session_id) is None
    assert table.get(idle.session_id) is None


def test_session_table_is_bounded_and_forged_ids_match_nothing(ledger: Database) -> None:
    ticks = iter(range(10**6))
    table = Sessions(ledger, clock=lambda: 1000.0 + next(ticks))
    first = table.open("operator")
    for _ in range(MAX_SESSIONS):
        table.open("operator")
    assert table.get(first.session_id) is None
    assert table.get("") is None
    assert table.get(first.session_id[:-1]) is None
    assert not same_token("abc", None)
    assert not same_token("abc", "")
    assert same_token("abc", "abc")


def test_every_console_route_shows_its_refusals_through_one_translation(tmp_path: Path) -> None:
    """Every console route the app serves (read from the app's routes, so a new module's
    route is in it too) is declared ``shown``: its refusals become the console's page. The
    app is built, not started: nothing opens the ledger."""
    app = create_app(load_settings(None, state_dir=tmp_path / "state", repositories={}))
    routes = [
        route.original_route
        for route in iter_route_contexts(app.routes)
        if isinstance(route.original_route, APIRoute)
        and (route.path == "/ui" or (route.path or "").startswith("/ui/"))
    ]
    assert len(routes) >= 17  # the login, the pages, the forms, the merge, the hosts
    elsewhere = [
        route.path
        for route in iter_route_contexts(app.routes)
        if isinstance(route.original_route, APIRoute)
        and route.original_route.endpoint.__module__.startswith("promoter.api.ui")
        and route.original_route not in routes
    ]
    assert elsewhere == []  # a console module's route outside /ui would escape the rest
    unshown = [
        (route.path, sorted(route.methods)) for route in routes if route.endpoint not in SHOWN
    ]
    # the one that only redirects: nothing in it refuses (the login form reads the ledger)
    assert unshown == [("/ui", ["GET"])]
    assert not any(
        inspect.iscoroutinefunction(r.endpoint) for r in routes if r.endpoint not in SHOWN
    )


class _Invented(PromoterError):
    code = "invented_here"
    http_status = 409
    title = "A refusal no console module names"


def test_a_new_refusal_code_is_shown_with_its_status_code_and_detail() -> None:
    app = FastAPI()

    @app.get("/ui/refuses")
    @shown()
    async def refuses(request: Request) -> Response:
        raise _Invented("what the person reads", operation_id="op_1")

    with TestClient(app) as client:
        answer = client.get("/ui/refuses")
    assert answer.status_code == 409
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-security-policy"] == CSP
    assert "<code>invented_here</code>: what the person reads</p>" in answer.text
    assert 'name="csrf"' not in answer.text  # no session was proved: no logout form


def test_a_refusal_to_retry_keeps_its_retry_after_on_the_page() -> None:
    app = FastAPI()

    @app.get("/ui/unavailable")
    @shown()
    async def unavailable(request: Request) -> Response:
        raise DatabaseUnavailable("the ledger does not answer")

    @app.get("/ui/busy")
    @shown()
    async def busy(request: Request) -> Response:
        raise TooManyRequests("too many at once", retry_after=7)

    with TestClient(app) as client:
        down, flood = client.get("/ui/unavailable"), client.get("/ui/busy")
    assert (down.status_code, down.headers["retry-after"]) == (503, "2")
    assert (flood.status_code, flood.headers["retry-after"]) == (429, "7")


def test_a_database_outage_s_page_says_unavailable_for_now_not_refused() -> None:
    """A 503 (the database not answering, or locked past its bound) is headed as a service
    unavailable for now, in the heading and the title; a refusal of the request keeps
    "Refused"."""
    app = FastAPI()
    raised: list[PromoterError] = [
        DatabaseUnavailable("the ledger does not answer"),
        DatabaseBusy("the ledger stayed locked"),
        _Invented("what the person reads"),
    ]

    @app.get("/ui/refuses/{index}")
    @shown()
    async def refuses(request: Request, index: int) -> Response:
        raise raised[index]

    with TestClient(app) as client:
        down, busy, refused = (client.get(f"/ui/refuses/{i}") for i in range(3))
    for page in (down, busy):
        assert page.status_code == 503
        assert "<title>Unavailable for now · promoter console</title>" in page.text
        assert "<h1>Unavailable for now</h1>" in page.text
        assert "Refused" not in page.text
    assert "<code>database_busy</code>: the ledger stayed locked</p>" in busy.text
    assert refused.status_code == 409
    assert "<title>Refused · promoter console</title>" in refused.text
    assert "<h1>Refused</h1>" in refused.text
