"""Owner leases and who may take an operation over (``promoter.engine.ownership``)."""

from __future__ import annotations

from pathlib import Path

from promoter.engine.liveness import LiveAttempts
from promoter.engine.ownership import Heartbeat, Owner, lease_expired, orphaned
from promoter.store import hosts, journal
from promoter.store.db import Database, upgrade
from promoter.store.tables import OperationRow
from tests.support.rows import operation_row

PAST = "2000-01-01T00:00:00Z"


def _row(operation_id: str, owner: Owner) -> OperationRow:
    row = operation_row(operation_id)
    row.owner_pid, row.owner_start, row.owner_boot = owner.pid, owner.start, owner.boot
    row.owner_host, row.owner_lease_until = owner.host, PAST
    return row


def test_another_hosts_operation_is_never_orphaned_here_even_with_a_dead_lease() -> None:
    me = Owner.me("host-b")
    dead_on_a = Owner(pid=2**22 + 1, start="1", boot="another-boot", host="host-a")
    row = _row("op_a", dead_on_a)
    assert lease_expired(row)
    assert orphaned(row, me) is False


def test_on_its_own_host_a_dead_owner_is_orphaned_and_a_live_one_is_not() -> None:
    me = Owner.me("host-a")
    assert orphaned(_row("op_dead", Owner(2**22 + 1, "1", me.boot, "host-a")), me) is True
    assert orphaned(_row("op_rebooted", Owner(me.pid, me.start, "old-boot", "host-a")), me)
    assert orphaned(_row("op_mine", me), me) is False  # its lease ran out, its owner runs


def test_heartbeat_renews_exactly_this_owners_running_operations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    database = Database(url, 5.0)
    me = Owner.me("host-a")
    other = Owner(me.pid, me.start, me.boot, "host-b")
    with database.session() as session:
        done = _row("op_done", me)
        session.add_all([_row("op_mine", me), _row("op_other_host", other), done])
        session.flush()
        done.status = "refused"  # ended: no longer renewed
    assert Heartbeat(database, me, 60.0).beat() == 1
    with database.session() as session:
        leases = {
            op: journal.require(session, op).owner_lease_until
            for op in ("op_mine", "op_other_host", "op_done")
        }
        assert not lease_expired(journal.require(session, "op_mine"))
    assert leases["op_other_host"] == PAST and leases["op_done"] == PAST
    database.dispose()


def test_a_fenced_hosts_heartbeat_renews_nothing_and_stops(tmp_path: Path) -> None:
    """Once the host's epoch was raised, its heartbeat renews neither the host lease nor
    the owner lease of an operation it still records as its own, and stops."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    database = Database(url, 5.0)
    me = Owner.me("host-a")
    with database.session() as session:
        hosts.register(session, "host-a", [], PAST)
        session.add(_row("op_mine", me))
    heartbeat = Heartbeat(database, me, 60.0, epoch=1)
    assert heartbeat.beat() == 1  # active at epoch 1: both leases move
    with database.session() as session:
        hosts.fence(session, "host-a", to="host-b", by="operator", operations=[])
        journal.claim(session, "op_mine", me.stamp(-60.0))  # its lease ran out
    assert heartbeat.beat() == 0
    with database.session() as session:
        assert lease_expired(journal.require(session, "op_mine"))
        row = hosts.get(session, "host-a")
        assert row is not None and (row.epoch, row.status, row.lease_until) == (2, "fenced", None)
    heartbeat.start()  # stopped already: its thread ends at once
    heartbeat.stop()
    database.dispose()


def test_heartbeat_never_renews_an_operation_whose_attempt_is_dead(tmp_path: Path) -> None:
    """Only the operations a thread of this process still runs keep their lease."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    database = Database(url, 5.0)
    me = Owner.me("host-a")
    with database.session() as session:
        session.add_all([_row("op_live", me), _row("op_dead", me)])
    live = LiveAttempts()
    assert Heartbeat(database, me, 60.0, live.now).beat() == 0  # nothing runs
    with live.running("op_live"):
        assert Heartbeat(database, me, 60.0, live.now).beat() == 1
    with database.session() as session:
        assert not lease_expired(journal.require(session, "op_live"))
        assert journal.require(session, "op_dead").owner_lease_until == PAST
    database.dispose()
