"""The watch feed: every ledger event in one global order, read after an opaque cursor.

``record`` (called by ``promoter.store.ledger.append``) notes an event in its session;
when that session commits, the feed rows are added last, each with the operation's
status and code as the transaction commits them, so a feed position is given in the
order of commits. A transaction that changes an operation's status (or creates it)
without appending one of its events adds a ``status`` entry (no event id), so the feed
also tells every status change. On PostgreSQL, where concurrent transactions could otherwise commit
positions out of order, the feed rows are written under a transaction-scoped advisory
lock taken after everything else of the transaction has been flushed (so the lock never
waits on a row lock). After every commit that wrote, ``promoter.store.wakeup.COMMITS``
is notified: a write is a flush of ORM objects or an INSERT, UPDATE or DELETE statement
executed on the session (the journal writes steps that way, with no ORM object).
The feed rows are written as one plain INSERT (no ORM object, no second flush).
``after`` reads the rows after a position; ``cursor``/``position`` turn a position into
the opaque cursor and back.

Deliberately not here: the events' content and hash chain (``promoter.store.ledger``),
waiting (``promoter.api.longpoll``), webhooks.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    BigInteger,
    String,
    Table,
    bindparam,
    event,
    insert,
    inspect,
    literal,
    select,
    text,
)
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.orm.util import identity_key

from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.views import FeedEvent
from promoter.errors import BadRequest
from promoter.store import db
from promoter.store.tables import FeedRow, OperationRow
from promoter.store.wakeup import COMMITS

PENDING = "promoter.feed.pending"
WROTE = db.WROTE  # the session wrote: its commit notifies (``db.run`` notes it too)
CHANGED = "promoter.feed.changed"
WRITTEN = "promoter.feed.written"  # operation id -> the columns a plain statement wrote
ADVISORY_KEY = 0x7072_6F6D_6665_6564  # "promfeed": the PostgreSQL feed lock
CURSOR = re.compile(r"^evc_([0-9a-f]{16})$")
LAST_POSITION = 2**63 - 1  # the largest signed 64-bit integer, SQLite's and PostgreSQL's
_FEED = cast(Table, FeedRow.__table__)  # the table itself, for a Core insert
_ADD_ROWS = insert(_FEED)  # built once, the rows its parameters


def record(session: Session, event_id: str, operation_id: str, kind: str, at: str) -> None:
    """Enter ``event_id`` into the feed when ``session`` commits."""
    session.info.setdefault(PENDING, []).append((event_id, operation_id, kind, at))


def status_changed(session: Session, operation_id: str, written: Written | None = None) -> None:
    """The operation's status was changed by a plain statement in ``session`` (the
    journal's ``complete``, ``start_operation``): told as a change made through the ORM
    is (``_changing``). ``written``: what that statement left in the columns a feed row
    copies, so they are not read back (the latest one told wins; a row the session holds
    is read from the row)."""
    session.info.setdefault(CHANGED, set()).add(operation_id)
    if written is not None:
        session.info.setdefault(WRITTEN, {})[operation_id] = written


def returned(session: Session, operation_id: str, written: Written) -> None:
    """A plain statement in ``session`` that changed no status returned the columns a feed
    row copies as it left them (``UPDATE … RETURNING``): not read back at the commit
    unless a later statement tells otherwise (the latest one told wins; a row the session
    holds is read from the row). Nothing is entered for it: its events are."""
    session.info.setdefault(WRITTEN, {})[operation_id] = written


class Written(NamedTuple):
    """The columns of an operation a feed row copies, as a plain statement wrote them."""

    kind: str
    repository_name: str
    status: str
    code: str | None


_OPERATIONS = cast(Table, OperationRow.__table__)
# what a feed row copies of its operation, built once: read as plain columns after the
# flush, so as the transaction commits them whether written through the ORM or not
_OPERATION_OF = select(
    _OPERATIONS.c.kind, _OPERATIONS.c.repository_name, _OPERATIONS.c.status, _OPERATIONS.c.code
).where(_OPERATIONS.c.operation_id == bindparam("feed_operation_id", type_=String()))


def _operation_of(session: Session, operation_id: str, written: dict[str, Written]) -> Any:
    """The operation's row as the session holds it, else as a plain statement of the
    journal wrote it, else read as plain columns."""
    held = session.identity_map.get(identity_key(OperationRow, operation_id))
    if held is not None:
        return held
    if operation_id in written:
        return written[operation_id]
    return db.run(session, _OPERATION_OF, {"feed_operation_id": operation_id}).first()


@event.listens_for(Session, "before_commit")
def enter(session: Session) -> None:
    """Add the feed rows of what this session did (what its commit does first; also
    called by ``promoter.engine.operation.rehearsal``, which never commits)."""
    if not session.info.get(PENDING) and not session.info.get(CHANGED):
        return
    session.flush()  # every other change first: the feed lock is taken last
    pending: list[tuple[str | None, str, str, str]] = session.info.pop(PENDING, [])
    changed: set[str] = session.info.pop(CHANGED, set())
    written: dict[str, Written] = session.info.pop(WRITTEN, {})
    with_events = {operation_id for _, operation_id, _, _ in pending}
    at = rfc3339(utcnow())
    pending += [(None, op_id, "status", at) for op_id in sorted(changed - with_events)]
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_KEY})
    rows: list[dict[str, Any]] = []
    operations: dict[str, Any] = {}
    for event_id, operation_id, kind, when in pending:
        if operation_id not in operations:
            operations[operation_id] = _operation_of(session, operation_id, written)
        operation = operations[operation_id]
        if operation is None:  # the event's foreign key makes this impossible
            continue
        rows.append(
            {
                "event_id": event_id,
                "operation_id": operation_id,
                "operation_kind": operation.kind,
                "repository_name": operation.repository_name,
                "kind": kind,
                "status": str(operation.status),
                "code": operation.code,
                "at": when,
            }
        )
    if rows:  # in the order given; a plain INSERT: no ORM object is built for a feed row
        db.run(session, _ADD_ROWS, rows)


@event.listens_for(Session, "before_flush")
def _changing(session: Session, _context: Any, _instances: Any) -> None:
    # before the flush: the status is the row's version column, so the flush itself
    # expires it (to read back what was written) and its history is gone after it
    for row in [*session.new, *session.dirty]:
        if isinstance(row, OperationRow) and inspect(row).attrs.status.history.has_changes():
            session.info.setdefault(CHANGED, set()).add(row.operation_id)


@event.listens_for(Session, "after_flush")
def _wrote(session: Session, _context: Any) -> None:
    session.info[WROTE] = True


@event.listens_for(Session, "do_orm_execute")
def _wrote_statement(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        state.session.info[WROTE] = True


@event.listens_for(Session, "after_commit")
def _notify(session: Session) -> None:
    if session.info.pop(WROTE, False):
        COMMITS.notify()


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    for key in (PENDING, CHANGED, WRITTEN, WROTE):
        session.info.pop(key, None)


def cursor(position: int) -> str:
    return f"evc_{position:016x}"


def position(value: str | None) -> int:
    """The position a cursor stands for; no cursor is the start of the ledger."""
    if value is None or value == "":
        return 0
    match = CURSOR.fullmatch(value)
    if match is None:
        raise BadRequest("the cursor is not one this daemon gave out", cursor=value[:40])
    found = int(match.group(1), 16)
    if found > LAST_POSITION:  # no row can have it; the database's integers stop there
        raise BadRequest("the cursor is not one this daemon gave out", cursor=value[:40])
    return found


def after(session: Session, start: int, limit: int) -> list[FeedRow]:
    # bound as a 64-bit integer: PostgreSQL's column is 32-bit, and a cursor past its range
    # must read as "after every row", never as an out-of-range parameter
    query = select(FeedRow).where(FeedRow.position > literal(start, BigInteger))
    query = query.order_by(FeedRow.position)
    return list(session.scalars(query.limit(limit)))


def as_event(row: FeedRow) -> FeedEvent:
    """A feed row as the watch feed answers it (``as_wire``'s members, as its model)."""
    return FeedEvent.model_construct(
        cursor=cursor(row.position),
        event_id=row.event_id,
        operation_id=row.operation_id,
        operation_kind=row.operation_kind,
        repository=row.repository_name,
        kind=row.kind,
        status=row.status,
        code=row.code,
        at=row.at,
    )


def as_wire(row: FeedRow) -> dict[str, Any]:
    return {
        "cursor": cursor(row.position),
        "event_id": row.event_id,
        "operation_id": row.operation_id,
        "operation_kind": row.operation_kind,
        "repository": row.repository_name,
        "kind": row.kind,
        "status": row.status,
        "code": row.code,
        "at": row.at,
    }
