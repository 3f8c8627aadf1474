"""Signed receipts (protocol: bundles#signed-receipts): DSSE envelopes over in-toto Statements.

Owns the DSSE v1 envelope (``payloadType: application/vnd.in-toto+json``) over the
canonical Statement whose predicate is the exact canonical bytes of a receipt (made and
signed by ``securesystemslib.dsse``, imported only to sign; the verifier computes the
same pre-authentication encoding itself), and
``verify_document``, which checks an envelope or a bare receipt, bundle or grant with
nothing but the bytes and (optionally) public keys: no server, no network, no state.
``host_keyring(services)`` is the one place a running daemon reads its keyring
(``promoter.engine.receipts.envelopes`` publishes it into the ledger and signs with it).

Deliberately not here: the key files and rotation (``promoter.store.keyring``), the
Statement's shape and subjects (``promoter.engine.receipts.statement``), storing or finding
receipts (``promoter.engine.operation.receipts``, ``promoter.store.audit``), deciding who may
fetch them (``promoter.api``), reading an operator's public key files
(``promoter.cli.trusted_keys``), and checks that need the blob store or a repository.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from promoter.domain.canonical import canonical_bytes, parse_rfc3339, projection_sha256
from promoter.domain.documents import GRANT_IDENTITY, bundle_id_for, bundle_sha256, receipt_sha256
from promoter.domain.statement_types import PAYLOAD_TYPE
from promoter.domain.wirecheck import problem
from promoter.engine.receipts.statement import (
    check_subjects,
    checked_statement_bytes,
    json_object,
    open_statement,
)
from promoter.errors import ReceiptInvalid
from promoter.store.keyring import (
    ALGORITHM,
    KEY_FILE,
    HostKey,
    Keyring,
    keyid_of,
    keyring_stamp,
    load_keyring,
)

if TYPE_CHECKING:
    from pydantic import ValidationError
    from securesystemslib.signer import CryptoSigner

    from promoter.engine.ports import KeyringFile

__all__ = [
    "ALGORITHM",
    "KEY_FILE",
    "HostKey",
    "TrustedKey",
    "VerifiedDocument",
    "keyid_of",
    "verify_document",
]

# schema -> kind; the host signs receipts, bundles and grants are checked bare. Each is
# checked by ``promoter.domain.wirecheck``, the same verdict as its model without pydantic.
RECEIPTS: dict[str, str] = {
    "PatchVerificationReceiptV1": "verification_receipt",
    "PatchPromotionReceiptV1": "promotion_receipt",
    "RollbackReceiptV1": "rollback_receipt",
}
DOCUMENTS: dict[str, str] = {**RECEIPTS, "PatchBundleV1": "bundle", "GrantV1": "grant"}


# --- the daemon's key -----------------------------------------------------------------------


def host_keyring(services: KeyringFile) -> Keyring:
    """The daemon's keyring, loaded once and reloaded when a rotation replaced its file.

    The only function that touches ``services.host_keyring``.
    """
    credentials = services.settings.signing_dir
    cached = services.host_keyring
    stamp = keyring_stamp(credentials)
    if cached is not None and cached[0] == stamp and stamp is not None:
        return cached[1]
    keyring = load_keyring(credentials)
    services.host_keyring = (keyring_stamp(credentials), keyring)
    return keyring


# --- DSSE -----------------------------------------------------------------------------------


def pae(payload_type_: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding (lengths are ASCII decimal byte counts).

    The bytes securesystemslib's ``Envelope.pae`` computes when it signs (a test compares
    them), written here so that verifying loads none of securesystemslib, whose signers
    (AWS, GPG, Sigstore among them) cost an offline check more than its work.
    """
    kind = payload_type_.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body)


_SIGNERS: dict[int, tuple[HostKey, CryptoSigner]] = {}  # by the key object's id, held


def _signer(key: HostKey) -> CryptoSigner:
    """The host key as a securesystemslib signer whose signatures carry promoter's keyid
    (made once a key object: a key's fields never change)."""
    from securesystemslib.signer import CryptoSigner, SSlibKey

    known = _SIGNERS.get(id(key))
    if known is not None and known[0] is key:
        return known[1]
    public = SSlibKey.from_crypto(key.public_key, keyid=key.keyid, scheme=ALGORITHM)
    signer = CryptoSigner(key.private_key, public)
    if len(_SIGNERS) >= 8:  # a rotated key's signer is not kept for ever
        _SIGNERS.clear()
    _SIGNERS[id(key)] = (key, signer)
    return signer


# a DSSE envelope as securesystemslib writes it (``DsseEnvelope`` parses it back)
def sign_envelope(key: HostKey, receipt_bytes: bytes) -> dict[str, Any]:
    """A DSSE envelope over the in-toto Statement of a receipt's exact canonical bytes.

    The bytes are checked first as ``verify_document`` checks them, so the host never
    signs a receipt that an offline verifier would reject. The envelope is securesystemslib's
    (standard base64, one ``{keyid, sig}`` per signature).
    """
    return sign_receipt(key, receipt_bytes)[0]


