"""``through_outage``: a write tried again while the database cannot be reached, bounded."""

from __future__ import annotations

import pytest

from promoter.errors import DatabaseBusy, DatabaseUnavailable, StorageError
from promoter.store.outage import through_outage


def test_a_write_is_tried_again_until_the_database_answers() -> None:
    failures: list[Exception] = [DatabaseUnavailable("down"), DatabaseBusy("locked")]
    calls: list[int] = []

    def write() -> str:
        calls.append(len(calls))
        if failures:
            raise failures.pop(0)
        return "written"

    assert through_outage(write, "a write", 60.0) == "written"
    assert calls == [0, 1, 2]


def test_past_its_bound_the_last_outage_error_is_raised() -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise DatabaseUnavailable("down")

    with pytest.raises(DatabaseUnavailable):
        through_outage(write, "a write", 0.0)
    assert calls == [1]


def test_an_error_that_is_not_an_outage_is_never_retried() -> None:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise StorageError("disk full")

    with pytest.raises(StorageError):
        through_outage(write, "a write", 60.0)
    assert calls == [1]
