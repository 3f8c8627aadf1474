"""Console sessions: the operator token exchanged for a session id, and its CSRF token.

``Sessions`` keeps, in the daemon's memory, one entry per logged-in browser: a random
session id (the cookie's value), the role it was granted, the name of the credential that
logged in (what its decisions record as the approver) and a random CSRF token that
every form of that session carries. ``LOGIN_COOKIE`` carries the double-submit token of the
login form, which has no session yet. Comparisons are constant-time; a session idle for
``IDLE_SECONDS`` ends.

Deliberately not here: persistence. A restart logs every browser out, and the token
itself is never stored or echoed; cookies and headers are set by ``promoter.api.ui.web``.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

COOKIE = "promoter_ui"
LOGIN_COOKIE = "promoter_ui_login"
MAX_SESSIONS = 256
IDLE_SECONDS = 8 * 3600.0  # a session unused this long is gone


@dataclass(frozen=True)
class Session:
    session_id: str
    role: str
    csrf: str
    last_used: float
    name: str = ""  # the credential that logged in: the approver its decisions record


class Sessions:
    """Session id → ``Session``, bounded (the oldest is dropped past ``MAX_SESSIONS``);
    a session idle for ``idle_seconds`` (on ``clock``, monotonic) is dropped when next asked.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, idle_seconds: float = IDLE_SECONDS
    ) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}
        self._clock = clock
        self._idle = idle_seconds

    def open(self, role: str, name: str = "") -> Session:
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        session = Session(token, role, csrf, self._clock(), name or role)
        with self._lock:
            while len(self._by_id) >= MAX_SESSIONS:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            for known, session in list(self._by_id.items()):
                if not hmac.compare_digest(known.encode(), session_id.encode()):
                    continue
                if now - session.last_used >= self._idle:
                    del self._by_id[known]
                    return None
                self._by_id[known] = replace(session, last_used=now)
                return self._by_id[known]
        return None

    def close(self, session_id: str) -> None:
        with self._lock:
            self._by_id.pop(session_id, None)


def same_token(expected: str, given: str | None) -> bool:
    """Whether a form's CSRF token matches (constant-time; a missing one never does)."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())
