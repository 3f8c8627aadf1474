"""The per-operation event hash chain (protocol: promotion#event-ledger), in the database.

An event is ``{event_id, operation_id, seq, kind, payload, prev_event_sha256, at}``; its
sha256 covers every field but ``event_id`` (which is derived from it), so each event's
hash covers the previous one. ``append`` adds one event inside the caller's transaction,
written at once as a plain INSERT after the session's pending changes
(a session remembers the last link it appended to each chain, so a second event of the
same transaction does not read the chain again; events are never deleted, a rollback
forgets the links, and a concurrent append of the same ``seq`` fails on the
``(operation_id, seq)`` key);
``prepare`` works an event out without appending it (``prepare_after``: after a link
the caller knows, such as ``appended`` returns) and ``append_prepared`` appends it
later, in another transaction, only while the chain still ends where it did (for a
receipt that names its outcome event and is signed before the outcome's commit);
``verify_chain`` re-checks a whole chain; ``events`` and ``last_link`` read it. Each
appended event also enters the watch feed (``promoter.store.feed``) when its transaction
commits.
Deliberately not here: what an event says (each operation kind's engine module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from sqlalchemy import Connection, Row, String, Table, bindparam, event, insert, select
from sqlalchemy.orm import Session

from promoter.domain.canonical import canonical_bytes, content_id, rfc3339, sha256_hex, utcnow
from promoter.domain.views import Event
from promoter.store import feed, witness
from promoter.store.db import run
from promoter.store.tables import EventRow

EventKind = Literal["decision", "action", "outcome"]
_LINKS = "promoter.ledger.links"  # session.info: operation id -> (seq, sha256) appended last
# an event goes in as one plain INSERT, written at once (a taken seq fails here), built
# once: no ORM object is made for it, nor a unit-of-work flush run
_ADD_EVENT = insert(cast(Table, EventRow.__table__))


@event.listens_for(Session, "after_rollback")
def _forget_links(session: Session) -> None:
    """A rolled-back transaction's events are gone: so are the links remembered for them."""
    session.info.pop(_LINKS, None)


def event_sha256(
    operation_id: str, seq: int, kind: str, payload: Any, prev: str | None, at: str
) -> str:
    body = {
        "operation_id": operation_id,
        "seq": seq,
        "kind": kind,
        "payload": payload,
        "prev_event_sha256": prev,
        "at": at,
    }
    return sha256_hex(canonical_bytes(body))


@dataclass(frozen=True)
class Prepared:
    """An event worked out before its transaction: the link it chains to, its time, its
    hash and id (``prepare``), so that what names it (a receipt, and the receipt's
    signature) can be made before the transaction that appends it (``append_prepared``)."""

    operation_id: str
    seq: int
    kind: str
    payload: Mapping[str, object]  # a JSON object: each kind's payload is typed where written
    prev: str | None
    at: str
    digest: str

    @property
    def event_id(self) -> str:
        return content_id("evt", self.digest)


class ChainMoved(Exception):
    """The chain gained an event between ``prepare`` and ``append_prepared``."""


def prepare(
    session: Session | Connection,
    operation_id: str,
    kind: EventKind,
    payload: Mapping[str, object],
) -> Prepared:
    """The next event of the operation's chain, worked out and not appended (in a session,
    or read on a plain connection: ``Database.reading``)."""
    links: dict[str, tuple[int, str]] = (
        session.info.get(_LINKS, {}) if isinstance(session, Session) else {}
    )
    previous = links.get(operation_id) or last_link(session, operation_id)
    return prepare_after(previous, operation_id, kind, payload)


def prepare_after(
    previous: tuple[int, str] | None,
    operation_id: str,
    kind: EventKind,
    payload: Mapping[str, object],
) -> Prepared:
    """``prepare`` after a link the caller knows (``appended``), read nowhere: whether the
    chain still ends there is ``append_prepared``'s check."""
    seq, prev = (0, None) if previous is None else (previous[0] + 1, previous[1])
    at = rfc3339(utcnow())
    digest = event_sha256(operation_id, seq, kind, payload, prev, at)
    return Prepared(operation_id, seq, kind, payload, prev, at, digest)


def append(
    session: Session, operation_id: str, kind: EventKind, payload: Mapping[str, object]
) -> str:
    """Append an event to the operation's chain; returns its ``evt_…`` id."""
    return _insert(session, prepare(session, operation_id, kind, payload))


