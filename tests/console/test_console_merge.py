"""The console's Merge button in a real browser: headless Chromium against the real daemon.

A promotion refused because the person edited its file shows a Merge button; a clean
merge lands on the held promotion of the new bundle, whose approval writes the merged
bytes (the person's edit kept); a conflicted merge shows the merged text with its
markers and writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.console.support import AGENT, BASE, PERSON
from tests.support.daemon import Daemon
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

CLASH = BASE.replace(b"line 2\n", b"line 2 by the person\n")


def _drifted(daemon: Daemon, repo: Path, person: bytes) -> str:
    identity = daemon.services.registry.by_name("work").identity
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", BASE, AGENT)])
    (repo / "src" / "app.py").write_bytes(person)
    view = promote(daemon, bundle, receipt).json()
    assert (view["status"], view["code"]) == ("refused", "target_drift")
    return str(view["operation_id"])


def _log_in(page: Any, daemon: Daemon) -> None:
    page.goto(f"{daemon.url}/ui/login")
    page.fill("input[name=token]", daemon.operator_token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{daemon.url}/ui/operations")


def test_merge_button_holds_the_merged_bundle_and_approval_writes_it(
    work: tuple[Daemon, Path], browser: Any
) -> None:
    daemon, repo = work
    operation_id = _drifted(daemon, repo, PERSON)
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.goto(f"{daemon.url}/ui/operations/{operation_id}")
        assert (repo / "src" / "app.py").read_bytes() == PERSON
        page.click("button#merge")
        page.wait_for_url(lambda url: "/ui/operations/op_" in url and operation_id not in url)
        assert page.inner_text("#status") == "awaiting_approval"
        assert (repo / "src" / "app.py").read_bytes() == PERSON  # nothing before approval
        page.locator("form:has(button#approve) input[name=note]").fill("merged by hand")
        page.click("button#approve")
        page.wait_for_load_state()
        assert page.inner_text("#status") == "completed"
        held = page.url.rsplit("/", 1)[1]
        page.goto(f"{daemon.url}/ui/operations/{operation_id}")
        assert page.inner_text("#merged") == f"Merged: operation {held} (completed)."
        assert page.locator("button#merge").count() == 0
    finally:
        context.close()
    assert (repo / "src" / "app.py").read_bytes() == BASE.replace(
        b"line 2\n", b"line 2 by the agent\n"
    ).replace(b"line 11\n", b"line 11 by the person\n")


def test_conflicted_merge_shows_the_markers_and_writes_nothing(
    work: tuple[Daemon, Path], browser: Any
) -> None:
    daemon, repo = work
    operation_id = _drifted(daemon, repo, CLASH)
    before, git_before = tree_bytes(repo), git_dir_digest(repo)
    context = browser.new_context()
    page = context.new_page()
    try:
        _log_in(page, daemon)
        page.goto(f"{daemon.url}/ui/operations/{operation_id}")
        page.click("button#merge")
        page.wait_for_selector("#conflict-1")
        assert "merge_conflict" in page.inner_text("h1")
        assert page.inner_text("#conflict-1") == (
            "line 1\n<<<<<<< yours\nline 2 by the person\n=======\nline 2 by the agent\n"
            ">>>>>>> agent\n" + "".join(f"line {n}\n" for n in range(3, 13))
        )
    finally:
        context.close()
    assert (tree_bytes(repo), git_dir_digest(repo)) == (before, git_before)
