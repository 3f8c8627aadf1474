"""Bearer credentials: the orchestrator and operator tokens, named operators, executors.

The two trusted tokens are random strings created on first start in
``<state>/credentials/{orchestrator,operator}.token`` (mode 0600); each is named after its
role (``orchestrator``, ``operator``). More operator credentials, each with its own name,
are files ``<state>/credentials/operators/<name>.token`` (mode 0600) made by
``promoter credentials add NAME``; the daemon re-reads that folder when it changes, so
a new or removed credential counts from the next request on (a token file edited in
place is not noticed: remove the credential and add it again to rotate it). Executor
tokens are minted on request, bound to one ``executor_run_id``, expiring, and stored
only as their sha256.

This module decides *who* a token is: a ``Principal`` with its role and its name. The
name is what an approval records as its approver (SPEC §10.13); nothing a request says
about itself can change it. What a role may do is the API's business.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import String, bindparam, select
from sqlalchemy.orm import Session

from promoter.domain.canonical import parse_rfc3339, rfc3339, utcnow
from promoter.errors import ConfigError, Unauthenticated
from promoter.store.db import Database
from promoter.store.durable import make_dirs, write_private, write_replace
from promoter.store.tables import ExecutorTokenRow

Role = Literal["executor", "orchestrator", "operator"]
TRUSTED_ROLES: tuple[Role, ...] = ("orchestrator", "operator")
OPERATORS_DIR = "operators"
CREDENTIAL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
SESSIONS_FILE = "console-sessions.json"  # the daemon's listing of live console sessions
RACY_NS = 2_000_000_000  # a folder changed this recently is re-read on every request


@dataclass(frozen=True)
class Principal:
    """Who a token is: its role, the run an executor token is bound to, and its name
    (a trusted token's role, a named operator credential's name, an executor's run id)."""

    role: Role
    run_id: str | None = None
    name: str = ""


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def ensure_trusted_tokens(credentials_dir: Path) -> dict[Role, str]:
    """Create the orchestrator and operator tokens once; return both."""
    make_dirs(credentials_dir, mode=0o700)
    os.chmod(credentials_dir, 0o700)
    tokens: dict[Role, str] = {}
    for role in TRUSTED_ROLES:
        path = credentials_dir / f"{role}.token"
        if not path.exists():
            write_private(path, (f"p{role[:2]}_" + secrets.token_urlsafe(32) + "\n").encode())
        tokens[role] = _read_private(path)
    return tokens


def _read_private(path: Path) -> str:
    info = path.lstat()
    if not path.is_file() or path.is_symlink() or info.st_mode & 0o077:
        raise ConfigError(f"{path} must be a regular file readable only by its owner (0600)")
    return path.read_text(encoding="utf-8").strip()


def _operator_path(credentials_dir: Path, name: str) -> Path:
    if not CREDENTIAL_NAME.fullmatch(name) or name in TRUSTED_ROLES:
        raise ConfigError(
            f"a credential name is 1-63 of a-z 0-9 . _ - (starting with a letter or digit) "
            f"and not {' or '.join(TRUSTED_ROLES)}; got {name!r}"
        )
    return credentials_dir / OPERATORS_DIR / f"{name}.token"


def add_operator(credentials_dir: Path, name: str) -> str:
    """Make the named operator credential ``name``; return its token (shown once)."""
    path = _operator_path(credentials_dir, name)
    make_dirs(path.parent, mode=0o700)
    if path.exists() or path.is_symlink():
        raise ConfigError(f"an operator credential named {name!r} exists already")
    write_private(path, ("pop_" + secrets.token_urlsafe(32) + "\n").encode())
    return _read_private(path)


def remove_operator(credentials_dir: Path, name: str) -> None:
    """Remove the named operator credential ``name`` (its own 0600 file, nothing else)."""
    path = _operator_path(credentials_dir, name)
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"no operator credential named {name!r}")
    _read_private(path)  # a regular private file of ours, not a link or anything else
    path.unlink()


def write_sessions_listing(credentials_dir: Path, sessions: list[dict[str, Any]]) -> None:
    """Replace ``SESSIONS_FILE`` (0600) with the daemon's listing of live console sessions
    (names and times only, never an id), which ``promoter credentials list`` reads."""
    data = (json.dumps({"sessions": sessions}, sort_keys=True, indent=1) + "\n").encode()
    write_replace(credentials_dir / SESSIONS_FILE, data, mode=0o600)


