"""A daemon guarding one repository whose every promotion awaits the operator's approval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.config import RepositoryConfig
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Daemon, Path, str]]:
    repo = init_repo(tmp_path / "gated")
    config = RepositoryConfig(path=repo, approval="required")
    with running_daemon(tmp_path / "gstate", {"gated": config}) as daemon:
        yield daemon, repo, daemon.services.registry.by_name("gated").identity
