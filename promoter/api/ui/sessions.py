"""Console sessions: the operator token exchanged for a session id, and its CSRF token.

``Sessions`` keeps, in the daemon's memory, one entry per logged-in browser (session id,
role, the credential's name and token hash, a CSRF token; compared in constant time) and
ends it after ``lifetime_seconds``, after ``idle_seconds`` unused, or when its credential
is gone (``end_credential``, called by ``promoter.api.ui.web`` after its check against the
ledger) (protocol: api#console-sessions). ``listing()`` and ``changed()`` describe the live
sessions for ``promoter credentials list``.

Not here: persistence (a restart logs every browser out), cookies and headers
(``promoter.api.ui.web``).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

COOKIE = "promoter_ui"
LOGIN_COOKIE = "promoter_ui_login"
MAX_SESSIONS = 256
IDLE_SECONDS = 8 * 3600.0  # a session unused this long is gone
LIFETIME_SECONDS = 12 * 3600.0  # a session this old is gone, used or not


@dataclass(frozen=True)
class Session:
    session_id: str
    role: str
    csrf: str
    last_used: float
    name: str = ""  # the credential that logged in: the approver its decisions record
    credential: str = ""  # sha256 of the credential's token when it logged in
    opened: float = 0.0  # on the table's clock
    opened_at: float = 0.0  # wall-clock seconds, for the listing


class Sessions:
    """Session id → ``Session``, bounded (the oldest is dropped past ``MAX_SESSIONS``).

    A session past ``lifetime_seconds`` since it opened, or idle for ``idle_seconds``
    (both on ``clock``, monotonic), is dropped when next asked; ``wall`` dates the listing.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        idle_seconds: float = IDLE_SECONDS,
        lifetime_seconds: float = LIFETIME_SECONDS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}
        self._clock = clock
        self._wall = wall
        self._idle = idle_seconds
        self._lifetime = lifetime_seconds
        self._changed = True

    def open(self, role: str, name: str = "", credential: str = "") -> Session:
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(token, role, csrf, now, name or role, credential, now, self._wall())
        with self._lock:
            while len(self._by_id) >= MAX_SESSIONS:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[session.session_id] = session
            self._changed = True
        return session

    def _ended(self, session: Session, now: float) -> bool:
        return now - session.last_used >= self._idle or now - session.opened >= self._lifetime

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            for known, session in list(self._by_id.items()):
                if not hmac.compare_digest(known.encode(), session_id.encode()):
                    continue
                if self._ended(session, now):
                    del self._by_id[known]
                    self._changed = True
                    return None
                self._by_id[known] = replace(session, last_used=now)
                return self._by_id[known]
        return None

    def close(self, session_id: str) -> None:
        with self._lock:
            if self._by_id.pop(session_id, None) is not None:
                self._changed = True

    def end_credential(self, name: str) -> int:
        """End every session of the credential ``name``; how many there were."""
        with self._lock:
            ended = [k for k, s in self._by_id.items() if s.name == name]
            for known in ended:
                del self._by_id[known]
            self._changed = self._changed or bool(ended)
        return len(ended)

    def listing(self) -> list[dict[str, Any]]:
        """The live sessions: credential name, role, opened and latest end (wall-clock
        seconds), oldest first. Ids and CSRF tokens are never listed."""
        now = self._clock()
        with self._lock:
            for known, session in list(self._by_id.items()):
                if self._ended(session, now):
                    del self._by_id[known]
            live = list(self._by_id.values())
        return [
            {
                "name": s.name,
                "role": s.role,
                "opened_at": round(s.opened_at, 3),
                "expires_at": round(s.opened_at + self._lifetime, 3),
            }
            for s in sorted(live, key=lambda s: s.opened)
        ]

    def changed(self) -> bool:
        """Whether sessions opened or ended since the last call (then resets)."""
        with self._lock:
            changed, self._changed = self._changed, False
        return changed


def same_token(expected: str, given: str | None) -> bool:
    """Whether a form's CSRF token matches (constant-time; a missing one never does)."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())