def operator_names(credentials_dir: Path) -> list[str]:
    """The names of the named operator credentials, sorted."""
    return sorted(_named_operators(credentials_dir / OPERATORS_DIR))


def _named_operators(folder: Path) -> dict[str, str]:
    """Name → token of every ``<name>.token`` in ``folder`` (none when it is absent)."""
    found: dict[str, str] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        name = path.name.removesuffix(".token")
        if path.name.endswith(".token") and CREDENTIAL_NAME.fullmatch(name):
            found[name] = _read_private(path)
    return found


# an executor token's row by the token's sha256, built once: every executor request reads it
_TOKEN = select(ExecutorTokenRow).where(
    ExecutorTokenRow.token_sha256 == bindparam("token_sha256", type_=String())
)


class Authenticator:
    def __init__(
        self, db: Database, trusted: dict[Role, str], credentials_dir: Path | None = None
    ) -> None:
        self._db = db
        self._trusted = trusted
        self._operators_dir = None if credentials_dir is None else credentials_dir / OPERATORS_DIR
        self._operators: tuple[int | None, dict[str, str]] = (None, {})
        self._racy = True
        self._lock = threading.Lock()

    def _named(self) -> dict[str, str]:
        """The named operator credentials, re-read whenever their folder changed.

        The folder's mtime is the cache key, trusted only once it is older than
        ``RACY_NS`` when read (as git treats a racily clean index entry): a credential
        added or removed within the timestamp's granularity of the last read is still seen.
        """
        if self._operators_dir is None:
            return {}
        try:
            stamp: int | None = self._operators_dir.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp is None:
                self._operators = (None, {})
            elif stamp != self._operators[0] or self._racy:
                self._racy = time.time_ns() - stamp < RACY_NS
                self._operators = (stamp, _named_operators(self._operators_dir))
            return self._operators[1]

    def mint_executor_token(self, run_id: str, ttl_seconds: int) -> tuple[str, str]:
        with self._db.session() as session:
            return add_executor_token(session, run_id, ttl_seconds)

    def trusted(self, token: str | None) -> Principal | None:
        """The principal of a trusted token (the orchestrator's or the operator's), compared
        in memory with nothing read; None for any other token. ``authenticate`` checks
        these first too."""
        if not token:
            return None
        for role, secret in self._trusted.items():
            if hmac.compare_digest(token.encode(), secret.encode()):
                return Principal(role=role, name=role)
        return None

    def named_operator(self, token: str | None) -> Principal | None:
        """The principal of a named operator credential that exists now, or None (reads
        the folder's listing when it changed, never the database)."""
        if not token:
            return None
        for name, secret in self._named().items():
            if hmac.compare_digest(token.encode(), secret.encode()):
                return Principal(role="operator", name=name)
        return None

    def credential_digest(self, name: str) -> str | None:
        """The sha256 of the token the credential ``name`` holds now (a trusted role's name
        or a named operator's), or None once it was removed: what a console session made
        with it compares against before each use."""
        for role, secret in self._trusted.items():
            if role == name:
                return token_sha256(secret)
        named = self._named().get(name)
        return None if named is None else token_sha256(named)

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("an Authorization: Bearer token is required")
        found = self.trusted(token) or self.named_operator(token)
        if found is not None:
            return found
        with self._db.session() as session:
            row = session.scalar(_TOKEN, {"token_sha256": token_sha256(token)})
        if row is None:
            raise Unauthenticated("the token is not known")
        if parse_rfc3339(row.expires_at) <= utcnow():
            raise Unauthenticated("the executor token has expired", expired_at=row.expires_at)
        return Principal(role="executor", run_id=row.executor_run_id, name=row.executor_run_id)


def add_executor_token(session: Session, run_id: str, ttl_seconds: int) -> tuple[str, str]:
    """A new executor token for ``run_id`` added in ``session`` (valid once it commits):
    ``(token, expires_at)``; only the token's sha256 is stored."""
    token = "pex_" + secrets.token_urlsafe(32)
    now = utcnow()
    expires_at = rfc3339(now + timedelta(seconds=ttl_seconds))
    session.add(
        ExecutorTokenRow(
            token_sha256=token_sha256(token),
            executor_run_id=run_id,
            expires_at=expires_at,
            created_at=rfc3339(now),
        )
    )
    return token, expires_at
