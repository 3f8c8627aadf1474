"""Fixtures of the integration tests: a worktree root and an outside directory (the fs
layer's tests), and a PostgreSQL cluster a module starts and stops itself (``cluster``,
``tests.support.own_postgres``) with a fresh database in it per test (``database_url``),
and the daemons a test starts as processes, killed at its end (``started``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from promoter.fs.root import Root
from tests.support.fsutil import made
from tests.support.own_postgres import OwnPostgres, binaries, own_postgres
from tests.support.process import DaemonProcess


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return made(tmp_path / "work")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = made(tmp_path / "outside")
    (path / "f.txt").write_bytes(b"outside original")
    (path / "g.txt").write_bytes(b"outside g")
    return path


@pytest.fixture
def root(work: Path) -> Iterator[Root]:
    with Root.open(work) as opened:
        yield opened


@pytest.fixture
def started() -> Iterator[list[DaemonProcess]]:
    """The daemons a test starts (it appends them), each killed at the test's end."""
    daemons: list[DaemonProcess] = []
    try:
        yield daemons
    finally:
        for daemon in daemons:
            daemon.kill()


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnPostgres]:
    """A PostgreSQL cluster of the module's own (skipped where none is installed)."""
    found = binaries()
    if found is None:
        pytest.skip("no PostgreSQL initdb installed here")
    with own_postgres(found) as server:
        yield server


@pytest.fixture
def database_url(cluster: OwnPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new, empty database in the module's cluster (the server answering); dropped after."""
    name = "t_" + str(abs(hash(request.node.nodeid)) % 10**12)
    admin = cluster.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    yield cluster.url.rsplit("/", 1)[0] + "/" + name
    cluster.start_if_stopped()
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
