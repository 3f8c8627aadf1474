"""Events appended in one transaction chain onto each other without reading the chain again.

``ledger.append`` remembers, per session, the last link it appended to each operation's
chain: the second and later events of a transaction chain onto it, and the chain is read
once per transaction (a plan's ``decision`` and ``action`` are two events of one). The
chain verifies across transactions, and an event rolled back is not chained onto. Runs
on SQLite, and on PostgreSQL under ``PROMOTER_TEST_DATABASE=postgresql``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from promoter.store import ledger
from promoter.store.db import Database
from tests.support.databases import own_url
from tests.support.rows import journal_database
from tests.support.statements import selects_from, statements

OP = "op_links000001"


@pytest.fixture
def database(tmp_path: Path) -> Database:
    return journal_database(own_url(tmp_path, "journal.db"), OP)


def test_events_of_one_transaction_read_the_chain_once(database: Database) -> None:
    with statements(database.engine) as seen:
        with database.session() as session:
            ids = [ledger.append(session, OP, "decision", {"n": 0})]
            ids += [ledger.append(session, OP, "action", {"n": 1})]
        first_transaction = len(selects_from(seen, "events"))
        with database.session() as session:
            ids += [ledger.append(session, OP, "outcome", {"n": 2})]
            ids += [ledger.append(session, OP, "outcome", {"n": 3})]
    assert (first_transaction, len(selects_from(seen, "events"))) == (1, 2), seen
    with database.session() as session:
        rows = ledger.events(session, OP)
        assert [(r.event_id, r.seq, r.payload) for r in rows] == [
            (ids[n], n, {"n": n}) for n in range(4)
        ]
        assert [r.prev_event_sha256 for r in rows] == [None, *(r.event_sha256 for r in rows[:3])]
        assert ledger.verify_chain(rows)


def test_a_rolled_back_event_is_not_chained_onto(database: Database) -> None:
    with Session(database.engine) as session:
        ledger.append(session, OP, "decision", {"n": "rolled back"})
        session.rollback()
        kept = ledger.append(session, OP, "decision", {"n": 0})
        session.commit()
    with database.session() as session:
        rows = ledger.events(session, OP)
        assert [(r.event_id, r.seq, r.prev_event_sha256) for r in rows] == [(kept, 0, None)]
        assert ledger.verify_chain(rows)
