"""How often one promotion attempt crosses from the engine into the store.

Counts the database transactions (``Database.session``, and ``Database.reading``'s
read-only ones on a plain connection, marked ``(read)``) a promotion opens from the moment
its attempt starts until it is ``completed``, through the real server. What the attempt
decides on comes with it (the ticket, read in the request's transaction); it journals the
plan (the steps with their temp names, the directories, the events), and records the
outcome. The writes need no transaction of their own: the plan named every temp, and the
directories were journaled with it. The outcome takes one transaction: the outcome event
and the receipt that names it are made and signed outside any write transaction on what
the plan's commit recorded (the row's events and the chain's end), then one commit, which
reads both again as its check, of the event, the receipt, its envelope and ``completed``
(protocol: storage#receipt-in-outcome-commit); the receipt's audit file is a copy written
after it. The count is pinned here so that a change that adds a crossing says so.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.engine.operation import promote
from tests.support.daemon import Daemon
from tests.support.promotion import promote as request_promotion
from tests.support.promotion import submit

V1, V2 = b"print('v1')\n", b"print('v2')\n"


def test_a_promotion_attempt_crosses_into_the_store_a_bounded_number_of_times(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bundle, receipt = submit(
        daemon, repo, identity, [("src/app.py", V1, V2), ("src/new/made.txt", None, b"new\n")]
    )
    database = daemon.services.db
    opened: list[str] = []
    counting = threading.Event()
    real_session, real_reading = database.session, database.reading

    def note(kind: str) -> None:
        if counting.is_set() and threading.current_thread().name.startswith("promoter-op"):
            # the function that opened it, through the engine's unit of work
            caller = next(
                frame
                for frame in reversed(traceback.extract_stack()[:-2])
                if Path(frame.filename).name != "contextlib.py" and frame.name != "unit_of_work"
            )
            opened.append(f"{Path(caller.filename).name}:{caller.name}{kind}")

    @contextlib.contextmanager
    def session(*args: Any, **kwargs: Any) -> Iterator[Any]:
        note("")
        with real_session(*args, **kwargs) as s:
            yield s

    @contextlib.contextmanager
    def reading() -> Iterator[Any]:
        note(" (read)")
        with real_reading() as connection:
            yield connection

    real_run = promote.run

    def run(*args: Any, **kwargs: Any) -> None:
        counting.set()
        try:
            real_run(*args, **kwargs)
        finally:
            counting.clear()

    monkeypatch.setattr(database, "session", session)
    monkeypatch.setattr(database, "reading", reading)
    monkeypatch.setattr(promote, "run", run)
    view = request_promotion(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    assert opened == [
        "promote.py:_journal",  # the plan: the lease again, the steps, directories, events
        # the host's epoch, before the first worktree write and before the first replace
        # (promoter.engine.fencing): a fenced host writes nothing
        "fencing.py:check (read)",
        "fencing.py:check (read)",
        # the outcome (protocol: storage#receipt-in-outcome-commit): its event and the receipt
        # naming it made and signed on what the plan's commit recorded (the row and the
        # chain's end, read again by the commit as its check), then one commit of the
        # event, the receipt, its envelope and ``completed``
        "outcome.py:_commit",
    ]
