"""A blob's and a bundle's row recorded once, by one insert that skips a recorded key.

``repo.record_blobs`` and ``repo.add_bundle`` add their rows with ``INSERT … ON CONFLICT
DO NOTHING`` (no look-up of what is recorded first): checked here, on SQLite and on
PostgreSQL (``PROMOTER_TEST_DATABASE=postgresql``), that a new bundle is added with its
blob pins and answered as added, a recorded one is answered as recorded with its row and
pins left as they were, and a recorded blob's row keeps its size and time while the
new ones of the same call are added. On PostgreSQL, two transactions recording the same
new blobs in opposite orders both finish: the rows are inserted in key order, so neither
holds one row the other waits on while waiting on one it holds (a deadlock).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from promoter.domain.documents import sealed_grant
from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.store import repo as ledger_repo
from promoter.store.db import Database, upgrade
from promoter.store.tables import BlobRow, BundleBlobRow, BundleRow
from tests.support.databases import own_url
from tests.support.flows import make_bundle, make_grant, sha

IDENTITY = "repo_" + "0" * 32


def _database(tmp_path: Path) -> Database:
    url = own_url(tmp_path, "rows.db")
    upgrade(url)
    return Database(url, 5.0)


def test_a_bundle_is_added_once_with_its_pins_and_a_recorded_one_is_left_as_it_is(
    tmp_path: Path, repo: Path
) -> None:
    database = _database(tmp_path)
    grant = make_grant(repo, IDENTITY, grant_id="grt_once")
    document = make_bundle(grant, [("a.txt", None, b"a\n"), ("b.txt", None, b"b\n")])
    bundle = PatchBundleV1.model_validate(document)
    with database.session() as session:
        ledger_repo.add_grant(session, sealed_grant(GrantV1.model_validate(grant)))
        assert ledger_repo.add_bundle(session, bundle, "host-one") is True
    with database.session() as session:
        assert ledger_repo.add_bundle(session, bundle, "host-two") is False
    with database.session() as session:
        row = session.get(BundleRow, bundle.bundle_id)
        pins = session.scalars(
            select(BundleBlobRow.sha256).where(BundleBlobRow.bundle_id == bundle.bundle_id)
        ).all()
    assert row is not None and row.owner_host == "host-one"  # the first one stays
    assert sorted(pins) == sorted([sha(b"a\n"), sha(b"b\n")])


def test_blobs_are_recorded_once_a_recorded_row_kept_as_it_is(tmp_path: Path) -> None:
    database = _database(tmp_path)
    one, two = sha(b"one\n"), sha(b"two\n")
    with database.session() as session:
        ledger_repo.record_blobs(session, [(one, 4)])
    with database.session() as session:
        first = session.get(BlobRow, one)
        assert first is not None
        kept = (first.size, first.created_at)
    with database.session() as session:  # the recorded one again, with another size
        ledger_repo.record_blobs(session, [(one, 99), (two, 4), (two, 4)])
    with database.session() as session:
        rows = {row.sha256: row for row in session.scalars(select(BlobRow))}
    assert set(rows) == {one, two}
    assert (rows[one].size, rows[one].created_at) == kept
    assert rows[two].size == 4


@pytest.mark.postgresql_only
def test_two_transactions_recording_the_same_new_blobs_in_opposite_orders_both_finish(
    tmp_path: Path,
) -> None:
    """The first transaction records ``low`` and is held open; the second records
    ``[high, low]`` and waits on ``low`` (seen in ``pg_stat_activity``); the first then
    records ``[low, high]``. In the caller's order the second held ``high`` while waiting,
    the first waited on it: a deadlock, one of them aborted. In key order both finish."""
    database = _database(tmp_path)
    low, high = sorted((sha(b"one\n"), sha(b"two\n")))
    failed: list[BaseException] = []

    def second() -> None:
        try:
            with database.session() as session:
                ledger_repo.record_blobs(session, [(high, 4), (low, 4)])
        except BaseException as exc:  # reported by the test, not lost in the thread
            failed.append(exc)

    thread = threading.Thread(target=second)
    with database.session() as session:
        ledger_repo.record_blobs(session, [(low, 4)])
        session.flush()
        thread.start()
        _until_waiting(thread)
        ledger_repo.record_blobs(session, [(low, 4), (high, 4)])
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert failed == []
    with database.session() as session:
        assert set(session.scalars(select(BlobRow.sha256))) == {low, high}


def _until_waiting(thread: threading.Thread) -> None:
    """Until a transaction of this test's database waits for a row lock (the thread's
    insert), or the thread has ended."""
    engine = create_engine(os.environ["PROMOTER_DATABASE_URL"])
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + 60
    try:
        with engine.connect() as connection:
            while thread.is_alive() and not connection.execute(query).scalar_one():
                assert time.monotonic() < deadline, "the second transaction never waited"
                connection.rollback()
                time.sleep(0.005)  # polling a condition, not waiting for time to pass
    finally:
        engine.dispose()