def sign_receipt(key: HostKey, receipt_bytes: bytes) -> tuple[dict[str, Any], str]:
    """``sign_envelope``'s envelope and the receipt's ``receipt_sha256`` as its check
    recomputed it; the receipt is parsed once and its checked bytes are the predicate's."""
    receipt = json_object(receipt_bytes, "the document")
    checked = _check_parsed(receipt_bytes, receipt, _model_problem)
    if checked.schema not in RECEIPTS:
        raise ReceiptInvalid(f"only receipts are signed, not a {checked.schema}")
    from securesystemslib.dsse import Envelope

    envelope = Envelope(checked_statement_bytes(receipt, receipt_bytes), PAYLOAD_TYPE, {})
    envelope.sign(_signer(key))
    document: dict[str, Any] = envelope.to_dict()  # the library's untyped answer
    return document, checked.identity_sha256


# --- offline verification -------------------------------------------------------------------


class TrustedKey(NamedTuple):  # no dataclass: made at an offline check's import
    """A public key to verify with and, for a retired key, the end of its window."""

    public_key: Ed25519PublicKey
    not_after: str | None = None
    host_id: str | None = None  # the host the ledger's key set names, when it names one

    @property
    def keyid(self) -> str:
        return keyid_of(self.public_key)


class VerifiedDocument(NamedTuple):  # no dataclass: made at an offline check's import
    """What ``verify_document`` established, one human-readable line per check."""

    kind: str  # verification_receipt | promotion_receipt | rollback_receipt | bundle | grant
    schema: str
    identity_sha256: str  # receipt_sha256, bundle_sha256 or grant_sha256
    keyid: str | None  # the key whose signature verified; None when none was checked
    enveloped: bool
    checks: tuple[str, ...]
    body: bytes = b""  # the document's canonical bytes (an envelope's predicate)
    predicate_type: str | None = None
    subjects: tuple[str, ...] = ()

    @property
    def signature_checked(self) -> bool:
        return self.keyid is not None

    @property
    def needs_signature(self) -> bool:
        """A receipt is only valid signed: its self-hash alone anyone can compute."""
        return self.schema in RECEIPTS and not self.signature_checked


def verify_document(
    data: bytes, public_keys: Sequence[Ed25519PublicKey | TrustedKey] | None
) -> VerifiedDocument:
    """Check a DSSE envelope or a bare receipt, bundle or grant; raise ``ReceiptInvalid``.

    Without keys an envelope's signature is not checked: the result says so
    (``signature_checked`` is false) and callers must not call it valid.
    """
    top = json_object(data, "the file")
    keys = [k if isinstance(k, TrustedKey) else TrustedKey(k) for k in public_keys or ()]
    if "payloadType" in top:
        return _verify_envelope(top, keys)
    if "schema" not in top:
        raise ReceiptInvalid("the file is neither a DSSE envelope nor a promoter document")
    document = check_document(data)
    if keys:
        raise ReceiptInvalid(
            f"a public key was given but the file is a bare {document.schema}, not a signed "
            "DSSE envelope"
        )
    return document


# a JSON object from a file or the wire: parsed as a ``DsseEnvelope`` first thing
def _verify_envelope(top: dict[str, Any], keys: Sequence[TrustedKey]) -> VerifiedDocument:
    found = problem("DsseEnvelope", top)
    if found is not None:
        raise ReceiptInvalid(f"not a DSSE envelope: {_refusal('DsseEnvelope', top, found)}")
    # (1) the payload type is the in-toto one
    kind: str = top["payloadType"]
    if kind != PAYLOAD_TYPE:
        raise ReceiptInvalid(f"wrong payload type: {kind!r} is not {PAYLOAD_TYPE!r}")
    body = _b64decode(top["payload"], "payload")
    signatures: list[dict[str, str]] = top["signatures"]
    lines = [f"envelope: DSSE v1, payloadType {kind}"]
    # (2) a signature over PAE(payloadType, payload) verifies with a given key
    signer = _check_signatures(signatures, kind, body, keys)
    if signer is None:
        signers = ", ".join(s["keyid"] for s in signatures) or "nobody"
        lines.append(f"signature: NOT CHECKED (no public key given; signed by {signers})")
    else:
        of_host = "" if signer.host_id is None else f" of host {signer.host_id}"
        lines.append(f"signature: verified with key {signer.keyid}{of_host}")
    # (3) the payload is an in-toto Statement v1 with a promoter predicate type
    statement, predicate, statement_lines = open_statement(body)
    lines.extend(statement_lines)
    # (4) the predicate passes every document check, then the subjects recompute from it
    document = check_document(predicate)
    lines.append(check_subjects(statement))
    lines.append("predicate: byte-identical to the canonical receipt")
    if signer is not None and signer.not_after is not None:
        lines.append(_check_window(signer, predicate))
    return document._replace(
        keyid=None if signer is None else signer.keyid,
        enveloped=True,
        checks=(*lines, *document.checks),
        predicate_type=statement["predicateType"],
        subjects=tuple(s["name"] for s in statement["subject"]),
    )


