"""Signed receipts (SPEC §3.9): the host's Ed25519 key, DSSE envelopes, offline checks.

Owns: the host signing key file ``<credentials>/host-signing.key`` (created once,
durably, never overwritten, refused when it is a symlink or readable by anyone but its
owner), DSSE v1 envelopes over the exact canonical bytes of a receipt, and
``verify_document``, which checks an envelope or a bare receipt, bundle or grant with
nothing but the bytes and (optionally) public keys: no server, no network, no state.

Deliberately not here: storing or finding receipts (``promoter.engine.operations``,
``promoter.store.audit``), deciding who may fetch them (``promoter.api``), reading an
operator's public key files (``promoter.cli.receipt_cmd``), and checks that need the
blob store or a repository (those are the verification receipt's, §3.6).
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ValidationError

from promoter.domain.canonical import canonical_bytes, projection_sha256, sha256_hex
from promoter.domain.documents import GRANT_IDENTITY, bundle_id_for, bundle_sha256, receipt_sha256
from promoter.domain.models import (
    DsseEnvelope,
    GrantV1,
    PatchBundleV1,
    PatchPromotionReceiptV1,
    PatchVerificationReceiptV1,
    RollbackReceiptV1,
)
from promoter.domain.parsing import load_json
from promoter.engine.services import Services
from promoter.errors import ConfigError, PromoterError, ReceiptInvalid
from promoter.store.durable import make_dirs, write_new

KEY_FILE = "host-signing.key"
ALGORITHM = "ed25519"
MAX_KEY_FILE_BYTES = 64 * 1024
_PAYLOAD_TYPE = re.compile(r"^application/vnd\.promoter\.([A-Za-z0-9]+)\+json$")

# schema -> (kind, model); the host signs receipts, bundles and grants are checked bare.
RECEIPTS: dict[str, tuple[str, type[BaseModel]]] = {
    "PatchVerificationReceiptV1": ("verification_receipt", PatchVerificationReceiptV1),
    "PatchPromotionReceiptV1": ("promotion_receipt", PatchPromotionReceiptV1),
    "RollbackReceiptV1": ("rollback_receipt", RollbackReceiptV1),
}
DOCUMENTS: dict[str, tuple[str, type[BaseModel]]] = {
    **RECEIPTS,
    "PatchBundleV1": ("bundle", PatchBundleV1),
    "GrantV1": ("grant", GrantV1),
}


# --- the host key ---------------------------------------------------------------------------


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """sha256 hex of the raw 32-byte public key."""
    return sha256_hex(_raw(public_key))


@dataclass(frozen=True)
class HostKey:
    """The host's receipt-signing key (the private half stays in memory)."""

    private_key: Ed25519PrivateKey
    keyid: str

    @classmethod
    def load_or_create(cls, credentials_dir: Path) -> HostKey:
        """Read ``host-signing.key``, creating it durably (0600) when it does not exist."""
        make_dirs(credentials_dir, mode=0o700)
        path = credentials_dir / KEY_FILE
        data = _read_key_file(path)
        if data is None:
            fresh = Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            try:
                write_new(path, fresh, mode=0o600)  # links, so a concurrent creator wins
            except OSError as exc:
                raise ConfigError(f"cannot create the host signing key {path}: {exc}") from exc
            data = _read_key_file(path) or b""
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise ConfigError(f"{path} holds a {type(private).__name__}, not an Ed25519 key")
        return cls(private_key=private, keyid=keyid_of(private.public_key()))

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    def public_pem(self) -> str:
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")

    def public_jwk(self) -> dict[str, str]:
        """The entry ``GET /v1/keys`` serves for this key."""
        raw_b64 = base64.b64encode(_raw(self.public_key)).decode("ascii")
        return {
            "keyid": self.keyid,
            "algorithm": ALGORITHM,
            "public_key_pem": self.public_pem(),
            "public_key_raw_b64": raw_b64,
        }

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


