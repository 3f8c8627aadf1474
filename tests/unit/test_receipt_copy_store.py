"""The store side of the receipt in the outcome's commit
(protocol: storage#receipt-in-outcome-commit).

- ``ledger.prepare`` / ``append_prepared``: an event worked out before its transaction is
  appended only while the chain still ends where it did; a chain that moved in between
  refuses it (``ChainMoved``) and appends nothing.
- ``AuditStore.copy``: a copy written with no flush at all; one already right is left as
  it is; one that differs (bytes, a symlink, a directory) is set aside with its bytes
  kept and written again; a concurrent copy's good file goes back under its name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.fs import flush
from promoter.store import ledger
from promoter.store.audit import AuditStore
from promoter.store.db import Database
from promoter.store.durable import set_aside
from tests.support.rows import journal_database

OP = "op_" + "1" * 32
DATA = b'{"receipt_sha256":"' + b"a" * 64 + b'"}'


@pytest.fixture
def database(tmp_path: Path) -> Database:
    db = journal_database(f"sqlite:///{tmp_path / 'ledger.db'}", OP)
    with db.session() as session:
        ledger.append(session, OP, "decision", {"n": 0})
    return db


def test_a_prepared_event_is_appended_with_the_id_it_was_made_with(database: Database) -> None:
    with database.session() as session:
        prepared = ledger.prepare(session, OP, "outcome", {"status": "completed"})
    with database.session() as session:
        assert ledger.append_prepared(session, prepared) == prepared.event_id
    with database.session() as session:
        rows = ledger.events(session, OP)
        assert [(r.seq, r.kind, r.event_id) for r in rows][-1] == (1, "outcome", prepared.event_id)
        assert ledger.verify_chain(rows)


def test_a_chain_that_moved_after_prepare_refuses_the_prepared_event(database: Database) -> None:
    with database.session() as session:
        prepared = ledger.prepare(session, OP, "outcome", {"status": "completed"})
    with database.session() as session:
        ledger.append(session, OP, "decision", {"n": 1})  # another writer's event
    with pytest.raises(ledger.ChainMoved), database.session() as session:
        ledger.append_prepared(session, prepared)
    with database.session() as session:
        rows = ledger.events(session, OP)
        assert [r.kind for r in rows] == ["decision", "decision"]
        assert ledger.verify_chain(rows)


def _store(tmp_path: Path) -> tuple[AuditStore, Path]:
    store = AuditStore(tmp_path / "audit")
    return store, store.path("promotion", OP)


def test_a_copy_is_written_without_any_flush_and_read_only(tmp_path: Path) -> None:
    store, path = _store(tmp_path)
    before = flush.flushes()
    assert store.copy("promotion", OP, DATA) is None
    assert flush.flushes() - before == {}
    assert path.read_bytes() == DATA
    assert path.stat().st_mode & 0o777 == 0o444
    before_again = path.stat().st_ino
    assert store.copy("promotion", OP, DATA) is None  # right already: left as it is
    assert path.stat().st_ino == before_again


@pytest.mark.parametrize("how", ["torn", "symlink", "directory"])
def test_a_copy_that_differs_is_set_aside_with_its_bytes_and_written_again(
    how: str, tmp_path: Path
) -> None:
    store, path = _store(tmp_path)
    store.copy("promotion", OP, DATA)
    path.unlink()
    if how == "torn":
        path.write_bytes(DATA[:7])
    elif how == "symlink":
        (tmp_path / "right.json").write_bytes(DATA)  # the right bytes, but not a copy
        path.symlink_to(tmp_path / "right.json")
    else:
        path.mkdir()
    aside = store.copy("promotion", OP, DATA)
    assert aside is not None and aside.parent == path.parent
    assert aside.name.startswith(f".{OP}.json.damaged-")
    assert path.read_bytes() == DATA and not path.is_symlink()
    if how == "torn":
        assert aside.read_bytes() == DATA[:7]
    elif how == "symlink":
        assert os.readlink(aside) == str(tmp_path / "right.json")
    else:
        assert aside.is_dir()
    assert store.get("promotion", OP) == DATA


def test_a_good_copy_moved_aside_by_a_racing_repair_goes_back_under_its_name(
    tmp_path: Path,
) -> None:
    store, path = _store(tmp_path)
    store.copy("promotion", OP, DATA)
    assert set_aside(path, DATA) is None  # it held the expected bytes: back in place
    assert sorted(os.listdir(path.parent)) == [path.name]
    assert path.read_bytes() == DATA
