"""Console sessions: the operator token exchanged for a session id, and its CSRF token.

``Sessions`` keeps, in the daemon's memory, one entry per logged-in browser: a random
session id (the cookie's value), the role it was granted and a random CSRF token that
every form of that session carries. ``login_nonce`` is the double-submit token of the
login form, which has no session yet. Comparisons are constant-time.

Deliberately not here: persistence. A restart logs every browser out, and the token
itself is never stored or echoed; cookies and headers are set by ``promoter.api.ui.web``.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from dataclasses import dataclass

COOKIE = "promoter_ui"
LOGIN_COOKIE = "promoter_ui_login"
MAX_SESSIONS = 256


@dataclass(frozen=True)
class Session:
    session_id: str
    role: str
    csrf: str


class Sessions:
    """Session id → ``Session``, bounded (the oldest is dropped past ``MAX_SESSIONS``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def open(self, role: str) -> Session:
        session = Session(secrets.token_urlsafe(32), role, secrets.token_urlsafe(32))
        with self._lock:
            while len(self._by_id) >= MAX_SESSIONS:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            for known, session in self._by_id.items():
                if hmac.compare_digest(known.encode(), session_id.encode()):
                    return session
        return None

    def close(self, session_id: str) -> None:
        with self._lock:
            self._by_id.pop(session_id, None)


def same_token(expected: str, given: str | None) -> bool:
    """Whether a form's CSRF token matches (constant-time; a missing one never does)."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())
