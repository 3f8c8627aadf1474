"""What an attempt's committed transactions wrote to its operation, kept for its observer.

Whoever starts an attempt may ``watch`` its operation: the returned ``Witness`` is set in
a context variable, so an attempt run in a copy of that context (``operation.runner``)
is watched. The store notes what a transaction writes to the watched operation (an event
appended, the status set, the plan's steps) in the session's ``info``; ``committed``
(called by ``journal.unit_of_work`` once its transaction committed) hands those notes to
the witness. A transaction rolled back hands nothing over: the witness holds only what
the database holds. So the end of an attempt is told without reading the ledger before
and after it.

Deliberately not here: reading the database, deciding anything, what is logged
(``promoter.api.observe``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

_NOTES = "promoter.witness.notes"  # session.info: the notes of the transaction, in order


@dataclass(frozen=True)
class Ended:
    """The operation's row as the attempt's last committed status change left it."""

    kind: str
    status: str
    code: str | None
    bundle_id: str | None
    repository_name: str
    attempt: int


@dataclass
class Witness:
    """What the attempt's committed transactions wrote to ``operation_id``: its events
    ``(kind, seq, payload)`` in order, its last status, and its plan's steps
    ``(operation, new state)`` (``None``: no plan was committed by this attempt)."""

    operation_id: str
    events: list[tuple[str, int, Any]] = field(default_factory=list)
    ended: Ended | None = None
    steps: list[tuple[str, Any]] | None = None


_WATCHED: ContextVar[Witness | None] = ContextVar("promoter_witness", default=None)


@contextmanager
def watch(operation_id: str) -> Iterator[Witness]:
    """A witness of ``operation_id`` for work started in this block (in a copy of its
    context); the block's own context no longer holds it once the block ends."""
    witness = Witness(operation_id)
    token = _WATCHED.set(witness)
    try:
        yield witness
    finally:
        _WATCHED.reset(token)


def _note(session: Session, operation_id: str, note: tuple[str, Any]) -> None:
    witness = _WATCHED.get()
    if witness is not None and witness.operation_id == operation_id:
        session.info.setdefault(_NOTES, []).append(note)


def event(session: Session, operation_id: str, kind: str, seq: int, payload: Any) -> None:
    _note(session, operation_id, ("event", (kind, seq, payload)))


def status(session: Session, operation_id: str, ended: Ended) -> None:
    _note(session, operation_id, ("status", ended))


def steps(session: Session, operation_id: str, planned: Sequence[dict[str, Any]]) -> None:
    _note(session, operation_id, ("steps", [(s["operation"], s["new"]) for s in planned]))


def committed(session: Session) -> None:
    """The transaction committed: its notes go to the witness of this context."""
    notes = session.info.pop(_NOTES, None)
    witness = _WATCHED.get()
    if not notes or witness is None:
        return
    for what, value in notes:
        if what == "event":
            witness.events.append(value)
        elif what == "status":
            witness.ended = value
        else:
            witness.steps = value
