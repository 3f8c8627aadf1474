"""The host keyring (protocol: bundles#signed-receipts): rotation, its crash windows, and
retired-key windows.

Times are given explicitly; nothing here reads the clock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from promoter.engine.receipts.signing import TrustedKey, sign_envelope, verify_document
from promoter.errors import ConfigError, ReceiptInvalid
from promoter.store.keyring import (
    KEY_FILE,
    KEYRING_FILE,
    NEXT_KEY_FILE,
    HostKey,
    keyid_of,
    load_keyring,
    raw_public,
    rotate,
)
from tests.support.flows import jcs_sha, promotion_body

T1 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
T2 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def receipt(promoted_at: str) -> bytes:
    body = promotion_body(promoted_at=promoted_at)
    return bytes(rfc8785.dumps({**body, "receipt_sha256": jcs_sha(body)}))


def pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def keyid(key: Ed25519PrivateKey) -> str:
    return hashlib.sha256(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()


def test_first_use_lists_the_one_key_as_active_with_an_unknown_start(tmp_path: Path) -> None:
    keyring = load_keyring(tmp_path)
    [entry] = keyring.entries()
    assert (entry["keyid"], entry["status"]) == (keyring.active.keyid, "active")
    assert (entry["not_before"], entry["not_after"]) == (None, None)
    assert (tmp_path / KEYRING_FILE).stat().st_mode & 0o777 == 0o600
    assert load_keyring(tmp_path).active.keyid == keyring.active.keyid  # stable keyid


def test_rotation_retires_the_old_key_at_the_rotation_time(tmp_path: Path) -> None:
    first = load_keyring(tmp_path).active
    once = rotate(tmp_path, T1)
    twice = rotate(tmp_path, T2)
    assert [k.status for k in twice.listed] == ["active", "retired", "retired"]
    assert [k.keyid for k in twice.listed] == [twice.active.keyid, once.active.keyid, first.keyid]
    assert [(k.not_before, k.not_after) for k in twice.listed] == [
        ("2026-12-01T12:00:00Z", None),
        ("2026-11-30T12:00:00Z", "2026-12-01T12:00:00Z"),
        (None, "2026-11-30T12:00:00Z"),
    ]
    assert HostKey.load_or_create(tmp_path).keyid == twice.active.keyid
    assert not (tmp_path / NEXT_KEY_FILE).exists()
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600


def test_crash_after_listing_before_the_rename_signs_with_the_listed_key(tmp_path: Path) -> None:
    """A rotation stopped between its keyring write and its rename: the keyring wins."""
    old = load_keyring(tmp_path).active
    fresh = Ed25519PrivateKey.generate()
    (tmp_path / NEXT_KEY_FILE).write_bytes(pem(fresh))
    os.chmod(tmp_path / NEXT_KEY_FILE, 0o600)
    listing = json.loads((tmp_path / KEYRING_FILE).read_bytes())
    [entry] = listing["keys"]
    public = fresh.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    listing["keys"] = [
        {
            "keyid": keyid(fresh),
            "public_key_pem": public.decode(),
            "not_before": "2026-11-30T12:00:00Z",
            "not_after": None,
        },
        {**entry, "not_after": "2026-11-30T12:00:00Z"},
    ]
    (tmp_path / KEYRING_FILE).write_bytes(rfc8785.dumps(listing))
    keyring = load_keyring(tmp_path)
    assert keyring.active.keyid == keyid(fresh) != old.keyid
    assert (tmp_path / NEXT_KEY_FILE).exists()  # readers never move key files
    after = rotate(tmp_path, T2)  # the next rotation finishes the first one, then its own
    assert [k.keyid for k in after.listed][1:] == [keyid(fresh), old.keyid]
    assert not (tmp_path / NEXT_KEY_FILE).exists()


def test_crash_before_listing_drops_the_never_listed_key(tmp_path: Path) -> None:
    old = load_keyring(tmp_path).active
    (tmp_path / NEXT_KEY_FILE).write_bytes(pem(Ed25519PrivateKey.generate()))
    os.chmod(tmp_path / NEXT_KEY_FILE, 0o600)
    assert load_keyring(tmp_path).active.keyid == old.keyid
    after = rotate(tmp_path, T1)
    assert [k.keyid for k in after.listed] == [after.active.keyid, old.keyid]


def test_keyring_naming_a_key_nobody_holds_is_refused(tmp_path: Path) -> None:
    load_keyring(tmp_path)
    (tmp_path / KEY_FILE).unlink()
    (tmp_path / KEY_FILE).write_bytes(pem(Ed25519PrivateKey.generate()))  # swapped key
    os.chmod(tmp_path / KEY_FILE, 0o600)
    with pytest.raises(ConfigError, match="names another active key"):
        load_keyring(tmp_path)


def test_keyring_entry_whose_keyid_lies_is_refused(tmp_path: Path) -> None:
    load_keyring(tmp_path)
    listing = json.loads((tmp_path / KEYRING_FILE).read_bytes())
    listing["keys"][0]["keyid"] = "0" * 64
    (tmp_path / KEYRING_FILE).write_bytes(rfc8785.dumps(listing))
    with pytest.raises(ConfigError, match="not a valid keyring"):
        load_keyring(tmp_path)


def envelope(key: HostKey, data: bytes) -> bytes:
    return json.dumps(sign_envelope(key, data)).encode()


def test_retired_key_verifies_receipts_made_before_its_retirement(tmp_path: Path) -> None:
    old = load_keyring(tmp_path).active
    rotated = rotate(tmp_path, T1)
    retired = rotated.listed[1]
    trusted = TrustedKey(retired.public_key, retired.not_after)
    before = verify_document(envelope(old, receipt("2026-11-30T11:59:59Z")), [trusted])
    assert before.keyid == old.keyid
    assert any(c.startswith("key window: made 2026-11-30T11:59:59Z, before") for c in before.checks)
    same_second = verify_document(envelope(old, receipt("2026-11-30T12:00:00Z")), [trusted])
    assert same_second.keyid == old.keyid


def test_stolen_retired_key_signing_a_later_receipt_is_rejected(tmp_path: Path) -> None:
    old = load_keyring(tmp_path).active  # a copy of this private key was taken
    rotated = rotate(tmp_path, T1)
    keys = [TrustedKey(k.public_key, k.not_after) for k in rotated.listed]
    forged = envelope(old, receipt("2026-11-30T12:00:01Z"))
    with pytest.raises(
        ReceiptInvalid, match=f"rotated-out key: {old.keyid} was retired at 2026-11-30T12:00:00Z"
    ):
        verify_document(forged, keys)
    genuine = envelope(rotated.active, receipt("2026-11-30T12:00:01Z"))
    assert verify_document(genuine, keys).keyid == rotated.active.keyid


def test_served_entry_is_an_rfc8037_okp_jwk(tmp_path: Path) -> None:
    keyring = load_keyring(tmp_path)
    [entry] = keyring.entries()
    raw = base64.b64decode(entry["public_key_raw_b64"])
    assert entry["x"] == base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    expected: dict[str, Any] = {
        "kty": "OKP",
        "crv": "Ed25519",
        "alg": "EdDSA",
        "use": "sig",
        "kid": entry["keyid"],
    }
    assert {k: entry[k] for k in expected} == expected


def test_a_keyid_is_the_sha256_of_the_raw_public_key_as_serialization_writes_it() -> None:
    """``raw_public`` asks the key for its raw bytes (no PEM readers loaded): the same."""
    for _ in range(20):
        private = Ed25519PrivateKey.generate()
        raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        assert raw_public(private.public_key()) == raw
        assert keyid_of(private.public_key()) == keyid(private)
