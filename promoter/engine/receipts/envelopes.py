"""One key set for the ledger; each receipt's envelope made once and served as stored
(protocol: hosts#fencing).

Owns three things. (1) Publishing: before a host signs anything it publishes its
keyring's public keys (keyid, host id, validity window) into the ledger
(``promoter.store.key_ledger``), and again after a rotation. (2) Making: the host that
makes a receipt signs its DSSE envelope with its active key once the receipt's bytes
exist, and stores it in the transaction that makes the receipt servable (the final
status, or the receipt's own row for a verification), so no served receipt lacks it
(``make_envelope``, ``record``). (3) Serving: any host serves a receipt's stored envelope
byte for byte; a receipt recorded before envelopes were stored is signed (once, then
stored) only by the host that made it, and another host answers ``owned_by_other_host``
naming that host, never signing a write it did not make.

Deliberately not here: the envelope's format and offline verification
(``promoter.engine.receipts.signing``), the key files and rotation
(``promoter.store.keyring``), finding a receipt's bytes and its maker
(``promoter.engine.operation.served``), and HTTP.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy.orm import Session

from promoter.domain.canonical import canonical_bytes
from promoter.engine.ports import Sealing
from promoter.engine.receipts.signing import host_keyring, sign_receipt
from promoter.errors import OwnedByOtherHost, ReceiptInvalid
from promoter.store import journal, key_ledger
from promoter.store.db import Database
from promoter.store.key_ledger import PublishedKey, StoredEnvelope
from promoter.store.keyring import (
    ALGORITHM,
    HostKey,
    HostKeyEntry,
    Keyring,
    ListedKey,
    keyid_of,
    keyring_stamp,
    load_keyring,
)

log = logging.getLogger("promoter.keys")

PROMOTION = "promotion_receipt"
ROLLBACK = "rollback_receipt"
VERIFICATION = "verification_receipt"


@dataclass(frozen=True)
class ReceiptSigner:
    """This host and its active key, published in the ledger before it signs; the
    keyring's file stamp when it was read, to see a rotation that lands in between."""

    host_id: str
    key: HostKey
    credentials_dir: Path
    stamp: tuple[int, int, int] | None

    def current(self) -> HostKey:
        """The active key now: a rotation since ``receipt_signer`` retired ``key`` at a time
        that may precede the receipt, so the new key signs (the daemon publishes it too)."""
        if keyring_stamp(self.credentials_dir) == self.stamp:
            return self.key
        return load_keyring(self.credentials_dir).active


# --- (1) publishing -------------------------------------------------------------------------


def receipt_signer(services: Sealing) -> ReceiptSigner:
    """The host's active key, its keyring published first (call before opening the session
    that records the receipt: publishing commits on a session of its own)."""
    keyring = published_keyring(services)
    cached = services.host_keyring
    stamp = cached[0] if cached is not None and cached[1] is keyring else None
    credentials = services.settings.signing_dir
    return ReceiptSigner(services.owner.host, keyring.active, credentials, stamp)


def published_keyring(services: Sealing) -> Keyring:
    """The host's keyring, published into the ledger whenever it was (re)loaded."""
    keyring = host_keyring(services)
    if services.published_keyring is not keyring:
        publish_keyring(services.db, services.owner.host, keyring)
        services.published_keyring = keyring
    return keyring


def publish_keyring(db: Database, host_id: str, keyring: Keyring) -> None:
    """Every listed key of ``host_id``'s keyring into the ledger, in one transaction."""
    with journal.unit_of_work(db) as session:
        key_ledger.publish_keys(session, _published(host_id, keyring))
    log.info(
        "published %d signing key(s) of host %s into the ledger (active %s)",
        len(keyring.listed),
        host_id,
        keyring.active.keyid,
    )


def _published(host_id: str, keyring: Keyring) -> list[PublishedKey]:
    return [
        PublishedKey(
            key.keyid,
            host_id,
            ALGORITHM,
            key.entry()["public_key_pem"],
            key.not_before,
            key.not_after,
        )
        for key in keyring.listed
    ]


