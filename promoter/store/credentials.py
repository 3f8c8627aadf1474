"""Bearer credentials: the orchestrator and operator tokens, named operators, executors.

The two trusted tokens are random strings created on first start in
``<state>/credentials/{orchestrator,operator}.token`` (mode 0600); each is named after its
role (``orchestrator``, ``operator``). More operator credentials, each with its own name,
are files ``<state>/credentials/operators/<name>.token`` (mode 0600) made by
``promoter credentials add NAME``. Executor tokens are minted on request, bound to one
``executor_run_id``, expiring, and stored only as their sha256.

One cluster, one set of credentials (protocol: hosts#one-set-of-credentials): every orchestrator and
operator credential is published into the ledger (``credentials``: the token's sha256, role,
name, the host that published it; never the token) and verified there, so a token is
valid on every host of the ledger. A daemon publishes its trusted tokens and its folder's
named operators at start and whenever that folder changed (a token file edited in place
is not noticed: remove the credential and add it again to rotate it); ``credentials
add`` publishes at once. Removal (``remove_named``) marks the rows removed, on whichever
host it is run, and a removed token is never published again, so a copy of its file
left on another host does not bring it back. This daemon's own trusted tokens are
compared in memory first (they answer through a database outage); any other token needs
the ledger.

This module decides *who* a token is: a ``Principal`` with its role and its name. The
name is what an approval records as its approver (protocol: runs#approvals); nothing a request says
about itself can change it. What a role may do is the API's business.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal, cast

from sqlalchemy import String, Table, bindparam, select, update
from sqlalchemy.orm import Session

from promoter.domain.canonical import parse_rfc3339, rfc3339, utcnow
from promoter.errors import ConfigError, Unauthenticated
from promoter.store import console_sessions
from promoter.store.db import Database
from promoter.store.durable import make_dirs, write_private
from promoter.store.tables import CredentialRow, ExecutorTokenRow

Role = Literal["executor", "orchestrator", "operator"]
TRUSTED_ROLES: tuple[Role, ...] = ("orchestrator", "operator")
OPERATORS_DIR = "operators"
CREDENTIAL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
EXECUTOR_PREFIX = "pex_"
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


def add_operator(
    credentials_dir: Path, name: str, db: Database | None = None, host_id: str = ""
) -> str:
    """Make the named operator credential ``name``; return its token (shown once). With
    the ledger (``db``) it is published there at once and a name live on any host of the
    ledger is refused; without one the daemon publishes it at its next request."""
    path = _operator_path(credentials_dir, name)
    make_dirs(path.parent, mode=0o700)
    if path.exists() or path.is_symlink():
        raise ConfigError(f"an operator credential named {name!r} exists already")
    if db is not None:
        with db.session() as session:
            if name in live_names(session):
                raise ConfigError(
                    f"an operator credential named {name!r} exists already on another host"
                )
    write_private(path, ("pop_" + secrets.token_urlsafe(32) + "\n").encode())
    token = _read_private(path)
    if db is not None:
        with db.session() as session:
            publish(session, token_sha256(token), "operator", name, host_id)
    return token


def remove_operator(
    credentials_dir: Path, name: str, db: Database | None = None, host_id: str = ""
) -> None:
    """Remove the named operator credential ``name``: its rows in the ledger (``db``),
    wherever it was added, and its own 0600 file here if there is one (nothing else)."""
    path = _operator_path(credentials_dir, name)
    here = path.exists() or path.is_symlink()
    if here:
        token = _read_private(path)  # a regular private file of ours, not a link
    ended = 0
    if db is not None:
        with db.session() as session:
            if here:  # published first, so the copy of a file is never valid again
                publish(session, token_sha256(token), "operator", name, host_id)
            ended = remove_named(session, name, host_id)
    if not here and not ended:
        raise ConfigError(f"no operator credential named {name!r}")
    if here:
        path.unlink()


def operator_names(credentials_dir: Path, db: Database | None = None) -> list[str]:
    """The names of the named operator credentials, sorted: those live in the ledger
    (``db``) and this host's files not removed there."""
    files = _named_operators(credentials_dir / OPERATORS_DIR)
    if db is None:
        return sorted(files)
    with db.session() as session:
        names = set(live_names(session))
        names |= {n for n, t in files.items() if not removed(session, token_sha256(t))}
    return sorted(names)


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


def publish(session: Session, digest: str, role: Role, name: str, host_id: str) -> bool:
    """Record a credential's sha256 in the ledger unless it is there already (live or
    removed: a removed one is never published again). Whether it was added."""
    if session.get(CredentialRow, digest) is not None:
        return False
    session.add(
        CredentialRow(
            token_sha256=digest, role=role, name=name, host_id=host_id, added_at=rfc3339(utcnow())
        )
    )
    session.flush()
    return True


def live_names(session: Session) -> list[str]:
    """The names of the named operator credentials live in the ledger, sorted."""
    query = select(CredentialRow.name).where(
        CredentialRow.removed_at.is_(None),
        CredentialRow.role == "operator",
        CredentialRow.name.not_in(TRUSTED_ROLES),
    )
    return sorted(set(session.scalars(query)))


