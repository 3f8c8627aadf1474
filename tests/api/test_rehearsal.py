"""The promotion rehearsed at start: its statements compiled, nothing of it kept.

``promoter serve`` rehearses a promotion's journal before it serves
(``promoter.engine.operation.rehearsal``) in one transaction that is rolled back. Here: a daemon's
first promotion through the HTTP API, of one change or of two (single rows and batches
are cached apart), compiles none of the statements its journal runs (without the
rehearsal it compiled eighteen; with only the two-change operation rehearsed, both
fail); the rehearsal leaves every table exactly as it was and wakes no watcher; with
another writer holding the database it gives up after ``LOCK_WAIT_MS`` having changed
nothing, and the connections the daemon goes on with wait for locks as long as
configured; a rehearsal that fails on a fault keeps nothing and the daemon serves all
the same. Runs on SQLite, and on PostgreSQL under ``PROMOTER_TEST_DATABASE=postgresql``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from promoter.config import load_settings
from promoter.engine.operation import rehearsal
from promoter.engine.services import Services, build_services
from promoter.store import feed
from promoter.store import journal as store_journal
from promoter.store.tables import Base
from promoter.store.wakeup import COMMITS
from tests.support.daemon import Daemon, running_daemon
from tests.support.promotion import promote, submit
from tests.support.statements import statements

JOURNAL = ("operations", "operation_attempts", "steps", "created_dirs", "events", "event_feed")


def _tables(services: Services) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order."""
    with services.db.session() as session:
        return {
            table.name: sorted(
                (tuple(str(v) for v in row) for row in session.execute(select(table))),
            )
            for table in Base.metadata.sorted_tables
        }


ONE = [("README.md", b"# project\n", b"# project, promoted\n")]  # a single row of each
CHANGES = [*ONE, ("src/new/data.txt", None, b"new\n")]  # batches, and a directory made


def _journal_compiled(
    daemon: Daemon, repo: Path, identity: str, changes: list[Any] = CHANGES
) -> list[str]:
    """Promote ``changes`` through the API; the journal's statements it compiled."""
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    with statements(daemon.services.db.engine, compiled_only=True) as missed:
        answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["status"] == "completed"
    assert [s["status"] for s in view["steps"]] == ["completed"] * len(changes)
    assert [e["kind"] for e in view["events"]] == ["decision", "action", "outcome"]
    for path, _, new in changes:
        assert (repo / path).read_bytes() == new
    return [s for s in missed if any(f" {t} " in f" {s} " for t in JOURNAL)]


# the daemon rehearses at start, as ``promoter serve`` does by default
pytestmark = pytest.mark.daemon(rehearse_at_start=True)


@pytest.mark.parametrize("changes", [ONE, CHANGES], ids=["one-change", "two-changes"])
def test_first_promotion_compiles_none_of_its_journal_statements(
    daemon: Daemon, repo: Path, identity: str, changes: list[Any]
) -> None:
    journal_misses = _journal_compiled(daemon, repo, identity, changes)
    assert not journal_misses, "\n".join(journal_misses)


@pytest.mark.parametrize("clocks", [("still", "turning"), ("turning", "still")])
def test_the_journal_statements_do_not_depend_on_the_second_turning(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, clocks: tuple[str, str]
) -> None:
    """The stamps have whole seconds: whether or not the second turns between two writes
    of an operation's row (never, or at every stamp), during the rehearsal and then
    during the first promotion, that promotion compiles none of its journal's
    statements. A row's ``updated_at`` left out of an UPDATE when it had not changed
    made the statement's shape depend on the clock."""
    seconds = iter(range(10**6))
    clock = [clocks[0]]

    def stamp() -> str:
        tick = 0 if clock[0] == "still" else next(seconds)
        return f"2026-12-05T{tick // 3600 % 24:02d}:{tick // 60 % 60:02d}:{tick % 60:02d}Z"

    monkeypatch.setattr(store_journal, "now", stamp)
    with running_daemon(tmp_path / "state", {"work": repo}, rehearse_at_start=True) as daemon:
        clock[0] = clocks[1]
        identity = daemon.services.registry.by_name("work").identity
        journal_misses = _journal_compiled(daemon, repo, identity, ONE)
    assert not journal_misses, "\n".join(journal_misses)


