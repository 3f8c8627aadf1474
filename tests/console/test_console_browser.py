"""The console in a real browser: headless Chromium against the real daemon.

Log in, review a held promotion's diff, approve it and see it complete; a bundle whose
path and content carry markup renders as text, with no script run. The hostile-content
test turns the page's CSP off (``bypass_csp``) so that escaping alone is what is tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.console.support import HOSTILE_CONTENT, HOSTILE_PATH, NEW, OLD, held, unreconciled
from tests.gitutil import git
from tests.support.daemon import Daemon
from tests.support.promotion import tree_bytes

Gated = tuple[Daemon, Path, str]


def _log_in(page: Any, daemon: Daemon) -> None:
    page.goto(f"{daemon.url}/ui/login")
    page.fill("input[name=token]", daemon.operator_token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{daemon.url}/ui/operations")


def test_log_in_review_the_diff_approve_and_see_it_complete(gated: Gated, browser: Any) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        assert page.inner_text(f"#operations a[href='/ui/operations/{operation_id}']")
        page.click("text=Review")
        page.wait_for_url(f"{daemon.url}/ui/review")
        held_card = page.locator(f"#held-{operation_id}")
        assert held_card.locator("span.add").all_inner_texts() == ["+print('approved')"]
        assert held_card.locator("span.del").all_inner_texts() == ["-print('v1')"]
        assert (repo / "src" / "app.py").read_bytes() == OLD
        held_card.locator("form:has(button.approve) input[name=note]").fill("looks right")
        held_card.locator("button.approve").click()
        page.wait_for_url(f"{daemon.url}/ui/operations/{operation_id}")
        assert page.inner_text("#status") == "completed"
        assert page.inner_text("#chain .badge") == "verified"
        assert page.locator("#receipts a").count() == 2
    finally:
        context.close()
    assert (repo / "src" / "app.py").read_bytes() == NEW


def test_hostile_path_and_content_render_as_text_and_no_script_runs(
    gated: Gated, browser: Any
) -> None:
    daemon, repo, identity = gated
    operation_id = held(daemon, repo, identity, [(HOSTILE_PATH, None, HOSTILE_CONTENT)])
    before = tree_bytes(repo)
    context = browser.new_context(bypass_csp=True)  # escaping alone must hold
    page = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    try:
        _log_in(page, daemon)
        for url in ("/ui/review", f"/ui/operations/{operation_id}", "/ui/operations"):
            page.goto(f"{daemon.url}{url}")
            assert page.evaluate("typeof window.pwned") == "undefined", url
            assert page.locator("main script, main img").count() == 0, url
        page.goto(f"{daemon.url}/ui/review")
        paths = page.locator(f"#held-{operation_id} code.path").all_inner_texts()
        assert paths == [HOSTILE_PATH]
        added = page.locator(f"#held-{operation_id} span.add").all_inner_texts()
        assert added == ["+" + HOSTILE_CONTENT.decode().rstrip("\n")]
        assert page.evaluate("typeof window.pwned") == "undefined"
    finally:
        context.close()
    assert dialogs == []
    assert tree_bytes(repo) == before


def test_reconcile_a_failed_check_with_rollback(failing: Gated, browser: Any) -> None:
    daemon, repo, identity = failing
    operation_id = unreconciled(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    assert (repo / "src" / "app.py").read_bytes() == NEW
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.select_option("select[name=status]", "needs_reconciliation")
        page.click("form.filters button")
        page.click(f"a[href='/ui/operations/{operation_id}']")
        page.wait_for_url(f"{daemon.url}/ui/operations/{operation_id}")
        assert page.inner_text("#status") == "needs_reconciliation"
        assert page.locator("#current td").nth(1).inner_text() == "new"
        page.select_option("select[name=decision]", "rollback")
        page.fill("#actions input[name=note]", "the check failed")
        page.click("#reconcile")
        page.wait_for_url(f"{daemon.url}/ui/operations/{operation_id}")
        assert page.inner_text("#status") == "rolled_back"
        assert page.locator("#receipts a").count() == 2
    finally:
        context.close()
    assert (repo / "src" / "app.py").read_bytes() == OLD


def test_restore_a_snapshot_in_the_browser(gated: Gated, browser: Any) -> None:
    daemon, repo, _ = gated
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.click("header >> text=Repositories")
        page.click("#repositories >> text=Snapshots")
        page.fill("input[name=label]", "before")
        page.click("#capture")
        (repo / "src" / "app.py").write_bytes(b"print('edited')\n")
        page.fill("input[name=label]", "edited")
        page.click("#capture")
        page.wait_for_selector("#timeline button.restore")
        page.click("#compare")
        page.wait_for_selector("#diff")
        assert page.locator("#diff span.add").all_inner_texts() == []  # newest to newest
        page.select_option("select[name=from]", index=1)
        page.click("#compare")
        assert page.locator("#diff span.add").all_inner_texts() == ["+print('edited')"]
        page.click("#timeline button.restore")
        page.wait_for_selector("#status")
        assert page.inner_text("#status") == "completed"
        assert page.inner_text("h1").startswith("restore")
    finally:
        context.close()
    assert (repo / "src" / "app.py").read_bytes() == OLD


def test_uncheck_files_on_the_review_page_and_only_the_checked_ones_land(
    gated: Gated, browser: Any
) -> None:
    daemon, repo, identity = gated
    changes = [
        ("src/app.py", OLD, NEW),
        ("src/one.py", None, b"one\n"),
        ("src/two.py", None, b"2\n"),
    ]
    operation_id = held(daemon, repo, identity, changes)
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.goto(f"{daemon.url}/ui/review")
        card = page.locator(f"#held-{operation_id}")
        boxes = card.locator("input.accept")
        assert boxes.count() == 3
        assert all(boxes.nth(i).is_checked() for i in range(3))
        card.locator("input.accept[value='src/one.py']").uncheck()
        card.locator("input.accept[value='src/two.py']").uncheck()
        card.locator("button.approve").click()
        page.wait_for_url(f"{daemon.url}/ui/operations/op_*")
        assert operation_id not in page.url
        assert page.inner_text("#status") == "completed"
    finally:
        context.close()
    assert (repo / "src" / "app.py").read_bytes() == NEW
    assert not (repo / "src" / "one.py").exists()
    assert not (repo / "src" / "two.py").exists()
    derived = page.url.rsplit("/", 1)[1]
    with daemon.operator() as operator:
        receipt = operator.get(f"/v1/operations/{derived}/receipt").json()
        parent = operator.get(f"/v1/operations/{operation_id}").json()
    assert receipt["declined_paths"] == ["src/one.py", "src/two.py"]
    assert parent["code"] == "approved_in_part"


TEXT = b"".join(f"line {i}\n".encode() for i in range(1, 31))


def test_uncheck_hunks_on_the_review_page_and_only_the_checked_hunk_lands(
    gated: Gated, browser: Any
) -> None:
    daemon, repo, identity = gated
    (repo / "src" / "text.txt").write_bytes(TEXT)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "text")
    new = (
        TEXT.replace(b"line 2\n", b"line two\n")
        .replace(b"line 15\n", b"line fifteen\n")
        .replace(b"line 28\n", b"line 28\nline 28.5\n")
    )
    operation_id = held(daemon, repo, identity, [("src/text.txt", TEXT, new)])
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.goto(f"{daemon.url}/ui/review")
        card = page.locator(f"#held-{operation_id}")
        assert card.locator("input.hunk").count() == 3
        card.locator("input[name='hunk-0-1']").uncheck()
        card.locator("input[name='hunk-0-3']").uncheck()
        card.locator("button.approve").click()
        page.wait_for_url(f"{daemon.url}/ui/operations/op_*")
        assert page.inner_text("#status") == "completed"
        derived = page.url.rsplit("/", 1)[1]
    finally:
        context.close()
    assert (repo / "src" / "text.txt").read_bytes() == TEXT.replace(b"line 15\n", b"line fifteen\n")
    with daemon.operator() as operator:
        receipt = operator.get(f"/v1/operations/{derived}/receipt").json()
    assert receipt["composed"] == [{"path": "src/text.txt", "hunks": [2], "by": "operator"}]
