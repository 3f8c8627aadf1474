"""The outcome made on what the plan's commit recorded, not read back before its commit
(protocol: storage#receipt-in-outcome-commit).

A promotion carries its plan's ``decision`` and ``action`` events and the chain's end to
the outcome (``outcome.Planned``), which prepares the outcome event and signs the receipt
on them without a read. The outcome's commit reads the row and the chain's end and checks
them: a plan the row no longer names, or a chain that ended elsewhere, has the outcome
made again from what is read, so the receipt names the row's events and the chain holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from promoter.engine.operation import outcome
from promoter.store import ledger
from tests.support.daemon import Daemon
from tests.support.promotion import operation_receipt, operation_view, submit
from tests.support.promotion import promote as request_promotion

V1, V2 = b"print('v1')\n", b"print('v2')\n"
Moved = Callable[[outcome.Planned], outcome.Planned]


def _promoted_with(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch, moved: Moved
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A promotion whose outcome is handed ``moved(planned)``: its view and receipt."""
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
    real = outcome.complete
    handed: list[outcome.Planned] = []

    def complete(*args: Any, **kwargs: Any) -> None:
        planned = args[-1]
        assert isinstance(planned, outcome.Planned)  # the plan's, carried to the outcome
        handed.append(moved(planned))
        real(*args[:-1], handed[-1], **kwargs)

    monkeypatch.setattr(outcome, "complete", complete)
    view = request_promotion(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    assert len(handed) == 1
    assert (repo / "src" / "app.py").read_bytes() == V2
    return operation_view(daemon, view["operation_id"]), operation_receipt(
        daemon, view["operation_id"]
    )


def _named_as_recorded(view: dict[str, Any], receipt: dict[str, Any]) -> None:
    events = view["events"]
    assert [e["kind"] for e in events] == ["decision", "action", "outcome"]
    assert receipt["events"] == {e["kind"]: e["event_id"] for e in events}
    assert ledger.verify_chain([SimpleNamespace(**e) for e in events])  # type: ignore[misc]


def test_an_outcome_on_a_plan_the_row_no_longer_names_is_made_again_from_the_row(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def other_decision(planned: outcome.Planned) -> outcome.Planned:
        return dataclasses.replace(planned, decision=planned.action)  # the chain's end kept

    view, receipt = _promoted_with(daemon, repo, identity, monkeypatch, other_decision)
    _named_as_recorded(view, receipt)


def test_an_outcome_after_a_chain_end_that_moved_is_made_again_from_the_chain(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def earlier_end(planned: outcome.Planned) -> outcome.Planned:
        seq, _ = planned.link
        return dataclasses.replace(planned, link=(seq - 1, "0" * 64))

    view, receipt = _promoted_with(daemon, repo, identity, monkeypatch, earlier_end)
    _named_as_recorded(view, receipt)
