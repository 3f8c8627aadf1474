"""The console over plain HTTP: sessions, CSRF, headers, role rules and escaping.

Every test drives the real daemon on a loopback port; the pages are read as bytes.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from markupsafe import escape

from promoter.api.ui.actions import ACTIONS
from promoter.api.ui.web import CSP
from promoter.client.wire import tls_context
from promoter.engine.operation import receipts
from tests.console.support import (
    HOSTILE_CONTENT,
    HOSTILE_PATH,
    NEW,
    OLD,
    held,
    hidden,
    login,
    unreconciled,
)
from tests.support.daemon import Daemon
from tests.support.promotion import tree_bytes

Gated = tuple[Daemon, Path, str]


def test_no_session_redirects_pages_to_login(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        for page in ("/ui/operations", "/ui/review", "/ui/operations/op_x"):
            answer = client.get(page)
            assert answer.status_code == 303, page
            assert answer.headers["location"] == "/ui/login"


def test_no_session_post_is_401_and_writes_nothing(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        answer = client.post(f"/ui/operations/{operation_id}/approve", data={"csrf": "x"})
    assert answer.status_code == 401
    assert tree_bytes(repo) == before
    with daemon.operator() as op:
        assert op.get(f"/v1/operations/{operation_id}").json()["status"] == "awaiting_approval"


def test_csrf_less_post_is_refused(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    with login(daemon) as client:
        missing = client.post(f"/ui/operations/{operation_id}/approve", data={"note": "n"})
        wrong = client.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": "forged", "note": "n"}
        )
    assert missing.status_code == 403
    assert wrong.status_code == 403
    assert "CSRF" in missing.text
    assert 'name="csrf"' not in wrong.text  # shown as to no session: no logout form
    assert tree_bytes(repo) == before
    with daemon.operator() as op:
        assert op.get(f"/v1/operations/{operation_id}").json()["status"] == "awaiting_approval"


def test_the_login_page_says_where_the_operator_token_is(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        page = client.get("/ui/login")
    assert page.status_code == 200
    where = daemon.state_dir / "credentials" / "operator.token"
    assert f"<code>{escape(str(where))}</code>" in page.text
    assert "promoter credentials add NAME" in page.text


def test_login_without_its_form_token_is_refused(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        answer = client.post("/ui/login", data={"token": daemon.operator_token})
    assert answer.status_code == 403
    assert "promoter_ui=" not in answer.headers.get("set-cookie", "")


def test_orchestrator_token_cannot_log_in(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        form = client.get("/ui/login")
        answer = client.post(
            "/ui/login", data={"csrf": hidden(form.text), "token": daemon.orchestrator_token}
        )
        assert answer.status_code == 403
        assert "needs the operator token" in answer.text
        assert client.get("/ui/operations").status_code == 303


def test_wrong_token_cannot_log_in(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        form = client.get("/ui/login")
        answer = client.post("/ui/login", data={"csrf": hidden(form.text), "token": "nope"})
    assert answer.status_code == 401


def test_session_cookie_flags_and_security_headers(gated: Gated) -> None:
    daemon, _, _ = gated
    with httpx.Client(base_url=daemon.url, verify=tls_context(daemon.url)) as client:
        form = client.get("/ui/login")
        answer = client.post(
            "/ui/login", data={"csrf": hidden(form.text), "token": daemon.operator_token}
        )
        cookie = next(c for c in answer.headers.get_list("set-cookie") if "promoter_ui=" in c)
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert {"httponly", "samesite=strict", "path=/ui"} <= flags
        assert "secure" not in flags  # plain HTTP on loopback; set under TLS
        assert daemon.operator_token not in answer.text
        page = client.get("/ui/operations")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert "script-src" not in CSP and "default-src 'none'" in CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"


def test_logout_ends_the_session(gated: Gated) -> None:
    daemon, _, _ = gated
    with login(daemon) as client:
        page = client.get("/ui/operations")
        assert client.post("/ui/logout", data={"csrf": hidden(page.text)}).status_code == 303
        assert client.get("/ui/operations").status_code == 303


def test_approve_from_the_console_writes_and_completes(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    with login(daemon) as client:
        review = client.get("/ui/review")
        assert review.status_code == 200
        assert operation_id in review.text
        assert str(escape("+print('approved')")) in review.text
        answer = client.post(
            f"/ui/operations/{operation_id}/approve",
            data={"csrf": hidden(review.text), "note": "looks right"},
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/ui/operations/{operation_id}"
        page = client.get(answer.headers["location"])
        receipt = client.get(f"/ui/operations/{operation_id}/receipt.json")
    assert (repo / "src" / "app.py").read_bytes() == NEW
    assert 'id="status">completed<' in page.text
    assert "verified" in page.text
    with daemon.operator() as op:
        view = op.get(f"/v1/operations/{operation_id}").json()
        api_receipt = op.get(f"/v1/operations/{operation_id}/receipt").content
    assert view["status"] == "completed"
    decision = next(e["payload"] for e in view["events"] if e["kind"] == "decision")
    assert decision["note"] == "looks right"
    assert receipt.status_code == 200
    assert receipt.content == api_receipt


def test_reject_from_the_console_writes_nothing(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{operation_id}")
        answer = client.post(
            f"/ui/operations/{operation_id}/reject",
            data={"csrf": hidden(page.text), "note": "too broad"},
        )
        assert answer.status_code == 303
        after = client.get(f"/ui/operations/{operation_id}")
    assert 'id="status">refused<' in after.text
    assert tree_bytes(repo) == before


def test_a_refused_action_shows_its_code(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{operation_id}")
        answer = client.post(
            f"/ui/operations/{operation_id}/rollback", data={"csrf": hidden(page.text)}
        )
    assert answer.status_code == 409
    assert "<code>" in answer.text


def test_hostile_path_and_content_are_escaped(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [(HOSTILE_PATH, None, HOSTILE_CONTENT)])
    with login(daemon) as client:
        review = client.get("/ui/review").text
        listing = client.get("/ui/operations").text
        page = client.get(f"/ui/operations/{operation_id}").text
    for text in (review, listing, page):
        assert "<script" not in text
        assert "<img" not in text
    assert str(escape(HOSTILE_PATH)) in review
    assert str(escape("+" + HOSTILE_CONTENT.decode().rstrip("\n"))) in review


def test_hostile_status_filter_is_escaped(gated: Gated) -> None:
    daemon, _, _ = gated
    with login(daemon) as client:
        page = client.get("/ui/operations", params={"status": "<script>x</script>"})
    assert page.status_code == 200
    assert "<script" not in page.text


def test_reconcile_abandon_from_the_console_keeps_the_bytes(failing: Gated) -> None:
    daemon, repo, identity = failing
    operation_id = unreconciled(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{operation_id}")
        assert 'value="rollback"' in page.text
        answer = client.post(
            f"/ui/operations/{operation_id}/reconcile",
            data={"csrf": hidden(page.text), "decision": "abandon", "note": "kept by hand"},
        )
        assert answer.status_code == 303
        after = client.get(f"/ui/operations/{operation_id}")
    assert 'id="status">abandoned<' in after.text
    assert (repo / "src" / "app.py").read_bytes() == NEW


def test_rollback_from_the_console_serves_the_rollback_receipt(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    with login(daemon) as client:
        csrf = hidden(client.get("/ui/review").text)
        client.post(f"/ui/operations/{operation_id}/approve", data={"csrf": csrf})
        assert (repo / "src" / "app.py").read_bytes() == NEW
        answer = client.post(f"/ui/operations/{operation_id}/rollback", data={"csrf": csrf})
        assert answer.status_code == 303
        page = client.get(f"/ui/operations/{operation_id}")
        receipt = client.get(f"/ui/operations/{operation_id}/rollback-receipt.json")
        envelope = client.get(f"/ui/operations/{operation_id}/rollback-receipt.dsse")
    assert 'id="status">rolled_back<' in page.text
    assert (repo / "src" / "app.py").read_bytes() == OLD
    assert receipt.content == receipts.rollback_receipt(daemon.services, operation_id)
    assert receipt.headers["content-disposition"].startswith("attachment;")
    with daemon.operator() as op:
        signed = op.get(f"/v1/operations/{operation_id}/rollback-receipt.dsse")
    assert signed.status_code == 200
    assert envelope.content == signed.content


def test_receipt_download_refuses_a_hostile_operation_id(gated: Gated) -> None:
    daemon, _, _ = gated
    with login(daemon) as client:
        answer = client.get('/ui/operations/op_x"%0d%0aSet-Cookie:%20a=b/receipt.json')
        unknown = client.get("/ui/operations/op_" + "0" * 32 + "/receipt.json")
    assert answer.status_code == 404
    assert "set-cookie" not in answer.headers
    assert "content-disposition" not in answer.headers
    assert unknown.status_code == 404
    assert "operation_unknown" in unknown.text


def test_hostile_note_is_escaped_on_the_operation_page(gated: Gated) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    note = "</pre><script>window.pwned=3</script>"
    with login(daemon) as client:
        page = client.get(f"/ui/operations/{operation_id}")
        client.post(
            f"/ui/operations/{operation_id}/reject", data={"csrf": hidden(page.text), "note": note}
        )
        after = client.get(f"/ui/operations/{operation_id}").text
    assert "<script" not in after
    assert "\\u003c/pre\\u003e\\u003cscript\\u003ewindow.pwned=3" in after
    with daemon.operator() as op:
        view = op.get(f"/v1/operations/{operation_id}").json()
    assert [e["payload"]["note"] for e in view["events"] if e["kind"] == "decision"] == [note]


SPOOF_PATH = "src/evil\u202etxt.exe\u200b.py"  # reads "src/evilyp.\u200bexe.txt"


def test_a_name_with_bidi_and_zero_width_characters_cannot_pose_on_the_operation_page(
    gated: Gated,
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [(SPOOF_PATH, None, b"x\n")])
    with login(daemon) as client:
        review = client.get("/ui/review")
        answer = client.post(
            f"/ui/operations/{operation_id}/approve", data={"csrf": hidden(review.text)}
        )
        assert answer.status_code == 303, answer.text
        page = client.get(f"/ui/operations/{operation_id}").text
    assert (repo / SPOOF_PATH).read_bytes() == b"x\n"
    assert "\u202e" not in page and "\u200b" not in page
    shown = '<code class="path">src/evil&lt;U+202E&gt;txt.exe&lt;U+200B&gt;.py</code>'
    steps = page[page.index('<table id="steps">') : page.index("<h3>Now (read back)</h3>")]
    current = page[page.index('<table id="current">') :]
    assert steps.count(shown) == 1 and current.count(shown) == 1


# Every form of the console (a POST route under /ui but the login, each action of the
# operation's page its own) and the fields its page posts besides the CSRF token. A form
# without an entry fails ``test_every_console_form_is_in_the_csrf_tests``: a new one is
# added here, and so is posted by the cross-site test.
FORMS: dict[str, dict[str, str]] = {
    "/ui/logout": {},
    "/ui/operations/{operation_id}/approve": {"note": "n", "all_seen": "on"},
    "/ui/operations/{operation_id}/reject": {"note": "n"},
    "/ui/operations/{operation_id}/reopen": {"note": "n"},
    "/ui/operations/{operation_id}/recover": {"fence": "7"},
    "/ui/operations/{operation_id}/reconcile": {"decision": "continue", "note": "n"},
    "/ui/operations/{operation_id}/rollback": {"note": "n"},
    "/ui/operations/{operation_id}/merge": {},
    "/ui/repositories/{name}/snapshots": {"label": "x"},
    "/ui/repositories/{name}/snapshots/{tree}/restore": {"expected_current_tree": "0" * 40},
    "/ui/hosts/{host}/fence": {"to": "host-a"},
}


def _form_posts(app: FastAPI) -> list[str]:
    """Every state-changing route of the console but the login, as a path to post to:
    read from the app's routes (a new form is posted too), the operation page's actions
    each their own path."""
    posts: list[str] = []
    for route in iter_route_contexts(app.routes):
        template = route.path or ""
        if not isinstance(route.original_route, APIRoute) or not template.startswith("/ui/"):
            continue
        if "POST" in (route.methods or ()) and template != "/ui/login":
            posts.append(template)
    assert "/ui/operations/{operation_id}/{action}" in posts  # the table is read, not copied
    expanded = [p for p in posts if "{action}" not in p]
    expanded += [f"/ui/operations/{{operation_id}}/{action}" for action in sorted(ACTIONS)]
    return expanded


def test_every_console_form_is_in_the_csrf_tests(gated: Gated) -> None:
    """Each form the app serves has its entry in ``FORMS`` (and each entry is a form it
    serves): a form added without one fails here, so none escapes the cross-site test."""
    daemon, _, _ = gated
    posts = _form_posts(daemon.app)
    assert len(posts) == len(set(posts))
    assert sorted(set(posts) - set(FORMS)) == []  # a form the CSRF tests do not post
    assert sorted(set(FORMS) - set(posts)) == []  # an entry for no form


@pytest.mark.parametrize("forged", ["missing", "wrong", "login_nonce"])
def test_a_cross_site_form_post_without_the_sessions_csrf_token_changes_nothing(
    gated: Gated, forged: str
) -> None:
    """A page elsewhere makes the operator's browser post each of the console's forms
    with the session's cookie but not its CSRF token (none, a guess, or the login form's
    nonce): each is 403, the operation still held, the worktree and the snapshots as they
    were, and the session still open (logout too is refused)."""
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    before = tree_bytes(repo)
    fill = {"operation_id": operation_id, "host": "host-a", "name": "gated", "tree": "0" * 40}
    with login(daemon) as client:
        nonce = hidden(client.get("/ui/login").text)
        snapshots = client.get("/ui/repositories/gated/snapshots").text
        token = {"missing": None, "wrong": "forged", "login_nonce": nonce}[forged]
        for path in _form_posts(daemon.app):
            data = dict(FORMS[path])
            if token is not None:
                data["csrf"] = token
            answer = client.post(path.format(**fill), data=data, headers={"Origin": "https://evil"})
            assert answer.status_code == 403, (path, answer.text)
            assert "promoter_ui=" not in answer.headers.get("set-cookie", ""), path
        assert client.get("/ui/operations").status_code == 200  # still logged in
        assert client.get("/ui/repositories/gated/snapshots").text == snapshots
    assert tree_bytes(repo) == before
    with daemon.operator() as op:
        assert op.get(f"/v1/operations/{operation_id}").json()["status"] == "awaiting_approval"