def append_prepared(session: Session, prepared: Prepared) -> str:
    """Append ``prepared`` in this transaction; ``ChainMoved`` (nothing appended) when the
    chain's last event is no longer the one it was prepared after."""
    links: dict[str, tuple[int, str]] = session.info.get(_LINKS, {})
    previous = links.get(prepared.operation_id) or last_link(session, prepared.operation_id)
    expected = None if prepared.prev is None else (prepared.seq - 1, prepared.prev)
    if previous != expected:
        raise ChainMoved(prepared.operation_id)
    return _insert(session, prepared)


def appended(session: Session, operation_id: str) -> tuple[int, str] | None:
    """The link this transaction appended last to the operation's chain (None: none)."""
    links: dict[str, tuple[int, str]] = session.info.get(_LINKS, {})
    return links.get(operation_id)


def _insert(session: Session, prepared: Prepared) -> str:
    links: dict[str, tuple[int, str]] = session.info.setdefault(_LINKS, {})
    event_id = prepared.event_id
    session.flush()  # what the transaction changed before, written first, as before any event
    run(
        session,
        _ADD_EVENT,
        {
            "event_id": event_id,
            "operation_id": prepared.operation_id,
            "seq": prepared.seq,
            "kind": prepared.kind,
            "payload": prepared.payload,
            "prev_event_sha256": prepared.prev,
            "event_sha256": prepared.digest,
            "at": prepared.at,
        },
    )
    links[prepared.operation_id] = (prepared.seq, prepared.digest)
    witness.event(session, prepared.operation_id, prepared.kind, prepared.seq, prepared.payload)
    feed.record(session, event_id, prepared.operation_id, prepared.kind, prepared.at)
    return event_id


def as_event(row: EventRow | Row[Any]) -> Event:
    """An event row as the API shows it."""
    return Event.model_construct(
        event_id=row.event_id,
        operation_id=row.operation_id,
        seq=row.seq,
        kind=row.kind,
        payload=row.payload,
        prev_event_sha256=row.prev_event_sha256,
        event_sha256=row.event_sha256,
        at=row.at,
    )


def verify_chain(rows: Sequence[EventRow | Row[Any]]) -> bool:
    prev: str | None = None
    for seq, row in enumerate(rows):
        digest = event_sha256(row.operation_id, row.seq, row.kind, row.payload, prev, row.at)
        if row.seq != seq or row.prev_event_sha256 != prev or row.event_sha256 != digest:
            return False
        if row.event_id != content_id("evt", digest):
            return False
        prev = digest
    return True


# the reads of one operation's chain, built once with the operation id as a parameter: a
# statement built per call cost more processor time than running it
_OPERATION = bindparam("ledger_operation_id", type_=String())
# the chain as plain rows (Core, the table's own columns: the ORM has no part in running
# them, the session still flushes first): the reads of a view, no ORM object made
_EVENT_ROWS = cast(Table, EventRow.__table__)
_EVENTS = (
    select(_EVENT_ROWS).where(_EVENT_ROWS.c.operation_id == _OPERATION).order_by(_EVENT_ROWS.c.seq)
)
_LAST_LINK = (
    select(_EVENT_ROWS.c.seq, _EVENT_ROWS.c.event_sha256)
    .where(_EVENT_ROWS.c.operation_id == _OPERATION)
    .order_by(_EVENT_ROWS.c.seq.desc())
    .limit(1)
)

# the bundles the merges of some operations made: each merge is a decision event on the
# merged operation naming its bundle (``promoter.engine.operation.merge``), a subquery
# for ``promoter.store.journal.merged_promotions``; the same events an operation's view
# reads its ``merged_into`` from
MERGE_BUNDLES = select(_EVENT_ROWS.c.payload[("merge", "bundle_id")].as_string()).where(
    _EVENT_ROWS.c.operation_id.in_(bindparam("ledger_merged_from", expanding=True)),
    _EVENT_ROWS.c.kind == "decision",
)


def events(session: Session | Connection, operation_id: str) -> list[Row[Any]]:
    """The operation's events in order, as plain rows (read only)."""
    return list(run(session, _EVENTS, {"ledger_operation_id": operation_id}))


def last_link(session: Session | Connection, operation_id: str) -> tuple[int, str] | None:
    """The ``seq`` and ``event_sha256`` of the operation's last event (what the next one
    chains to), read as two columns: no event row, and no payload, is loaded."""
    found = run(session, _LAST_LINK, {"ledger_operation_id": operation_id}).first()
    return None if found is None else (found[0], found[1])
