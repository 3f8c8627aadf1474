"""The hosts of one ledger and their epochs (``hosts``, ``host_fences``).

A host's row holds its epoch, whether it is ``active`` or ``fenced``, the repository
identities its daemon is configured for and a host lease its heartbeat moves forward.
``register`` adds the row at a daemon's first start (epoch 1) and otherwise reads it;
``current`` reads it holding the host's lock shared until the transaction ends
(``standing`` the epoch check's three columns of it, the same way), and
``for_update`` (a fence's) holds it exclusive, so a fence waits for every transaction
that checked the epoch before it and commits after them. On PostgreSQL the lock is a
transaction-scoped advisory lock keyed by the host id (in memory: a ``FOR SHARE`` row lock
would write the row at every check); SQLite serializes writers by itself;
``beat`` moves the host lease forward only while the epoch is the one given; ``fence``
raises the epoch and journals who, when and to which host; ``admit`` makes a fenced
host active again at its raised epoch. ``publish_address`` records the base URL the
host's daemon serves on once it listens, and ``register`` the names of its repositories,
so every host can say who guards which repository (``guardian``) and where it answers.

Deliberately not here: the rules of fencing (``promoter.engine.fencing``), the
operations handed over (``promoter.store.journal``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from sqlalchemy import Connection, Row, Table, bindparam, select, text, update
from sqlalchemy.orm import Session

from promoter.store.db import run
from promoter.store.repo import now
from promoter.store.tables import HostFenceRow, HostRow

ACTIVE, FENCED = "active", "fenced"


@dataclass(frozen=True)
class Host:
    host_id: str
    epoch: int
    status: str
    repositories: list[str]
    registered_at: str
    lease_until: str | None
    fenced_at: str | None
    fenced_by: str | None
    fenced_to: str | None
    address: str | None = None
    repository_names: dict[str, str | None] | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "host_id": self.host_id,
            "epoch": self.epoch,
            "status": self.status,
            "repositories": list(self.repositories),
            "registered_at": self.registered_at,
            "lease_until": self.lease_until,
            "fenced_at": self.fenced_at,
            "fenced_by": self.fenced_by,
            "fenced_to": self.fenced_to,
            "address": self.address,
        }


def _record(row: HostRow | Row[Any]) -> Host:
    """A host row (an ORM object, or plain columns of the same names) as a ``Host``."""
    return Host(
        host_id=row.host_id,
        epoch=row.epoch,
        status=row.status,
        repositories=[str(r) for r in row.repositories],
        registered_at=row.registered_at,
        lease_until=row.lease_until,
        fenced_at=row.fenced_at,
        fenced_by=row.fenced_by,
        fenced_to=row.fenced_to,
        address=row.address,
        repository_names=(
            None if row.repository_names is None else dict(row.repository_names.items())
        ),
    )


def lock_key(host_id: str) -> int:
    """The advisory lock key of a host: 64 bits of sha256("promoter-host\0" + id), signed."""
    digest = hashlib.sha256(b"promoter-host\0" + host_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# the host's row as plain columns, built once: the epoch check of every transaction of an
# operation reads it, and needs no ORM object (nothing of it is ever written back)
_HOSTS = cast(Table, HostRow.__table__)  # the table itself, for a Core select
_CURRENT = select(*_HOSTS.c).where(_HOSTS.c.host_id == bindparam("host_id"))
_STANDING = select(_HOSTS.c.status, _HOSTS.c.epoch, _HOSTS.c.fenced_to).where(
    _HOSTS.c.host_id == bindparam("host_id")
)


class Standing(NamedTuple):
    """What the epoch check reads of a host's row: its status, epoch and successor."""

    status: str
    epoch: int
    fenced_to: str | None


def _lock(session: Session | Connection, host_id: str, *, read: bool) -> None:
    """On PostgreSQL, the host's advisory lock (shared to ``read``) until the transaction
    ends; SQLite serializes writers by itself."""
    bind = session if isinstance(session, Connection) else session.get_bind()
    if bind.dialect.name == "postgresql":
        take = "pg_advisory_xact_lock_shared" if read else "pg_advisory_xact_lock"
        session.execute(text(f"SELECT {take}(:key)"), {"key": lock_key(host_id)})


def _locked(session: Session, host_id: str) -> HostRow | None:
    _lock(session, host_id, read=False)
    query = select(HostRow).where(HostRow.host_id == host_id).with_for_update()
    return session.scalars(query.execution_options(populate_existing=True)).one_or_none()


