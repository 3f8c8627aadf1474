"""The cap's choice among connections accepted in one batch: asyncio accepts a whole
batch before it makes any protocol, so each accepted connection takes its seat in the
gate's ``waiting`` at once, and one past the cap closes the first of them (silent the
longest), not itself (tests/api/test_slow_clients.py drives a real daemon)."""

from __future__ import annotations

from promoter.api.connections import MAKE_ROOM, Closes, Gate


class _Counted(Closes):
    def __init__(self) -> None:
        super().__init__(2)
        self.reasons: list[str] = []

    def closed(self, reason: str) -> None:
        self.reasons.append(reason)


def test_a_batch_filling_the_cap_makes_room_from_its_own_first_seat() -> None:
    closes = _Counted()
    gate = Gate(2, closes)
    assert gate.admit() and gate.admit()  # the cap filled, no protocol made yet
    first, second = gate.accepted
    assert gate.admit()  # one past the cap: room made, not closed at accept
    assert first.closed and not second.closed
    assert list(gate.waiting) == [second, gate.accepted[-1]]
    assert not gate.admit()  # the slack (one) taken while the first goes: closed at accept
    assert closes.reasons == [MAKE_ROOM]  # the listener counts its own at-accept close
