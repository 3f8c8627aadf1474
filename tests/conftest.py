"""Shared fixtures: a real repository and a real daemon guarding it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import databases
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo


def pytest_report_header(config: pytest.Config) -> str:
    if databases.backend() == "postgresql":
        return f"database: PostgreSQL at {databases.admin_url()}, one database per test"
    return "database: SQLite (set PROMOTER_TEST_DATABASE=postgresql for PostgreSQL)"


@pytest.fixture(scope="session")
def _postgres_template() -> Iterator[str | None]:
    if databases.backend() != "postgresql":
        yield None
        return
    with databases.migrated_template() as name:
        yield name


@pytest.fixture(autouse=True)
def _database(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    _postgres_template: str | None,
) -> Iterator[None]:
    """Under PostgreSQL, a fresh database for every test, named in the environment."""
    if databases.backend() != "postgresql":
        if request.node.get_closest_marker("postgresql_only"):
            pytest.skip("needs PROMOTER_TEST_DATABASE=postgresql")
        yield
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("tests SQLite itself")
    with databases.fresh_postgres_database(request.node.name, _postgres_template) as url:
        monkeypatch.setenv("PROMOTER_DATABASE_URL", url)
        yield


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