_MADE_AT = ("promoted_at", "rolled_back_at")


def _check_window(signer: TrustedKey, predicate: bytes) -> str:
    """A retired key's signature is only good on receipts made before it was retired."""
    retired = signer.not_after or ""
    receipt = json_object(predicate, "the predicate")
    made = next((receipt[f] for f in _MADE_AT if isinstance(receipt.get(f), str)), None)
    if made is None:
        return f"key window: {signer.keyid} retired {retired}; the receipt carries no time"
    if parse_rfc3339(made) > parse_rfc3339(retired):
        raise ReceiptInvalid(
            f"rotated-out key: {signer.keyid} was retired at {retired} but signs a receipt "
            f"made at {made}"
        )
    return f"key window: made {made}, before {signer.keyid} was retired at {retired}"


def _check_signatures(
    signatures: list[dict[str, str]], kind: str, body: bytes, keys: Sequence[TrustedKey]
) -> TrustedKey | None:
    """The first given key that verifies a signature; None if no keys were given.

    Not ``Envelope.verify``: that one only tries a key on a signature that claims the
    key's keyid, and ``Envelope.from_dict`` refuses two signatures with one keyid. A DSSE
    keyid is an unauthenticated hint, so every given key is tried on every signature.
    """
    if not keys:
        return None
    message = pae(kind, body)
    for signature in signatures:
        raw = _b64decode(signature["sig"], "signature")
        for key in keys:
            try:
                key.public_key.verify(raw, message)
            except InvalidSignature:
                continue
            return key
    # The claimed keyids are unauthenticated; they only choose the message.
    given = sorted(key.keyid for key in keys)
    claimed = [s["keyid"] for s in signatures]
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


def check_document(
    data: bytes, problem_of: Callable[[str, object], str | None] | None = None
) -> VerifiedDocument:
    """Canonical bytes, schema and identity hash of a bare document (no signature).

    ``problem_of`` says why the document is no valid one of its schema (None when it is):
    the pydantic-free checker by default; the daemon, which has the models loaded, signs
    after asking them (``_model_problem``), which is faster on a large receipt. The two
    give the same verdict (``tests/property/test_wirecheck_differential.py``).
    """
    return _check_parsed(data, json_object(data, "the document"), problem_of)


def _check_parsed(
    data: bytes,
    document: dict[str, Any],
    problem_of: Callable[[str, object], str | None] | None = None,
) -> VerifiedDocument:
    """``check_document`` of ``data`` parsed as ``document``."""
    schema = document.get("schema")
    if not isinstance(schema, str) or schema not in DOCUMENTS:
        raise ReceiptInvalid(f"unknown schema {schema!r}; expected one of {', '.join(DOCUMENTS)}")
    kind = DOCUMENTS[schema]
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
    # (b) the document is one its strict model accepts
    found = (problem_of or problem)(schema, document)
    if found is not None:
        raise ReceiptInvalid(f"not a valid {schema}: {_refusal(schema, document, found)}")
    lines.append(f"schema: parses as {schema}")
    # (c) the identity fields recompute
    identity, identity_lines = _check_identity(schema, document)
    return VerifiedDocument(
        kind, schema, identity, None, False, (*lines, *identity_lines), body=data
    )


# the document as given (its own bytes decide its hash): read, never re-encoded by a model
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


_URLSAFE = str.maketrans("-_", "+/")


def _b64decode(text: str, what: str) -> bytes:
    """Standard or URL-safe base64 (DSSE allows either), padding required."""
    try:
        return base64.b64decode(text.translate(_URLSAFE), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ReceiptInvalid(f"the envelope's {what} is not base64: {exc}") from exc


def _refusal(name: str, document: dict[str, Any], found: str) -> str:
    """Why a refused document is refused, in its model's words when the model says it
    (pydantic is loaded here only, after a refusal); the validator's own otherwise."""
    from pydantic import ValidationError

    from promoter.domain.models import WIRE_MODELS

    try:
        WIRE_MODELS[name].model_validate(document)
    except ValidationError as exc:
        return _first_error(exc)
    return found


def _model_problem(name: str, document: object) -> str | None:
    """The first error of the document's model, or None when the model accepts it."""
    from pydantic import ValidationError

    from promoter.domain.models import WIRE_MODELS

    try:
        WIRE_MODELS[name].model_validate(document)
    except ValidationError as exc:
        return _first_error(exc)
    return None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "document"
    return f"{where}: {first['msg']}"
