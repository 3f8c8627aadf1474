"""The README's console screenshots, from a demo run against a real daemon.

``python -m tests.console.screenshots docs/console`` starts a daemon on a scratch
repository whose promotions await approval, holds one promotion, completes another,
captures two snapshots, and saves PNGs of the main pages, taken by Debian's headless
Chromium through Playwright. Nothing here is a test; it shares the tests' real-daemon
helpers.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from promoter.config import RepositoryConfig
from tests.console.browser import CHROMIUM
from tests.console.support import OLD, held
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo

PAGES = {
    "review.png": "/ui/review",
    "operations.png": "/ui/operations",
    "repositories.png": "/ui/repositories",
}


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        repo = init_repo(root / "demo")
        config = RepositoryConfig(path=repo, approval="required")
        with running_daemon(root / "state", {"demo": config}) as daemon:
            identity = daemon.services.registry.by_name("demo").identity
            first = held(daemon, repo, identity, [("src/app.py", OLD, b"print('v2')\n")])
            with daemon.operator() as op:
                op.post(f"/v1/operations/{first}/approve", json={"note": "ok", "wait": True})
                op.post("/v1/repositories/demo/snapshots", json={"label": "after v2"})
            (repo / "notes.txt").write_bytes(b"the user's own notes\n")
            changes = [
                ("README.md", b"# project\n", b"# project\n\nNow with a helper module.\n"),
                ("src/new.py", None, b"def added():\n    return 1\n"),
            ]
            held(daemon, repo, identity, changes, grant_id="grt_test2", workflow_id="wf_2")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
                page = browser.new_page(viewport={"width": 1200, "height": 800})
                page.goto(f"{daemon.url}/ui/login")
                page.screenshot(path=str(out / "login.png"))
                page.fill("input[name=token]", daemon.operator_token)
                page.click("button[type=submit]")
                for name, url in PAGES.items():
                    page.goto(f"{daemon.url}{url}")
                    page.screenshot(path=str(out / name), full_page=True)
                page.goto(f"{daemon.url}/ui/operations/{first}")
                page.screenshot(path=str(out / "operation.png"), full_page=True)
                page.goto(f"{daemon.url}/ui/repositories/demo/snapshots")
                page.screenshot(path=str(out / "snapshots.png"), full_page=True)
                browser.close()
    print(f"screenshots written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console")))
