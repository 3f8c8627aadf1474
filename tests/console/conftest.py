"""A daemon whose every promotion awaits the operator's approval, and a headless browser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.config import RepositoryConfig
from tests.console.browser import chromium_browser
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Daemon, Path, str]]:
    repo = init_repo(tmp_path / "gated")
    config = RepositoryConfig(path=repo, approval="required")
    with running_daemon(tmp_path / "gstate", {"gated": config}) as daemon:
        yield daemon, repo, daemon.services.registry.by_name("gated").identity


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium, or a skip (a failure under PROMOTER_REQUIRE_BROWSER=1)."""
    yield from chromium_browser()


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[tuple[Daemon, Path, str]]:
    """A repository whose check always fails: a promotion ends ``needs_reconciliation``."""
    repo = init_repo(tmp_path / "failing")
    config = RepositoryConfig(path=repo, check_command=["false"])
    with running_daemon(tmp_path / "fstate", {"failing": config}) as daemon:
        yield daemon, repo, daemon.services.registry.by_name("failing").identity
