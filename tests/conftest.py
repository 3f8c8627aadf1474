"""Shared fixtures: a real repository and a real daemon guarding it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "work")


@pytest.fixture
def daemon(tmp_path: Path, repo: Path) -> Iterator[Daemon]:
    with running_daemon(tmp_path / "state", {"work": repo}) as running:
        yield running


@pytest.fixture
def identity(daemon: Daemon) -> str:
    return daemon.services.registry.by_name("work").identity