def ledger_key_set(services: Sealing) -> tuple[str, list[HostKeyEntry]]:
    """This host's active keyid and every host's keys: this host's first (active, then
    retired), then the other hosts' by host id; each entry names its ``host_id``."""
    keyring = published_keyring(services)
    own = services.owner.host
    with journal.unit_of_work(services.db) as session:
        published = key_ledger.all_keys(session)
    entries: list[HostKeyEntry] = [{**key.entry(), "host_id": own} for key in keyring.listed]
    listed = {key.keyid for key in keyring.listed}
    for row in published:
        if row.keyid in listed or row.host_id == own:
            continue
        key = _public_key(row)
        if key is not None:
            listed_key = ListedKey(key, row.keyid, row.not_before, row.not_after)
            entries.append({**listed_key.entry(), "host_id": row.host_id})
    return keyring.active.keyid, entries


def _public_key(row: PublishedKey) -> Ed25519PublicKey | None:
    """The row's key, None (not listed, logged) when it is not the Ed25519 key it names."""
    try:
        key = serialization.load_pem_public_key(row.public_key_pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        key = None
    if isinstance(key, Ed25519PublicKey) and keyid_of(key) == row.keyid:
        return key
    log.warning("ledger key %s of host %s is not the key it names; not listed", *_ids(row))
    return None


def _ids(row: PublishedKey) -> tuple[str, str]:
    return row.keyid, row.host_id


# --- (2) making -----------------------------------------------------------------------------


def make_envelope(
    signer: ReceiptSigner, kind: str, subject_id: str, receipt: bytes
) -> StoredEnvelope:
    """The receipt's envelope signed by ``signer`` (the receipt is checked first).

    Called once the receipt's bytes exist: a key still active now was not retired before
    the receipt's time, so its window covers the receipt.
    """
    key = signer.current()
    envelope, digest = sign_receipt(key, receipt)  # the receipt's hash as its check computed it
    data = canonical_bytes(envelope)
    return StoredEnvelope(digest, kind, subject_id, signer.host_id, key.keyid, data)


def record(session: Session, envelope: StoredEnvelope) -> None:
    """Store the envelope in the transaction that makes its receipt servable (a stored one
    stays). It is made (``make_envelope``) before that transaction opens: signing a large
    receipt takes milliseconds that no database lock should wait for."""
    key_ledger.add_envelope(session, envelope)


def _receipt_sha256(receipt: bytes) -> str:
    try:
        digest = json.loads(receipt)["receipt_sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReceiptInvalid("the receipt names no receipt_sha256") from exc
    if not isinstance(digest, str):
        raise ReceiptInvalid("the receipt names no receipt_sha256")
    return digest


# --- (3) serving ----------------------------------------------------------------------------


def served_envelope(
    services: Sealing, kind: str, subject_id: str, receipt: bytes, maker: str | None
) -> bytes:
    """The receipt's stored envelope; an older receipt's made now, by its maker only.

    ``maker`` is the host the ledger says made the receipt (None: recorded before hosts
    were recorded, when one host used the ledger: the serving host signs, as it did).
    """
    digest = _receipt_sha256(receipt)
    with journal.unit_of_work(services.db) as session:
        stored = key_ledger.get_envelope(session, digest)
    if stored is not None:
        return stored.envelope
    own = services.owner.host
    if maker is not None and maker != own:
        raise OwnedByOtherHost(
            f"the {kind.replace('_', ' ')} of {subject_id} was made by host {maker} before "
            f"envelopes were stored; only {maker} signs it (ask it once, then any host "
            "serves the stored envelope)",
            owner_host=maker,
            receipt_sha256=digest,
        )
    sealed = make_envelope(receipt_signer(services), kind, subject_id, receipt)
    with journal.unit_of_work(services.db) as session:
        record(session, sealed)
    with journal.unit_of_work(services.db) as session:
        stored = key_ledger.get_envelope(session, digest)
    assert stored is not None  # just inserted, or a concurrent request's
    return stored.envelope
