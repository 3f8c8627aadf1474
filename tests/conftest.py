"""Shared fixtures: under PostgreSQL the test's own database (made by
``tests.support.databases``, which this file only wires in; under SQLite,
``tests.support.sqlite_template`` gives daemons a migrated file), and the family of
repositories, daemons and bubblewrap of ``tests.support.fixtures``, registered here. A
session with a suite variable it does not read stops at its start
(``tests.support.suite_variables``)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import databases, sqlite_template, suite_variables

pytest_plugins = ["tests.support.fixtures"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """A ``PROMOTER_TEST_*`` or ``PROMOTER_REQUIRE_*`` variable the suite does not read ends
    the session before any test runs (``tests.support.suite_variables``)."""
    refused = suite_variables.refusal(os.environ)
    if refused is not None:
        pytest.exit(refused, returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_report_header(config: pytest.Config) -> str:
    if databases.backend() == "postgresql":
        return (
            f"database: PostgreSQL at {databases.admin_url()}, "
            "a database of its own for each test that opens one"
        )
    return "database: SQLite (set PROMOTER_TEST_DATABASE=postgresql for PostgreSQL)"


@pytest.fixture(scope="session")
def _postgres() -> Iterator[databases.Server | None]:
    """Under PostgreSQL, this process's (this xdist worker's) databases on the server."""
    if databases.backend() != "postgresql":
        yield None
        return
    with databases.install() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _sqlite_template() -> Iterator[None]:
    """Under SQLite, each in-process daemon's database starts as a copy of one migrated
    file (``tests.support.sqlite_template``) instead of migrating from nothing."""
    if databases.backend() != "sqlite":
        yield
        return
    with sqlite_template.install():
        yield


@pytest.fixture(autouse=True)
def _database(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    _postgres: databases.Server | None,
) -> Iterator[None]:
    """Under PostgreSQL, a database of the test's own, named in the environment and created
    when the test first opens it (a test that never does costs none); dropped after it."""
    if _postgres is None:
        if request.node.get_closest_marker("postgresql_only"):
            pytest.skip("needs PROMOTER_TEST_DATABASE=postgresql")
        if not _database_free(request.node):
            yield
            return
        with databases.watch_database_free(request.node.nodeid):
            yield
        if request.node.nodeid in databases.opened_by_database_free:
            pytest.fail(
                "this test opened a daemon's database, but tests/unit and tests/property run "
                "in the SQLite pass only: mark it `pytest.mark.database`",
                pytrace=False,
            )
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("tests SQLite itself")
    pending = _postgres.reserve(request.node.name)
    request.node.stash[_PENDING] = pending
    monkeypatch.setenv("PROMOTER_DATABASE_URL", pending.url)
    try:
        yield
    finally:
        pending.drop()


@pytest.fixture(scope="session")
def _user_configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("user-config")


@pytest.fixture(autouse=True)
def _user_config(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _user_configs: Path
) -> None:
    """Each test's own per-user configuration folder (not made until a daemon records
    itself there): a ``promoter serve`` a test starts never writes into the real
    ~/.config, and no test finds another's daemon."""
    folder = _user_configs / f"t{next(_CONFIG_NUMBERS)}"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))


_CONFIG_NUMBERS = itertools.count()
_PENDING = pytest.StashKey[databases.PendingDatabase]()
_ROOT = Path(__file__).parent


def _database_free(item: pytest.Item) -> bool:
    markers = {mark.name for mark in item.iter_markers()}
    return databases.database_free(item.path.relative_to(_ROOT).as_posix(), markers)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL pass leaves out the tests that never open a database: the SQLite
    pass ran them, and checked that they open none."""
    if databases.backend() != "postgresql":
        return
    free = [item for item in items if _database_free(item)]
    if free:
        config.hook.pytest_deselected(items=free)
        items[:] = [item for item in items if not _database_free(item)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure naming the test's database while it was never created gets a line saying
    why: a child process opened it before this process did (see tests/support/databases)."""
    report = yield
    pending = item.stash.get(_PENDING, None)
    if (
        report.failed
        and pending is not None
        and not pending.created
        and pending.name in report.longreprtext
    ):
        why = (
            f"{pending.name} was never created: a child process opened it before the test "
            "did; start it after databases.ensure(url), as tests.support.process does"
        )
        report.sections.append(("database", why))
    return report