def _read_key_file(path: Path) -> bytes | None:
    """The key file's bytes, None when absent; symlinks and loose modes are refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{path} is a symlink; the signing key must be a file") from exc
        raise ConfigError(f"cannot open the host signing key {path}: {exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path} is not a regular file")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise ConfigError(f"{path} has mode {mode:04o}; it must be owner-only (0600)")
        if info.st_uid != os.geteuid():
            raise ConfigError(f"{path} is owned by uid {info.st_uid}, not by this process")
        return os.read(fd, MAX_KEY_FILE_BYTES)
    finally:
        os.close(fd)


def host_key(services: Services) -> HostKey:
    """The daemon's key, loaded (or created) once and kept in ``services.host_key``."""
    return services.once(
        "host_key", lambda: HostKey.load_or_create(services.settings.credentials_dir)
    )


# --- DSSE -----------------------------------------------------------------------------------


def payload_type(schema: str) -> str:
    return f"application/vnd.promoter.{schema}+json"


def pae(payload_type_: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding (lengths are ASCII decimal byte counts)."""
    kind = payload_type_.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body)


def sign_envelope(key: HostKey, receipt_bytes: bytes) -> dict[str, Any]:
    """A DSSE envelope over the exact canonical bytes of a receipt.

    The bytes are checked first as ``verify_document`` checks them, so the host never
    signs a receipt that an offline verifier would reject.
    """
    checked = check_document(receipt_bytes)
    if checked.schema not in RECEIPTS:
        raise ReceiptInvalid(f"only receipts are signed, not a {checked.schema}")
    kind = payload_type(checked.schema)
    sig = base64.b64encode(key.sign(pae(kind, receipt_bytes))).decode("ascii")
    return {
        "payloadType": kind,
        "payload": base64.b64encode(receipt_bytes).decode("ascii"),
        "signatures": [{"keyid": key.keyid, "sig": sig}],
    }


# --- offline verification -------------------------------------------------------------------


@dataclass(frozen=True)
class VerifiedDocument:
    """What ``verify_document`` established, one human-readable line per check."""

    kind: str  # verification_receipt | promotion_receipt | rollback_receipt | bundle | grant
    schema: str
    identity_sha256: str  # receipt_sha256, bundle_sha256 or grant_sha256
    keyid: str | None  # the key whose signature verified; None when none was checked
    enveloped: bool
    checks: tuple[str, ...]


def verify_document(
    data: bytes, public_keys: Sequence[Ed25519PublicKey] | None
) -> VerifiedDocument:
    """Check a DSSE envelope or a bare receipt, bundle or grant; raise ``ReceiptInvalid``."""
    top = _json_object(data, "the file")
    if "payloadType" in top:
        return _verify_envelope(top, public_keys or ())
    if "schema" not in top:
        raise ReceiptInvalid("the file is neither a DSSE envelope nor a promoter document")
    document = check_document(data)
    if public_keys:
        raise ReceiptInvalid(
            f"a public key was given but the file is a bare {document.schema}, not a signed "
            "DSSE envelope"
        )
    return document


def _verify_envelope(top: dict[str, Any], keys: Sequence[Ed25519PublicKey]) -> VerifiedDocument:
    try:
        envelope = DsseEnvelope.model_validate(top)
    except ValidationError as exc:
        raise ReceiptInvalid(f"not a DSSE envelope: {_first_error(exc)}") from exc
    # (1) the payload type names a receipt schema the host signs
    kind = envelope.payloadType
    named = _PAYLOAD_TYPE.match(kind)
    if named is None or named.group(1) not in RECEIPTS:
        raise ReceiptInvalid(f"payloadType {kind!r} is not a promoter receipt type")
    body = _b64decode(envelope.payload, "payload")
    lines = [f"envelope: DSSE v1, payloadType {kind}"]
    # (2) a signature over PAE(payloadType, payload) verifies with a given key
    keyid = _check_signatures(envelope, kind, body, keys)
    if keyid is None:
        signers = ", ".join(s.keyid for s in envelope.signatures) or "nobody"
        lines.append(f"signature: NOT CHECKED (no public key given; signed by {signers})")
    else:
        lines.append(f"signature: verified with key {keyid}")
    # (3) the payload is the document the payload type names
    schema = _json_object(body, "the payload").get("schema")
    if schema != named.group(1):
        raise ReceiptInvalid(
            f"payloadType mismatch: the envelope says {named.group(1)} but the payload is "
            f"a {schema!r}"
        )
    lines.append("payloadType: matches the payload's schema")
    # (4) the payload passes every document check
    document = check_document(body)
    return replace(document, keyid=keyid, enveloped=True, checks=(*lines, *document.checks))


def _check_signatures(
    envelope: DsseEnvelope, kind: str, body: bytes, keys: Sequence[Ed25519PublicKey]
) -> str | None:
    """The keyid of the first given key that verifies a signature; None if no keys."""
    if not keys:
        return None
    message = pae(kind, body)
    for signature in envelope.signatures:
        raw = _b64decode(signature.sig, "signature")
        for key in keys:
            try:
                key.verify(raw, message)
            except InvalidSignature:
                continue
            return keyid_of(key)
    # The claimed keyids are unauthenticated; they only choose the message.
    given = sorted(keyid_of(key) for key in keys)
    claimed = [s.keyid for s in envelope.signatures]
    if not claimed:
        raise ReceiptInvalid("the envelope carries no signatures")
    if set(given).isdisjoint(claimed):
        raise ReceiptInvalid(
            f"wrong key: the envelope is signed by {', '.join(claimed)}; no signature "
            f"verifies with the given public key(s) {', '.join(given)}"
        )
    raise ReceiptInvalid(
        "the signature does not verify: the payload or payloadType was altered after "
        "signing (tampered envelope)"
    )


def check_document(data: bytes) -> VerifiedDocument:
    """Canonical bytes, schema and identity hash of a bare document (no signature)."""
    document = _json_object(data, "the document")
    schema = document.get("schema")
    if not isinstance(schema, str) or schema not in DOCUMENTS:
        raise ReceiptInvalid(f"unknown schema {schema!r}; expected one of {', '.join(DOCUMENTS)}")
    kind, model = DOCUMENTS[schema]
    # (a) the bytes are exactly their RFC 8785 encoding
    try:
        expected = canonical_bytes(document)
    except ValueError as exc:
        raise ReceiptInvalid(f"not canonical: {exc}") from exc
    if expected != data:
        at = len(os.path.commonprefix([expected, data]))
        raise ReceiptInvalid(
            f"not canonical: the {schema} bytes differ from their RFC 8785 (JCS) re-encoding "
            f"at byte {at} ({len(data)} bytes given, {len(expected)} canonical)"
        )
    lines = [f"canonical: {len(data)} bytes are exactly RFC 8785 (JCS)"]
    # (b) the document parses with its strict model
    try:
        model.model_validate(document)
    except ValidationError as exc:
        raise ReceiptInvalid(f"not a valid {schema}: {_first_error(exc)}") from exc
    lines.append(f"schema: parses as {schema}")
    # (c) the identity fields recompute
    identity, identity_lines = _check_identity(schema, document)
    return VerifiedDocument(kind, schema, identity, None, False, (*lines, *identity_lines))


def _check_identity(schema: str, document: dict[str, Any]) -> tuple[str, list[str]]:
    if schema in RECEIPTS:
        digest = receipt_sha256(document)
        expected = {"receipt_sha256": digest}
    elif schema == "PatchBundleV1":
        digest = bundle_sha256(document)
        expected = {"bundle_sha256": digest, "bundle_id": bundle_id_for(digest)}
    else:
        digest = projection_sha256(document, GRANT_IDENTITY)
        if document.get("grant_sha256") is None:
            return digest, [f"grant_sha256: absent; computed {digest}"]
        expected = {"grant_sha256": digest}
    for field, value in expected.items():
        stated = document.get(field)
        if stated != value:
            what = "wrong id" if field == "bundle_id" else "wrong hash"
            raise ReceiptInvalid(
                f"{what}: {field} says {stated!r} but the content gives {value!r}", field=field
            )
    return digest, [f"{field}: {value} recomputed, matches" for field, value in expected.items()]


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = load_json(data)
    except PromoterError as exc:
        raise ReceiptInvalid(f"{what} is not JSON: {exc.detail}") from exc
    if not isinstance(value, dict):
        raise ReceiptInvalid(f"{what} is not a JSON object")
    return value


_URLSAFE = str.maketrans("-_", "+/")


def _b64decode(text: str, what: str) -> bytes:
    """Standard or URL-safe base64 (DSSE allows either), padding required."""
    try:
        return base64.b64decode(text.translate(_URLSAFE), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ReceiptInvalid(f"the envelope's {what} is not base64: {exc}") from exc


def _first_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "document"
    return f"{where}: {first['msg']}"
