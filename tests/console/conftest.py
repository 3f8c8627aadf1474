"""A headless browser, and a daemon whose check always fails (the suite's ``gated`` one
awaits the operator's approval), one of ``BASE`` for the drift pages, and a migrated
ledger of the test's own for the session table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.config import RepositoryConfig
from promoter.store.db import Database, upgrade
from tests.console.browser import chromium_browser
from tests.console.support import BASE
from tests.support.daemon import Daemon
from tests.support.databases import own_url
from tests.support.fixtures import Serve
from tests.support.repos import Repos


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium, or a skip (a failure under PROMOTER_REQUIRE_BROWSER=1)."""
    yield from chromium_browser()


@pytest.fixture
def work(repos: Repos, serve: Serve) -> tuple[Daemon, Path]:
    """``work`` with ``src/app.py`` at ``BASE``, and its daemon."""
    repo = repos(files={"src/app.py": BASE})
    return serve({"work": repo}), repo


@pytest.fixture
def failing(repos: Repos, serve: Serve) -> tuple[Daemon, Path, str]:
    """A repository whose check always fails: a promotion ends ``needs_reconciliation``."""
    repo = repos("failing")
    daemon = serve({"failing": RepositoryConfig(path=repo, check_command=["false"])}, "fstate")
    return daemon, repo, daemon.services.registry.by_name("failing").identity


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Database]:
    """A migrated ledger of the test's own (SQLite, or PostgreSQL in its pass)."""
    url = own_url(tmp_path, "sessions.db")
    upgrade(url)
    database = Database(url, 5.0)
    try:
        yield database
    finally:
        database.dispose()
