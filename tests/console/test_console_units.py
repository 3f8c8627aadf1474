"""Console sessions and cookies without a daemon: expiry, bounds, the Secure flag."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from promoter.api.ui.sessions import MAX_SESSIONS, Sessions, same_token
from promoter.api.ui.web import set_cookie
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