def register(
    session: Session,
    host_id: str,
    repositories: Mapping[str, str] | Iterable[str],
    lease_until: str,
) -> tuple[Host, bool]:
    """This host's row, added at epoch 1 if there is none (``flush`` to learn of a
    concurrent twin); its configured repositories (identity to name, or identities alone)
    are recorded while it is active. Returns the row and whether it was added."""
    row = _locked(session, host_id)
    added = row is None
    named = repositories if isinstance(repositories, Mapping) else {}
    names = {identity: named.get(identity) for identity in sorted(set(repositories))}
    if row is None:
        row = HostRow(
            host_id=host_id,
            epoch=1,
            status=ACTIVE,
            repositories=sorted(names),
            registered_at=now(),
            lease_until=lease_until,
            repository_names=names,
        )
        session.add(row)
        session.flush()
    elif row.status == ACTIVE:
        row.repositories = sorted(names)
        row.repository_names = names
        row.registered_at, row.lease_until = now(), lease_until
    return _record(row), added


def publish_address(session: Session, host_id: str, address: str) -> None:
    """Record the base URL the host's daemon serves on (it knows it once it listens)."""
    session.execute(
        update(HostRow)
        .where(HostRow.host_id == host_id)
        .values(address=address)
        .execution_options(synchronize_session=False)
    )


def guardian(session: Session, identity: str, *, besides: str) -> Host | None:
    """The active host other than ``besides`` configured for repository ``identity``
    (the one registered last, should two claim it), or None."""
    found = [
        host
        for host in all_hosts(session)
        if host.host_id != besides and host.status == ACTIVE and identity in host.repositories
    ]
    return max(found, key=lambda host: host.registered_at) if found else None


def get(session: Session, host_id: str) -> Host | None:
    row = session.get(HostRow, host_id)
    return None if row is None else _record(row)


def current(session: Session | Connection, host_id: str) -> Host | None:
    """The host's row, its lock held shared until the transaction ends (read from the
    database every time, as plain columns: no ORM object is built or held; in a session
    or on a plain connection, ``Database.reading``)."""
    _lock(session, host_id, read=True)
    found = run(session, _CURRENT, {"host_id": host_id}).first()
    return None if found is None else _record(found)


def standing(session: Session | Connection, host_id: str) -> Standing | None:
    """``current``'s status, epoch and ``fenced_to`` alone, read the same way (the lock
    held shared, from the database every time): the epoch check's read."""
    _lock(session, host_id, read=True)
    found = run(session, _STANDING, {"host_id": host_id}).first()
    return None if found is None else Standing(found.status, found.epoch, found.fenced_to)


def for_update(session: Session, host_id: str) -> Host | None:
    """The host's row, its lock held exclusive (and the row locked) for a fence."""
    row = _locked(session, host_id)
    return None if row is None else _record(row)


def all_hosts(session: Session) -> list[Host]:
    return [_record(row) for row in session.scalars(select(HostRow).order_by(HostRow.host_id))]


def beat(session: Session, host_id: str, epoch: int, lease_until: str) -> bool:
    """Move the host lease forward if the host is active at ``epoch``; whether it was."""
    result = session.execute(
        update(HostRow)
        .where(HostRow.host_id == host_id, HostRow.epoch == epoch, HostRow.status == ACTIVE)
        .values(lease_until=lease_until)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def fence(
    session: Session, host_id: str, *, to: str, by: str, operations: list[str]
) -> tuple[int, str]:
    """Raise the host's epoch, mark it fenced and journal the fence; (epoch, at)."""
    row = session.get(HostRow, host_id)
    assert row is not None, "the caller holds the row"
    at = now()
    row.epoch += 1
    row.status, row.fenced_at, row.fenced_by, row.fenced_to = FENCED, at, by, to
    row.lease_until = None
    session.add(
        HostFenceRow(
            host_id=host_id,
            epoch=row.epoch,
            to_host=to,
            fenced_by=by,
            fenced_at=at,
            operations=list(operations),
        )
    )
    return row.epoch, at


def admit(session: Session, host_id: str) -> Host:
    """Make a fenced host active again, at its raised epoch."""
    row = session.get(HostRow, host_id)
    assert row is not None, "the caller holds the row"
    row.status = ACTIVE
    return _record(row)


def fences(session: Session, host_id: str) -> list[dict[str, Any]]:
    """Every fence of the host, oldest first."""
    query = select(HostFenceRow).where(HostFenceRow.host_id == host_id)
    return [
        {
            "epoch": row.epoch,
            "to": row.to_host,
            "by": row.fenced_by,
            "at": row.fenced_at,
            "operations": list(row.operations),
        }
        for row in session.scalars(query.order_by(HostFenceRow.epoch))
    ]
