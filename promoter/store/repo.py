"""Queries over the registry tables, returning plain values and wire models.

Grants, bundles, blob pins, verification records and leases. Each function takes an
open ``Session``; the caller owns the transaction (``recorded_grant_sha256`` alone reads
on a plain connection of its own). Journal and ledger queries live in
``promoter.store.journal``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.models import GrantV1, LeaseV1, PatchBundleV1
from promoter.errors import GrantConflict
from promoter.store.db import Database, run
from promoter.store.tables import (
    BlobRow,
    BundleBlobRow,
    BundleRow,
    GrantRow,
    LeaseRow,
    OperationRow,
    VerificationRow,
)

BLOBS = cast(Table, BlobRow.__table__)  # the table itself, for Core bulk inserts
# the tables themselves, for the hot statements below: on a table's own columns a
# statement runs without the ORM's part (the same SQL as through the mapped class)
_BUNDLES = cast(Table, BundleRow.__table__)
_LEASES = cast(Table, LeaseRow.__table__)
_GRANTS = cast(Table, GrantRow.__table__)
_GRANT_SHA256 = select(_GRANTS.c.grant_sha256).where(
    _GRANTS.c.grant_id == bindparam("grant_id", type_=String())
)
_ADD_GRANT = insert(_GRANTS)


def now() -> str:
    return rfc3339(utcnow())


def grant_sha256_of(session: Session, grant_id: str) -> str | None:
    """The recorded ``grant_sha256`` of ``grant_id`` (any host's), or None."""
    row = run(session, _GRANT_SHA256, {"grant_id": grant_id}).first()
    return None if row is None else str(row.grant_sha256)


def recorded_grant_sha256(db: Database, grant_id: str) -> str | None:
    """``grant_sha256_of`` read on a plain connection, outside any transaction of the
    caller's (a registration's look-up before its checks: no ORM session)."""
    row = db.first(_GRANT_SHA256, {"grant_id": grant_id})
    return None if row is None else str(row.grant_sha256)


def grant_repository(session: Session, grant_id: str) -> str | None:
    """The repository identity ``grant_id`` was recorded for (any host's), or None."""
    row = session.get(GrantRow, grant_id)
    return None if row is None else row.repository_identity


def add_grant(session: Session, grant: GrantV1) -> None:
    """Record a grant once; the same id with other content raises ``GrantConflict``."""
    assert grant.grant_sha256 is not None
    recorded = grant_sha256_of(session, grant.grant_id)
    if recorded is not None:
        if recorded != grant.grant_sha256:
            raise GrantConflict(f"grant {grant.grant_id} is already registered with other content")
        return
    run(  # a plain INSERT: nothing reads the row back as an object
        session,
        _ADD_GRANT,
        {
            "grant_id": grant.grant_id,
            "grant_sha256": grant.grant_sha256,
            "repository_identity": grant.repository_identity,
            "executor_run_id": grant.executor_run_id,
            "workflow_id": grant.workflow_id,
            "stage": grant.stage,
            "fence": grant.fence,
            "not_before": grant.not_before,
            "expires_at": grant.expires_at,
            "created_at": now(),
        },
    )


def grant_run(session: Session, grant_id: str) -> str | None:
    row = session.get(GrantRow, grant_id)
    return None if row is None else row.executor_run_id


def record_blob(session: Session, sha256: str, size: int) -> None:
    if session.get(BlobRow, sha256) is None:
        session.add(BlobRow(sha256=sha256, size=size, created_at=now()))


def record_blobs(session: Session, blobs: Iterable[tuple[str, int]]) -> None:
    """``record_blob`` for many, in one bulk insert that leaves a recorded digest's row as
    it is (``ON CONFLICT (sha256) DO NOTHING``: no look-up of which are recorded first).
    The rows go in by digest, whatever the caller's order: two PostgreSQL transactions
    recording the same new blobs then wait on each other's first row, never each on a row
    the other holds (a deadlock)."""
    created = now()
    rows = [
        {"sha256": sha256, "size": size, "created_at": created}
        for sha256, size in sorted(dict(blobs).items())
    ]
    if rows:  # one Core executemany: no ORM object, no ORM bulk-insert bookkeeping per row
        postgres = session.get_bind().dialect.name == "postgresql"
        run(session, _ADD_BLOBS[postgres], rows)


# built once per dialect (PostgreSQL's, else SQLite's; every upload records its blobs):
# the insert that skips a digest already recorded, and the look-up with its digests one
# expanding parameter
_ADD_BLOBS = {
    True: postgresql.insert(BLOBS).on_conflict_do_nothing(index_elements=[BLOBS.c.sha256]),
    False: sqlite.insert(BLOBS).on_conflict_do_nothing(index_elements=[BLOBS.c.sha256]),
}
_KNOWN_BLOBS = select(BLOBS.c.sha256).where(
    BLOBS.c.sha256.in_(bindparam("digests", expanding=True))
)


def known_blobs(session: Session, digests: Iterable[str]) -> set[str]:
    wanted = list(set(digests))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        found.update(session.scalars(_KNOWN_BLOBS, {"digests": chunk}))
    return found


def referenced_blobs(session: Session) -> set[str]:
    """Every blob some stored bundle refers to."""
    return set(session.scalars(select(BundleBlobRow.sha256).distinct()))


def forget_blobs(session: Session, digests: Iterable[str]) -> None:
    """Drop the records of blobs whose files were removed."""
    for digest in digests:
        row = session.get(BlobRow, digest)
        if row is not None:
            session.delete(row)


# bundle rows on Core, built once (every bundle submitted adds one), on the table's own
# columns; the session flushes what it holds first, as before any statement it runs
# (SQLAlchemy 2.0.16 and later autoflush before Core statements too). A bundle's row is
# added unless one is recorded (its id the only conflict skipped, one statement per
# dialect): whether it was added is the statement's row count, not a look-up before it
# (kept: SQLAlchemy reads an INSERT's row count only when asked to, psycopg's is then -1)
_ADD_BUNDLE = {
    postgres: dialect.insert(_BUNDLES)
    .on_conflict_do_nothing(index_elements=[_BUNDLES.c.bundle_id])
    .execution_options(preserve_rowcount=True)
    for postgres, dialect in ((True, postgresql), (False, sqlite))
}
_PIN_BLOBS = insert(cast(Table, BundleBlobRow.__table__))


def add_bundle(session: Session, bundle: PatchBundleV1, owner_host: str | None = None) -> bool:
    """Record a verified bundle, held by ``owner_host``, and pin its blobs; False if it
    was already recorded."""
    postgres = session.get_bind().dialect.name == "postgresql"
    added = run(
        session,
        _ADD_BUNDLE[postgres],
        {
            "bundle_id": bundle.bundle_id,
            "bundle_sha256": bundle.bundle_sha256,
            "grant_id": bundle.grant_id,
            "executor_run_id": bundle.executor_run_id,
            "repository_identity": bundle.repository_identity,
            "state": "verified",
            "created_at": now(),
            "owner_host": owner_host,
        },
    )
    if added.rowcount != 1:  # recorded already: its row and pins stay as they are
        return False
    digests = {
        state.sha256
        for change in bundle.changes
        for state in (change.old, change.new)
        if state.sha256 is not None
    }
    if digests:  # one Core executemany: a 10 000-change bundle pins its blobs in one go
        # (in key order, as ``record_blobs``; the bundle's row, taken first, serializes
        # two adds of one bundle anyway)
        run(
            session,
            _PIN_BLOBS,
            [{"bundle_id": bundle.bundle_id, "sha256": d} for d in sorted(digests)],
        )
    return True


def bundle_row(session: Session, bundle_id: str) -> BundleRow | None:
    return session.get(BundleRow, bundle_id)


def bundle_owner_host(session: Session, bundle_id: str) -> tuple[bool, str | None]:
    """Whether the ledger records the bundle, and the host holding its document.

    A bundle recorded before hosts were (``None``) is named by the host of an operation
    that promoted it, if any.
    """
    row = session.get(BundleRow, bundle_id)
    if row is None:
        return False, None
    if row.owner_host is not None:
        return True, row.owner_host
    host = session.scalars(
        select(OperationRow.owner_host)
        .where(OperationRow.bundle_id == bundle_id, OperationRow.owner_host.is_not(None))
        .limit(1)
    ).first()
    return True, host


# built once, its values parameters (a statement built per call cost more than running
# it), on the table (Core: the ORM would copy and key it anew on every call); the session
# is flushed first by hand, as before any ORM statement. No caller holds the bundle's row
# in the same session (a completed promotion's last transaction, the rehearsal), so there
# is no object to synchronize.
_SET_BUNDLE_STATE = (
    update(_BUNDLES)
    .where(_BUNDLES.c.bundle_id == bindparam("bundle_key", type_=String()))
    .values(state=bindparam("bundle_state", type_=String()))
)


def set_bundle_state(session: Session, bundle_id: str, state: str) -> None:
    """Set a bundle's state in one statement (nothing when there is no such bundle)."""
    session.flush()
    run(session, _SET_BUNDLE_STATE, {"bundle_key": bundle_id, "bundle_state": state})


# a verification's row, which nothing reads back as an object: one plain INSERT built
# once (no ORM object, no unit of work flushed for it), run where it is added, so in the
# same order as the session's autoflush wrote it, before the envelope's INSERT
_ADD_VERIFICATION = insert(cast(Table, VerificationRow.__table__))


def add_verification(session: Session, bundle_id: str, receipt: dict[str, Any]) -> None:
    run(
        session,
        _ADD_VERIFICATION,
        {
            "bundle_id": bundle_id,
            "receipt_sha256": receipt["receipt_sha256"],
            "status": receipt["status"],
            "receipt": receipt,
            "created_at": now(),
        },
    )


def latest_verification(session: Session, bundle_id: str) -> dict[str, Any] | None:
    row = session.scalars(
        select(VerificationRow)
        .where(VerificationRow.bundle_id == bundle_id)
        .order_by(VerificationRow.id.desc())
        .limit(1)
    ).first()
    return None if row is None else dict(row.receipt)


def verification_run(session: Session, bundle_id: str) -> str | None:
    """The executor run a bundle (possibly only failed-verified) belongs to."""
    row = session.get(BundleRow, bundle_id)
    if row is not None:
        return row.executor_run_id
    record = latest_verification(session, bundle_id)
    return None if record is None else str(record["executor_run_id"])


# Core, built once: the lease's columns (every promotion reads them twice), no ORM load
_LEASE = select(
    _LEASES.c.run_id,
    _LEASES.c.attempt,
    _LEASES.c.generation,
    _LEASES.c.resume_epoch,
    _LEASES.c.fence,
    _LEASES.c.expires_at,
).where(
    _LEASES.c.workflow_id == bindparam("workflow_id", type_=String()),
    _LEASES.c.stage == bindparam("stage", type_=String()),
)
_LEASE_LOCKED = _LEASE.with_for_update()


def get_lease(
    session: Session, workflow_id: str, stage: str, *, lock: bool = False
) -> LeaseV1 | None:
    """The current lease; ``lock`` holds its row until the transaction ends (PostgreSQL
    ``FOR UPDATE``; SQLite has one writer at a time anyway)."""
    statement = _LEASE_LOCKED if lock else _LEASE
    row = run(session, statement, {"workflow_id": workflow_id, "stage": stage}).first()
    if row is None:
        return None
    return LeaseV1(
        run_id=row.run_id,
        attempt=row.attempt,
        generation=row.generation,
        resume_epoch=row.resume_epoch,
        fence=row.fence,
        expires_at=row.expires_at,
    )


def put_lease(session: Session, workflow_id: str, stage: str, lease: LeaseV1) -> None:
    row = session.get(LeaseRow, (workflow_id, stage))
    if row is None:
        row = LeaseRow(workflow_id=workflow_id, stage=stage)
        session.add(row)
    row.run_id = lease.run_id
    row.attempt = lease.attempt
    row.generation = lease.generation
    row.resume_epoch = lease.resume_epoch
    row.fence = lease.fence
    row.expires_at = lease.expires_at
    row.updated_at = now()