def remove_named(session: Session, name: str, host_id: str) -> int:
    """Mark every live ledger row of the named operator credential ``name`` removed (on
    ``host_id``) and end its console sessions, whichever process or host holds them; how
    many rows were."""
    _operator_path(Path("."), name)  # the name's rules: never a trusted role's
    console_sessions.remove_name(session, name)
    result = session.execute(
        update(CredentialRow)
        .where(CredentialRow.name == name, CredentialRow.removed_at.is_(None))
        .values(removed_at=rfc3339(utcnow()), removed_on=host_id)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def removed(session: Session, digest: str) -> bool:
    """Whether the ledger records the credential of ``digest`` as removed."""
    row = session.get(CredentialRow, digest)
    return row is not None and row.removed_at is not None


# a credential's row by the token's sha256, built once: every request of another host's
# or a named credential reads it
_CREDENTIAL = select(CredentialRow).where(
    CredentialRow.token_sha256 == bindparam("token_sha256", type_=String())
)

# an executor token's row by the token's sha256, built once: every executor request reads it
# Core, built once: two columns of one row, read without an ORM session (every request
# of an executor looks its token up)
# (on the table's own columns: the ORM has no part in running it)
_TOKENS = cast(Table, ExecutorTokenRow.__table__)
_TOKEN = select(_TOKENS.c.executor_run_id, _TOKENS.c.expires_at).where(
    _TOKENS.c.token_sha256 == bindparam("token_sha256", type_=String())
)


class Authenticator:
    def __init__(
        self,
        db: Database,
        trusted: dict[Role, str],
        credentials_dir: Path | None = None,
        host_id: str = "",
    ) -> None:
        self._db = db
        self._trusted = trusted
        self._operators_dir = None if credentials_dir is None else credentials_dir / OPERATORS_DIR
        self._host_id = host_id
        self._operators: int | None = None
        self._racy = True
        self._lock = threading.Lock()

    def publish(self) -> None:
        """Publish this host's trusted tokens and its folder's named operators (at start)."""
        with self._lock:
            self._publish(self._folder_stamp(), force=True)

    def _folder_stamp(self) -> int | None:
        if self._operators_dir is None:
            return None
        try:
            return self._operators_dir.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def _publish(self, stamp: int | None, *, force: bool = False) -> None:
        """Publish what is not in the ledger yet (a removed token stays removed)."""
        named = {} if self._operators_dir is None else _named_operators(self._operators_dir)
        with self._db.session() as session:
            if force:
                for role, secret in self._trusted.items():
                    publish(session, token_sha256(secret), role, role, self._host_id)
            for name, secret in named.items():
                publish(session, token_sha256(secret), "operator", name, self._host_id)
        self._operators = stamp
        self._racy = stamp is not None and time.time_ns() - stamp < RACY_NS

    def _sync(self) -> None:
        """Publish the folder's named operators whenever it changed.

        The folder's mtime is the cache key, trusted only once it is older than
        ``RACY_NS`` when read (as git treats a racily clean index entry): a credential
        added within the timestamp's granularity of the last read is still published.
        """
        stamp = self._folder_stamp()
        with self._lock:
            if stamp is not None and (stamp != self._operators or self._racy):
                self._publish(stamp)

    def mint_executor_token(self, run_id: str, ttl_seconds: int) -> tuple[str, str]:
        with self._db.session() as session:
            return add_executor_token(session, run_id, ttl_seconds)

    def trusted(self, token: str | None) -> Principal | None:
        """The principal of this host's trusted token (the orchestrator's or the
        operator's), compared in memory with nothing read; None for any other token.
        ``authenticate`` checks these first too."""
        if not token:
            return None
        for role, secret in self._trusted.items():
            if hmac.compare_digest(token.encode(), secret.encode()):
                return Principal(role=role, name=role)
        return None

    def ledger(self, token: str | None) -> Principal | None:
        """The principal of a credential live in the ledger (a named operator's, or
        another host's trusted token), or None."""
        if not token:
            return None
        self._sync()
        with self._db.session() as session:
            row = session.scalar(_CREDENTIAL, {"token_sha256": token_sha256(token)})
            if row is None or row.removed_at is not None or row.role not in TRUSTED_ROLES:
                return None
            role: Role = "operator" if row.role == "operator" else "orchestrator"
            return Principal(role=role, name=row.name)

    def named_operator(self, token: str | None) -> Principal | None:
        """The principal of an operator credential live in the ledger, or None."""
        found = self.ledger(token)
        return found if found is not None and found.role == "operator" else None

    def credential_live(self, name: str, digest: str) -> bool:
        """Whether the credential named ``name`` whose token has sha256 ``digest`` is still
        valid: this host's trusted token of that name, or a live ledger row of that name
        (what a console session checks before each use; removal on any host ends it)."""
        for role, secret in self._trusted.items():
            if role == name and hmac.compare_digest(token_sha256(secret), digest):
                return True
        self._sync()
        with self._db.session() as session:
            row = session.scalar(_CREDENTIAL, {"token_sha256": digest})
            return row is not None and row.removed_at is None and row.name == name

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthenticated("an Authorization: Bearer token is required")
        found = self.trusted(token)
        if found is None and not token.startswith(EXECUTOR_PREFIX):
            found = self.ledger(token)
        if found is not None:
            return found
        row = self._db.first(_TOKEN, {"token_sha256": token_sha256(token)})
        if row is None:
            raise Unauthenticated("the token is not known")
        if parse_rfc3339(row.expires_at) <= utcnow():
            raise Unauthenticated("the executor token has expired", expired_at=row.expires_at)
        return Principal(role="executor", run_id=row.executor_run_id, name=row.executor_run_id)


def add_executor_token(session: Session, run_id: str, ttl_seconds: int) -> tuple[str, str]:
    """A new executor token for ``run_id`` added in ``session`` (valid once it commits):
    ``(token, expires_at)``; only the token's sha256 is stored."""
    token = EXECUTOR_PREFIX + secrets.token_urlsafe(32)
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
