"""Headless Chromium for the console's browser tests: Debian's system browser via Playwright.

``chromium_browser`` yields a launched browser, or skips with one printed reason when no
browser (or no Playwright) is present; with ``PROMOTER_REQUIRE_BROWSER=1`` (set by
``.ci/run``) it fails instead, so CI cannot pass with the browser tests skipped. The
browser is never downloaded: it is launched from ``CHROMIUM``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("PROMOTER_CHROMIUM", "/usr/bin/chromium"))


def _missing(reason: str) -> None:
    if os.environ.get("PROMOTER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser tests are required here but {reason}")
    pytest.skip(f"browser tests skipped: {reason}")


def chromium_browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed")
        return
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        _missing(f"no browser at {CHROMIUM} (apt-get install -y chromium)")
        return
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield browser
        finally:
            browser.close()
