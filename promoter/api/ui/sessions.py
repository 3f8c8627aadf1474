"""Console sessions: the operator token exchanged for a session id, and its CSRF token.

``Sessions`` keeps one row a logged-in browser in the ledger (``promoter.store.
console_sessions``), so every serving process and every host of the ledger serves every
logged-in browser. A row holds the session id's sha256 (never the id: whoever reads the
ledger cannot present a session), the role, the credential's name and token hash, and
when it opened, was last used and ends at the latest. The CSRF token is not stored: it
is an HMAC of the session id, so only the holder of the id can compute it. A session ends
after ``lifetime_seconds``, after ``idle_seconds`` unused (a use is written when the last
one written is ``TOUCH_SECONDS`` old or more, so it may end up to that much early), when
``close``d, or when its credential is gone (``end_credential``, called by
``promoter.api.ui.web`` after its check against the ledger, and by the credential's
removal) (protocol: api#console-sessions). Past ``MAX_SESSIONS`` in the ledger the oldest
is dropped. ``listing()`` describes the live sessions for ``promoter credentials list``.
``ended_why(session_id)`` says why a session its credential's removal ended (``revoked``)
to the holder of that session's id only, until the session would have ended anyway.

Every method is blocking (the ledger): call it on the operator's threads. Writes are not
flushed (``durable=False``): a session lost in a power cut means logging in again.

Not here: cookies and headers (``promoter.api.ui.web``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from promoter.store import console_sessions
from promoter.store.console_sessions import REVOKED, ConsoleSession
from promoter.store.db import Database

__all__ = [
    "COOKIE",
    "IDLE_SECONDS",
    "LIFETIME_SECONDS",
    "LOGIN_COOKIE",
    "MAX_SESSIONS",
    "REVOKED",
    "TOUCH_SECONDS",
    "Session",
    "Sessions",
    "csrf_of",
    "id_sha256",
    "same_token",
]

COOKIE = "promoter_ui"
LOGIN_COOKIE = "promoter_ui_login"
MAX_SESSIONS = 256  # in the ledger, every host's together
IDLE_SECONDS = 8 * 3600.0  # a session unused this long is gone
LIFETIME_SECONDS = 12 * 3600.0  # a session this old is gone, used or not
TOUCH_SECONDS = 60.0  # a use is written when the last one written is this old
_CSRF_LABEL = b"promoter console csrf"


@dataclass(frozen=True)
class Session:
    session_id: str
    role: str
    csrf: str
    last_used: float
    name: str = ""  # the credential that logged in: the approver its decisions record
    credential: str = ""  # sha256 of the credential's token when it logged in
    opened: float = 0.0  # wall-clock seconds
    expires: float = 0.0  # wall-clock seconds: its lifetime's end


def id_sha256(session_id: str) -> str:
    """The digest the ledger knows a session by."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def csrf_of(session_id: str) -> str:
    """The session's CSRF token: an HMAC keyed with its id (no one else can compute it)."""
    mac = hmac.new(session_id.encode("utf-8"), _CSRF_LABEL, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


class Sessions:
    """The console's sessions in the ledger ``db``, on ``clock`` (wall-clock seconds)."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], float] = time.time,
        idle_seconds: float = IDLE_SECONDS,
        lifetime_seconds: float = LIFETIME_SECONDS,
    ) -> None:
        self._db = db
        self._clock = clock
        self._idle = idle_seconds
        self._lifetime = lifetime_seconds

    def open(self, role: str, name: str = "", credential: str = "") -> Session:
        token = secrets.token_urlsafe(32)
        now = self._clock()
        record = ConsoleSession(
            id_sha256(token), role, name or role, credential, now, now, now + self._lifetime
        )
        with self._db.session(durable=False) as session:
            console_sessions.add(
                session, record, bound=MAX_SESSIONS, now=now, idle_seconds=self._idle
            )
        return _session(token, record)

    def _ended(self, record: ConsoleSession, now: float) -> bool:
        return now >= record.expires_at or now - record.used_at >= self._idle

    def get(self, session_id: str | None) -> Session | None:
        """The live session of ``session_id``, its use recorded; None when there is none
        or it ended (then its row goes). The ledger is searched by the id's sha256, so
        how long the search takes says nothing of the id."""
        if not session_id:
            return None
        digest = id_sha256(session_id)
        now = self._clock()
        with self._db.session(durable=False) as session:
            record = console_sessions.find(session, digest)
            if record is None or not hmac.compare_digest(record.session_sha256, digest):
                return None
            if self._ended(record, now):
                console_sessions.remove(session, digest)
                return None
            if now - record.used_at >= TOUCH_SECONDS:
                console_sessions.touch(session, digest, now)
        return _session(session_id, record)

    def ended_why(self, session_id: str | None) -> str | None:
        """``"revoked"`` when the session of ``session_id`` was ended by its credential's
        removal (or replacement) and would still be live otherwise; None for any other
        id, live, closed, expired or unknown."""
        if not session_id:
            return None
        with self._db.session(durable=False) as session:
            return console_sessions.ended_why(session, id_sha256(session_id), self._clock())

    def close(self, session_id: str) -> None:
        with self._db.session(durable=False) as session:
            console_sessions.remove(session, id_sha256(session_id))

    def end_credential(self, name: str) -> int:
        """End every session of the credential ``name``; how many there were."""
        with self._db.session(durable=False) as session:
            return console_sessions.remove_name(session, name)

    def listing(self) -> list[dict[str, Any]]:
        """The live sessions: credential name, role, opened and latest end (wall-clock
        seconds), oldest first. Ids and CSRF tokens are never listed."""
        with self._db.session() as session:
            live = console_sessions.live(session, self._clock(), self._idle)
        return [
            {
                "name": s.name,
                "role": s.role,
                "opened_at": round(s.opened_at, 3),
                "expires_at": round(s.expires_at, 3),
            }
            for s in live
        ]


def _session(session_id: str, record: ConsoleSession) -> Session:
    return Session(
        session_id,
        record.role,
        csrf_of(session_id),
        record.used_at,
        record.name,
        record.credential_sha256,
        record.opened_at,
        record.expires_at,
    )


def same_token(expected: str, given: str | None) -> bool:
    """Whether a form's CSRF token matches (constant-time; a missing one never does)."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())
