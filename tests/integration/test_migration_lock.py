"""Migrations under a lock (protocol: hosts#migrations-under-lock): hosts migrating one empty
database at once.

The first ``promoter db upgrade`` is paused at the ``migration_locked`` fault point while
it holds the lock; the others are started then and must wait (on PostgreSQL,
``pg_locks`` shows them waiting on the advisory lock); once released, every one exits 0
and the schema is at the code's head. The PostgreSQL test makes a database of its own on
the test server and drops it after; it is skipped when no server answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from promoter.store.db import MIGRATION_LOCK_KEY, head_revision
from tests.support import databases
from tests.support.pause import Pause

_HOSTS = 3
_BOUND = 60.0


def _migrator(state_dir: Path, url: str, faults: str = "") -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env["PROMOTER_DATABASE_URL"] = url
    if faults:
        env["PROMOTER_FAULTS"] = faults
    argv = [sys.executable, "-m", "promoter.cli.main", "db", "upgrade"]
    return subprocess.Popen(
        [*argv, "--state-dir", str(state_dir)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + _BOUND
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.02)


def _flock_waiters(lock: Path) -> int:
    """How many processes wait for a lock on ``lock`` (``/proc/locks``' blocked entries)."""
    if not lock.exists():
        return 0
    st = lock.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as table:
        return sum(1 for line in table if "->" in line and inode in line.split())


def _finish(processes: list[subprocess.Popen[bytes]]) -> list[tuple[int, str]]:
    results = []
    for process in processes:
        _, stderr = process.communicate(timeout=_BOUND)
        results.append((process.returncode, stderr.decode(errors="replace")))
    return results


def _revision(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    """A fresh, empty PostgreSQL database of this test's own; dropped after."""
    if not databases.postgres_answers():
        pytest.skip("no PostgreSQL server answers at PROMOTER_TEST_POSTGRES_URL")
    name = f"miglock_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(databases.admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(databases.admin_url()).set(database=name).render_as_string(False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.slow
def test_hosts_migrating_one_empty_postgresql_database_wait_and_all_succeed(
    tmp_path: Path, empty_postgres: str
) -> None:
    url = empty_postgres
    pause = Pause(tmp_path, "migration_locked")
    first = _migrator(tmp_path / "s0", url, pause.spec)
    pause.reached()  # the first holds the advisory lock, nothing migrated yet
    others = [_migrator(tmp_path / f"s{i}", url) for i in range(1, _HOSTS)]
    watcher = sa.create_engine(url)
    waiting = sa.text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND ((classid::bigint << 32) | objid::bigint) = :key"
    )
    key = MIGRATION_LOCK_KEY & 0xFFFFFFFFFFFFFFFF  # pg_locks shows the key's two halves
    try:
        with watcher.connect() as connection:

            def all_wait() -> bool:
                return connection.execute(waiting, {"key": key}).scalar() == _HOSTS - 1

            _until(all_wait, f"{_HOSTS - 1} migrators wait on the advisory lock")
            assert all(p.poll() is None for p in others)
            tables = connection.execute(
                sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            ).scalar()
            assert tables == 0  # the first has not migrated anything yet
    finally:
        watcher.dispose()
        pause.release()
    results = _finish([first, *others])
    assert [code for code, _ in results] == [0] * _HOSTS, results
    assert _revision(url) == head_revision(url)


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_hosts_migrating_one_empty_sqlite_database_wait_and_all_succeed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    pause = Pause(tmp_path, "migration_locked")
    first = _migrator(tmp_path / "s0", url, pause.spec)
    pause.reached()
    others = [_migrator(tmp_path / f"s{i}", url) for i in range(1, _HOSTS)]
    try:
        lock = Path(f"{tmp_path / 'shared.db'}.migrate-lock")
        _until(lambda: _flock_waiters(lock) == _HOSTS - 1, "the others wait on the file lock")
        assert all(p.poll() is None for p in others)
    finally:
        pause.release()
    results = _finish([first, *others])
    assert [code for code, _ in results] == [0] * _HOSTS, results
    assert _revision(url) == head_revision(url)
