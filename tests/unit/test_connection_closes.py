"""A flood at the connection cap is a warning line a while, not a line a connection: the
first close at the cap is logged at once, the next ones at most once every ``CAP_EVERY``
seconds with how many were closed (to make room, at accept) since the last line; every
close is counted by its reason."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, Counter

from promoter.api.connections import (
    AT_ACCEPT,
    BODY,
    CAP_EVERY,
    DRAIN,
    HEAD,
    MAKE_ROOM,
    REASONS,
    Closes,
)


def _logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, int, int]]:
    return [
        (r.levelno, r.getMessage(), r.fields["make_room"], r.fields["at_accept"])  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "promoter.api.connections"
    ]


def test_a_flood_at_the_cap_is_logged_once_then_at_most_once_every_five_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    counter = Counter("closed", "closed", ["reason"], registry=registry)
    now = [100.0]
    closes = Closes(4, counter, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "promoter.api.connections"):
        closes.closed(MAKE_ROOM)  # the first: at once
        for _ in range(30):
            closes.closed(AT_ACCEPT)
        for _ in range(20):
            closes.closed(MAKE_ROOM)
        closes.closed(HEAD)  # a deadline's close is not the cap's (logged where it is cut)
        closes.closed(BODY)
        closes.closed(DRAIN)
        now[0] += CAP_EVERY - 0.01
        closes.closed(AT_ACCEPT)
        assert len(_logged(caplog)) == 1
        now[0] += 0.01
        closes.closed(AT_ACCEPT)
        now[0] += CAP_EVERY
        closes.closed(MAKE_ROOM)
    assert CAP_EVERY == 5.0
    assert _logged(caplog) == [
        (
            logging.WARNING,
            "at the cap of 4 connections: closed 1 to make room and 0 at accept",
            1,
            0,
        ),
        (
            logging.WARNING,
            "at the cap of 4 connections: closed 20 to make room and 32 at accept "
            "since the last line",
            20,
            32,
        ),
        (
            logging.WARNING,
            "at the cap of 4 connections: closed 1 to make room and 0 at accept "
            "since the last line",
            1,
            0,
        ),
    ]
    counts = {r: registry.get_sample_value("closed_total", {"reason": r}) for r in REASONS}
    assert counts == {HEAD: 1.0, BODY: 1.0, MAKE_ROOM: 22.0, AT_ACCEPT: 32.0, DRAIN: 1.0}
