"""The ledger's key set and its stored receipt envelopes (rows of ``host_keys`` and
``receipt_envelopes``).

Owns reading and writing those two tables: a host's published public keys (one row per
keyid, naming the host; a key another host already published is refused, and a retired
key never becomes active again), and each receipt's envelope, inserted once (a second
insert of the same receipt keeps the first). Deliberately not here: the key files and
signing (``promoter.engine.receipts``), deciding which host may sign what, and serving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from promoter.domain.canonical import rfc3339, utcnow
from promoter.errors import ConfigError
from promoter.store.db import run
from promoter.store.tables import HostKeyRow, ReceiptEnvelopeRow


@dataclass(frozen=True)
class PublishedKey:
    """One host's public key as the ledger lists it."""

    keyid: str
    host_id: str
    algorithm: str
    public_key_pem: str
    not_before: str | None
    not_after: str | None


@dataclass(frozen=True)
class StoredEnvelope:
    """A receipt's envelope: its exact bytes and who signed it with which key."""

    receipt_sha256: str
    kind: str
    subject_id: str
    host_id: str
    keyid: str
    envelope: bytes


def publish_keys(session: Session, keys: list[PublishedKey]) -> None:
    """Insert or bring up to date each key; a keyid another host published is refused."""
    for key in keys:
        values = {
            "keyid": key.keyid,
            "host_id": key.host_id,
            "algorithm": key.algorithm,
            "public_key_pem": key.public_key_pem,
            "not_before": key.not_before,
            "not_after": key.not_after,
            "published_at": rfc3339(utcnow()),
        }
        # a concurrent publisher of the same key (two requests after a rotation) is no error
        session.execute(_insert(session)(HostKeyRow).values(**values).on_conflict_do_nothing())
        row = session.get(HostKeyRow, key.keyid, with_for_update=True, populate_existing=True)
        assert row is not None  # inserted, or there before
        if row.host_id != key.host_id:
            raise ConfigError(
                f"signing key {key.keyid} is already published by host {row.host_id}, not "
                f"{key.host_id}; each host needs a key of its own (a copied credentials dir?)"
            )
        if row.not_after is None and key.not_after is not None:  # retired: never active again
            row.not_after = key.not_after
        if row.not_before is None and key.not_before is not None:
            row.not_before = key.not_before


def all_keys(session: Session) -> list[PublishedKey]:
    """Every published key, by host; within a host the active one first, then newest."""
    rows = session.scalars(select(HostKeyRow)).all()
    ordered = sorted(
        rows,
        key=lambda r: (r.host_id, r.not_after is not None, _desc(r.not_after), r.keyid),
    )
    return [
        PublishedKey(r.keyid, r.host_id, r.algorithm, r.public_key_pem, r.not_before, r.not_after)
        for r in ordered
    ]


def _desc(text: str | None) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text or "")


def get_envelope(session: Session, receipt_sha256: str) -> StoredEnvelope | None:
    row = session.get(ReceiptEnvelopeRow, receipt_sha256)
    if row is None:
        return None
    return StoredEnvelope(
        row.receipt_sha256,
        row.kind,
        row.subject_id,
        row.host_id,
        row.keyid,
        row.envelope.encode("utf-8"),
    )


def add_envelope(session: Session, envelope: StoredEnvelope) -> None:
    """Insert the envelope unless one for the receipt is stored (the first one stays)."""
    values = {
        "receipt_sha256": envelope.receipt_sha256,
        "kind": envelope.kind,
        "subject_id": envelope.subject_id,
        "host_id": envelope.host_id,
        "keyid": envelope.keyid,
        "envelope": envelope.envelope.decode("utf-8"),
        "created_at": rfc3339(utcnow()),
    }
    postgres = session.get_bind().dialect.name == "postgresql"
    run(session, _ADD_ENVELOPE[postgres], values)


# an envelope's INSERT … ON CONFLICT DO NOTHING, built once per dialect (PostgreSQL's,
# else SQLite's, as ``_insert`` picks), its values given as parameters: a receipt's
# envelope is added by every submission and every promotion
_ENVELOPES = cast(Table, ReceiptEnvelopeRow.__table__)
_ADD_ENVELOPE = {
    True: postgresql.insert(_ENVELOPES).on_conflict_do_nothing(),
    False: sqlite.insert(_ENVELOPES).on_conflict_do_nothing(),
}


def _insert(session: Session) -> Callable[..., Any]:
    """The dialect's INSERT, which has ``ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL)."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert
    return sqlite.insert