def test_first_promotion_without_the_rehearsal_compiles_them(tmp_path: Path, repo: Path) -> None:
    """The test above can fail: a daemon started without the rehearsal
    (``rehearse_at_start = false``) compiles statements of every journal table in the
    same promotion."""
    with running_daemon(tmp_path / "state", {"work": repo}, rehearse_at_start=False) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        journal_misses = _journal_compiled(daemon, repo, identity)
    touched = {t for t in JOURNAL if any(f" {t} " in f" {s} " for s in journal_misses)}
    assert touched == set(JOURNAL)
    assert len(journal_misses) >= 18


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    built = build_services(load_settings(None, state_dir=tmp_path / "state", repositories={}))
    try:
        yield built
    finally:
        built.close()


def test_rehearsal_keeps_no_row(daemon: Daemon, repo: Path, identity: str) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("README.md", b"# project\n", b"x\n")])
    assert promote(daemon, bundle, receipt).json()["status"] == "completed"
    before = _tables(daemon.services)
    assert before["operations"] and before["events"] and before["event_feed"]
    assert rehearsal.rehearse(daemon.services) is True
    assert _tables(daemon.services) == before


def test_rehearsal_wakes_no_watcher(services: Services) -> None:
    generation = COMMITS.generation
    assert rehearsal.rehearse(services) is True
    assert COMMITS.generation == generation
    assert all(rows == [] for name, rows in _tables(services).items() if name in JOURNAL)


@contextmanager
def another_writer(services: Services) -> Iterator[None]:
    """Another connection holding what every journal commit needs: SQLite's write lock,
    PostgreSQL's feed lock."""
    with services.db.engine.connect() as other:
        if other.dialect.name == "sqlite":
            other.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            other.begin()
            other.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": feed.ADVISORY_KEY})
        try:
            yield
        finally:
            other.rollback()


def test_rehearsal_behind_another_writer_gives_up_and_changes_nothing(
    services: Services,
) -> None:
    before = _tables(services)
    with another_writer(services):
        assert rehearsal.rehearse(services) is False
    assert _tables(services) == before
    with ExitStack() as stack:  # every pooled connection (and one more) waits as configured
        for _ in range(3):
            connection = stack.enter_context(services.db.engine.connect())
            if connection.dialect.name == "sqlite":
                waits = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
                assert waits == int(services.settings.database_busy_timeout * 1000)
            else:
                waits = connection.exec_driver_sql(
                    "SELECT extract(epoch FROM current_setting('lock_timeout')::interval)"
                ).scalar()
                assert float(waits) == services.settings.database_lock_timeout


def test_a_failing_rehearsal_keeps_nothing_and_the_daemon_serves(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A fault in the middle of the rehearsal (after rows were written in its
    transaction): nothing is kept, it is logged, and the daemon starts and promotes."""

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("injected fault in the rehearsal")

    with monkeypatch.context() as patched:
        patched.setattr(rehearsal.step_rows, "add_created_dirs", broken)
        with running_daemon(tmp_path / "state", {"work": repo}, rehearse_at_start=True) as daemon:
            patched.undo()
            assert "the rehearsal failed; nothing of it was kept" in caplog.text
            assert all(
                rows == [] for name, rows in _tables(daemon.services).items() if name in JOURNAL
            )
            with daemon.client() as client:
                assert client.get("/healthz").status_code == 200
            identity = daemon.services.registry.by_name("work").identity
            _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
            answer = promote(daemon, bundle, receipt)
            assert answer.status_code == 200, answer.text
            view = answer.json()
            assert view["status"] == "completed"
            assert [e["kind"] for e in view["events"]] == ["decision", "action", "outcome"]
            for path, _, new in CHANGES:
                assert (repo / path).read_bytes() == new
