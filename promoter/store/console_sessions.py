"""Console sessions in the ledger: one row a logged-in browser, found by its id's sha256.

``add`` records a session (dropping ended ones first, and the oldest past the bound);
``find`` reads one by its id's sha256; ``touch`` records a use; ``remove`` and
``remove_name`` end one, or every session of a credential; ``live`` lists those not
ended, oldest first. ``remove_name`` (a credential removed or replaced) leaves a mark per
session it ended, kept until that session's own latest end, which ``ended_why`` reads:
``"revoked"``, so that the login page can tell that browser why it was sent there. Rows
never leave this module: callers get ``ConsoleSession`` records. Times are wall-clock
seconds, given by the caller.

Deliberately not here: session ids, CSRF tokens, the clock and the rules of when a
session ends (``promoter.api.ui.sessions``). The raw id is never stored: whoever reads
the ledger (a backup) cannot present a session.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, delete, func, not_, or_, select, update
from sqlalchemy.orm import Session

from promoter.store.tables import ConsoleSessionEndedRow, ConsoleSessionRow

__all__ = [
    "REVOKED",
    "ConsoleSession",
    "add",
    "ended_why",
    "find",
    "live",
    "remove",
    "remove_name",
    "touch",
]

REVOKED = "revoked"  # a session its credential's removal (or replacement) ended


@dataclass(frozen=True)
class ConsoleSession:
    session_sha256: str
    role: str
    name: str
    credential_sha256: str
    opened_at: float
    used_at: float
    expires_at: float


def _record(row: ConsoleSessionRow) -> ConsoleSession:
    return ConsoleSession(
        row.session_sha256,
        row.role,
        row.name,
        row.credential_sha256,
        row.opened_at,
        row.used_at,
        row.expires_at,
    )


def _ended(now: float, idle_seconds: float) -> ColumnElement[bool]:
    """The rows ended at ``now``: past their lifetime, or unused ``idle_seconds``."""
    return or_(ConsoleSessionRow.expires_at <= now, ConsoleSessionRow.used_at <= now - idle_seconds)


def add(
    session: Session, record: ConsoleSession, *, bound: int, now: float, idle_seconds: float
) -> None:
    """Record ``record`` in ``session``; first drop the ended rows, then the oldest while
    ``bound`` or more remain."""
    session.execute(
        delete(ConsoleSessionRow)
        .where(_ended(now, idle_seconds))
        .execution_options(synchronize_session=False)
    )
    session.execute(
        delete(ConsoleSessionEndedRow)
        .where(ConsoleSessionEndedRow.until <= now)
        .execution_options(synchronize_session=False)
    )
    count = session.scalar(select(func.count()).select_from(ConsoleSessionRow)) or 0
    if count >= bound:
        oldest = select(ConsoleSessionRow.session_sha256).order_by(
            ConsoleSessionRow.opened_at, ConsoleSessionRow.session_sha256
        )
        doomed = list(session.scalars(oldest.limit(count - bound + 1)))
        session.execute(
            delete(ConsoleSessionRow)
            .where(ConsoleSessionRow.session_sha256.in_(doomed))
            .execution_options(synchronize_session=False)
        )
    session.add(
        ConsoleSessionRow(
            session_sha256=record.session_sha256,
            role=record.role,
            name=record.name,
            credential_sha256=record.credential_sha256,
            opened_at=record.opened_at,
            used_at=record.used_at,
            expires_at=record.expires_at,
        )
    )


def find(session: Session, session_sha256: str) -> ConsoleSession | None:
    """The session whose id has sha256 ``session_sha256``, ended or not; None if none."""
    row = session.get(ConsoleSessionRow, session_sha256)
    return None if row is None else _record(row)


def touch(session: Session, session_sha256: str, now: float) -> None:
    """Record a use of the session at ``now``."""
    session.execute(
        update(ConsoleSessionRow)
        .where(ConsoleSessionRow.session_sha256 == session_sha256)
        .values(used_at=now)
        .execution_options(synchronize_session=False)
    )


def remove(session: Session, session_sha256: str) -> int:
    """End the session of ``session_sha256``; how many rows went (0 or 1)."""
    result = session.execute(
        delete(ConsoleSessionRow)
        .where(ConsoleSessionRow.session_sha256 == session_sha256)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def remove_name(session: Session, name: str) -> int:
    """End every session of the credential ``name``, each marked ``REVOKED`` until its own
    latest end (a concurrent removal marks only what its own delete took); how many
    there were."""
    ended = session.execute(
        delete(ConsoleSessionRow)
        .where(ConsoleSessionRow.name == name)
        .returning(ConsoleSessionRow.session_sha256, ConsoleSessionRow.expires_at)
        .execution_options(synchronize_session=False)
    ).all()
    for digest, until in ended:
        session.add(ConsoleSessionEndedRow(session_sha256=digest, reason=REVOKED, until=until))
    return len(ended)


def ended_why(session: Session, session_sha256: str, now: float) -> str | None:
    """Why the session of ``session_sha256`` ended (``REVOKED``), while that mark lasts;
    None for a live, closed, expired or unknown session."""
    row = session.get(ConsoleSessionEndedRow, session_sha256)
    return row.reason if row is not None and row.until > now else None


def live(session: Session, now: float, idle_seconds: float) -> list[ConsoleSession]:
    """The sessions not ended at ``now``, oldest first."""
    query = (
        select(ConsoleSessionRow)
        .where(not_(_ended(now, idle_seconds)))
        .order_by(ConsoleSessionRow.opened_at, ConsoleSessionRow.session_sha256)
    )
    return [_record(row) for row in session.scalars(query)]
