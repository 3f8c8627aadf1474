"""The host lease a daemon surely holds (``HostState.lease_surely_held``): while it runs no
fence can land, so a write path skips the epoch check; after it, or once a fence was seen,
it asks the ledger (protocol: promotion#fence-stops-every-write)."""

from __future__ import annotations

from promoter.engine.host_state import HostState, lease_clock


def test_a_lease_is_held_until_its_renewal_plus_its_length_less_a_second() -> None:
    state = HostState("host-a")
    assert not state.lease_surely_held()  # never renewed: ask the ledger
    now = lease_clock()
    state.lease_renewed(now, 60.0)
    assert state.lease_surely_held()
    state.lease_renewed(now - 59.0, 60.0)  # an older renewal never shortens it
    assert state.lease_surely_held()


def test_a_lease_renewed_longer_ago_than_it_runs_is_not_held() -> None:
    state = HostState("host-a")
    state.lease_renewed(lease_clock() - 59.0, 60.0)  # its end, cut to the second, has passed
    assert not state.lease_surely_held()
    state.lease_renewed(lease_clock(), 1.0)  # one second, cut to the second: never held
    assert not state.lease_surely_held()


def test_a_fence_seen_ends_the_lease() -> None:
    state = HostState("host-a")
    state.lease_renewed(lease_clock(), 60.0)
    state.saw_fence(2, "host-b", "fenced")
    assert not state.lease_surely_held()
