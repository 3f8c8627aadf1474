"""Bearer credentials: the orchestrator and operator tokens and executor tokens.

The two trusted tokens are random strings created on first start in
``<state>/credentials/{orchestrator,operator}.token`` (mode 0600). Executor tokens are
minted on request, bound to one ``executor_run_id``, expiring, and stored only as their
sha256. This module decides *who* a token is; what a role may do is the API's business.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

from sqlalchemy import select

from promoter.domain.canonical import parse_rfc3339, rfc3339, utcnow
from promoter.errors import ConfigError, Unauthenticated
from promoter.store.db import Database
from promoter.store.durable import make_dirs, write_private
from promoter.store.tables import ExecutorTokenRow

Role = Literal["executor", "orchestrator", "operator"]
TRUSTED_ROLES: tuple[Role, ...] = ("orchestrator", "operator")


@dataclass(frozen=True)
class Principal:
    role: Role
    run_id: str | None = None


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
        info = path.lstat()
        if not path.is_file() or path.is_symlink() or info.st_mode & 0o077:
            raise ConfigError(f"{path} must be a regular file readable only by its owner (0600)")
        tokens[role] = path.read_text(encoding="utf-8").strip()
    return tokens


class Authenticator:
    def __init__(self, db: Database, trusted: dict[Role, str]) -> None:
        self._db = db
        self._trusted = trusted

    def mint_executor_token(self, run_id: str, ttl_seconds: int) -> tuple[str, str]:
        token = "pex_" + secrets.token_urlsafe(32)
        now = utcnow()
        expires_at = rfc3339(now + timedelta(seconds=ttl_seconds))
        with self._db.session() as session:
            session.add(
                ExecutorTokenRow(
                    token_sha256=token_sha256(token),
                    executor_run_id=run_id,
                    expires_at=expires_at,
                    created_at=rfc3339(now),
                )
            )
        return token, expires_at

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("an Authorization: Bearer token is required")
        for role, secret in self._trusted.items():
            if hmac.compare_digest(token.encode(), secret.encode()):
                return Principal(role=role)
        with self._db.session() as session:
            row = session.scalar(
                select(ExecutorTokenRow).where(ExecutorTokenRow.token_sha256 == token_sha256(token))
            )
        if row is None:
            raise Unauthenticated("the token is not known")
        if parse_rfc3339(row.expires_at) <= utcnow():
            raise Unauthenticated("the executor token has expired", expired_at=row.expires_at)
        return Principal(role="executor", run_id=row.executor_run_id)
