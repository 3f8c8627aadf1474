"""Signed receipts offline (protocol: bundles#signed-receipts): the host key file, DSSE envelopes,
attacks on them.

Expected hashes, PAE bytes and signatures are rebuilt here with hashlib, rfc8785 and
cryptography directly, not with promoter's own helpers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from promoter.engine.receipts.signing import HostKey, pae, sign_envelope, verify_document
from promoter.errors import ConfigError, ReceiptInvalid
from tests.support.flows import jcs_sha, make_bundle, promotion_body

PAYLOAD_TYPE = "application/vnd.in-toto+json"
LEGACY_TYPE = "application/vnd.promoter.PatchPromotionReceiptV1+json"


def sealed(document: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in document.items() if k != "receipt_sha256"}
    return {**document, "receipt_sha256": jcs_sha(body)}


def promotion() -> dict[str, Any]:
    return sealed(promotion_body())


def verification() -> dict[str, Any]:
    names = "manifest_integrity blob_integrity grant_binding path_policy limits allowlist"
    passed = {"status": "passed", "evidence_sha256": "7" * 64, "detail": ""}
    shared = ("bundle_id", "bundle_sha256", "grant_id", "grant_sha256", "repository_identity")
    return sealed(
        {
            "schema": "PatchVerificationReceiptV1",
            **{name: promotion()[name] for name in shared},
            "executor_run_id": "run_1",
            "status": "passed",
            "checks": [{"name": n, **passed} for n in [*names.split(), "preconditions"]],
        }
    )


def rollback() -> dict[str, Any]:
    return sealed(
        {
            "schema": "RollbackReceiptV1",
            "operation_id": "op_" + "1" * 32,
            "status": "rolled_back",
            "targets": [
                {
                    "path": "src/app.py",
                    "result": "restored",
                    "actual": {"exists": True, "sha256": "8" * 64, "mode": "100644", "bytes": 3},
                }
            ],
            "removed_directories": [],
            "rolled_back_at": "2026-11-30T21:06:00Z",
        }
    )


def grant() -> dict[str, Any]:
    document = {
        "schema": "GrantV1",
        "grant_id": "grt_test1",
        "repository_identity": "repo_" + "2" * 32,
        "branch": "refs/heads/main",
        "base_commit": "a" * 40,
        "base_tree": "b" * 40,
        "executor_run_id": "run_1",
        "workflow_id": "wf_1",
        "stage": "implement",
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": 7,
        "not_before": "2026-11-30T20:00:00Z",
        "expires_at": "2026-11-30T22:00:00Z",
        "write_allowlist": [{"pattern": "**", "operations": ["create", "modify", "delete"]}],
        "target_preconditions": [],
        "limits": {"max_changes": 10, "max_total_bytes": 1000},
    }
    return {**document, "grant_sha256": jcs_sha(document)}


def bundle() -> dict[str, Any]:
    return make_bundle(grant(), [("src/app.py", b"v1\n", b"v2\n")])


def jcs(document: dict[str, Any]) -> bytes:
    return bytes(rfc8785.dumps(document))


def statement(document: dict[str, Any], predicate_type: str | None = None) -> dict[str, Any]:
    """The in-toto Statement v1 of a receipt, built by hand from the rules
    (protocol: bundles#signed-receipts)."""
    schema = document["schema"]
    if schema == "PatchVerificationReceiptV1":
        names = [(document["bundle_id"], document["bundle_sha256"])]
    elif schema == "PatchPromotionReceiptV1":
        names = [(t["path"], t["sha256"]) for t in document["targets"] if t["exists"]]
    else:
        names = [(t["path"], t["actual"]["sha256"]) for t in document["targets"]]
    kind = {"PatchVerificationReceiptV1": "verification", "PatchPromotionReceiptV1": "promotion"}
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in names],
        "predicateType": predicate_type
        or f"urn:promoter:receipt:{kind.get(schema, 'rollback')}:v1",
        "predicate": document,
    }


def raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def dsse_pae(kind: str, body: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind.encode(), len(body), body)


def envelope_of(
    signer: Ed25519PrivateKey, body: bytes, kind: str = PAYLOAD_TYPE, keyid: str | None = None
) -> bytes:
    """An envelope made by hand: any signer, any payload type, any keyid."""
    message = dsse_pae(kind, body)
    return json.dumps(
        {
            "payloadType": kind,
            "payload": base64.b64encode(body).decode(),
            "signatures": [
                {
                    "keyid": keyid or hashlib.sha256(raw(signer.public_key())).hexdigest(),
                    "sig": base64.b64encode(signer.sign(message)).decode(),
                }
            ],
        }
    ).encode()


@pytest.fixture
def key(tmp_path: Path) -> HostKey:
    return HostKey.load_or_create(tmp_path / "credentials")


def signed(key: HostKey, document: dict[str, Any]) -> bytes:
    return json.dumps(sign_envelope(key, jcs(document))).encode()


def test_pae_is_the_dsse_v1_encoding() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_signed_promotion_receipt_verifies_with_the_host_key(key: HostKey) -> None:
    document = promotion()
    data = jcs(document)
    envelope = sign_envelope(key, data)

    assert envelope["payloadType"] == PAYLOAD_TYPE
    payload = base64.b64decode(envelope["payload"])
    assert payload == jcs(statement(document))
    assert b'"predicate":' + data + b',"predicateType"' in payload  # byte-identical
    [signature] = envelope["signatures"]
    assert signature["keyid"] == hashlib.sha256(raw(key.public_key)).hexdigest() == key.keyid
    key.public_key.verify(
        base64.b64decode(signature["sig"]),
        dsse_pae(PAYLOAD_TYPE, payload),
    )
    result = verify_document(json.dumps(envelope).encode(), [key.public_key])
    assert (result.kind, result.schema, result.keyid, result.enveloped) == (
        "promotion_receipt",
        "PatchPromotionReceiptV1",
        key.keyid,
        True,
    )
    assert result.identity_sha256 == document["receipt_sha256"]
    assert f"signature: verified with key {key.keyid}" in result.checks
    assert result.predicate_type == "urn:promoter:receipt:promotion:v1"
    assert (result.body, result.subjects) == (data, ("src/app.py",))


@pytest.mark.parametrize("make", [promotion, verification, rollback])
def test_the_signed_statement_is_the_jcs_of_the_statement_around_the_receipts_bytes(
    key: HostKey, make: Any
) -> None:
    """The Statement is joined around the checked receipt bytes, not encoded again: the
    same bytes as RFC 8785 of the whole Statement, built by hand."""
    document = make()
    payload = base64.b64decode(sign_envelope(key, jcs(document))["payload"])
    assert payload == jcs(statement(document))


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (promotion, "promotion_receipt"),
        (verification, "verification_receipt"),
        (rollback, "rollback_receipt"),
        (bundle, "bundle"),
        (grant, "grant"),
    ],
)
def test_documents_verify_bare_and_receipts_verify_signed(
    key: HostKey, make: Any, kind: str
) -> None:
    document = make()
    field = {"bundle": "bundle_sha256", "grant": "grant_sha256"}.get(kind, "receipt_sha256")
    bare = verify_document(jcs(document), None)
    assert (bare.kind, bare.keyid, bare.enveloped) == (kind, None, False)
    assert bare.identity_sha256 == document[field]
    if field == "receipt_sha256":
        result = verify_document(signed(key, document), [key.public_key])
        assert (result.kind, result.keyid, result.enveloped) == (kind, key.keyid, True)


def test_envelope_without_a_key_reports_signature_not_checked(key: HostKey) -> None:
    result = verify_document(signed(key, promotion()), None)
    assert result.keyid is None
    assert any(line.startswith("signature: NOT CHECKED") for line in result.checks)


def test_url_safe_base64_is_accepted(key: HostKey) -> None:
    envelope = sign_envelope(key, jcs(promotion()))
    envelope["payload"] = envelope["payload"].replace("+", "-").replace("/", "_")
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"].replace("+", "-")
    assert verify_document(json.dumps(envelope).encode(), [key.public_key]).keyid == key.keyid


def test_tampered_payload_byte_is_rejected(key: HostKey) -> None:
    envelope = sign_envelope(key, jcs(promotion()))
    body = base64.b64decode(envelope["payload"])
    tampered = body.replace(b"6" * 64, b"9" + b"6" * 63)
    assert len(tampered) == len(body) and tampered != body
    envelope["payload"] = base64.b64encode(tampered).decode()
    data = json.dumps(envelope).encode()
    with pytest.raises(ReceiptInvalid, match="signature does not verify.*altered") as caught:
        verify_document(data, [key.public_key])
    assert caught.value.code == "receipt_invalid"
    with pytest.raises(ReceiptInvalid, match="wrong hash: receipt_sha256"):
        verify_document(data, None)  # without a key the hash still catches it


def test_envelope_signed_by_another_key_is_rejected(key: HostKey) -> None:
    stranger = Ed25519PrivateKey.generate()
    data = envelope_of(stranger, jcs(statement(promotion())))
    with pytest.raises(ReceiptInvalid, match=f"wrong key: .*given public key.*{key.keyid}"):
        verify_document(data, [key.public_key])


def test_foreign_signature_claiming_the_host_keyid_is_rejected(key: HostKey) -> None:
    data = envelope_of(Ed25519PrivateKey.generate(), jcs(statement(promotion())), keyid=key.keyid)
    with pytest.raises(ReceiptInvalid, match="signature does not verify"):
        verify_document(data, [key.public_key])


def test_envelope_without_signatures_is_rejected_when_a_key_is_given(key: HostKey) -> None:
    envelope = sign_envelope(key, jcs(promotion()))
    envelope["signatures"] = []
    with pytest.raises(ReceiptInvalid, match="no signatures"):
        verify_document(json.dumps(envelope).encode(), [key.public_key])


def test_receipt_relabelled_as_another_kind_is_rejected(key: HostKey) -> None:
    rollback_type = "urn:promoter:receipt:rollback:v1"
    data = envelope_of(key.private_key, jcs(statement(promotion(), rollback_type)))
    with pytest.raises(ReceiptInvalid, match="predicateType mismatch.*PatchPromotionReceiptV1"):
        verify_document(data, [key.public_key])  # signed that way: the predicate disagrees
    envelope = sign_envelope(key, jcs(promotion()))
    envelope["payloadType"] = "application/vnd.in-toto.other+json"
    with pytest.raises(ReceiptInvalid, match="wrong payload type"):
        verify_document(json.dumps(envelope).encode(), [key.public_key])  # relabelled later


@pytest.mark.parametrize("kind", [LEGACY_TYPE, "application/json", ""])
def test_foreign_payload_type_is_rejected(key: HostKey, kind: str) -> None:
    data = envelope_of(key.private_key, jcs(statement(promotion())), kind=kind)
    with pytest.raises(ReceiptInvalid, match="wrong payload type"):
        verify_document(data, [key.public_key])


def test_statement_with_an_altered_subject_is_rejected(key: HostKey) -> None:
    forged = statement(promotion())
    forged["subject"][0]["digest"]["sha256"] = "9" * 64  # claims other content, signed
    with pytest.raises(ReceiptInvalid, match="subject altered"):
        verify_document(envelope_of(key.private_key, jcs(forged)), [key.public_key])


def test_payload_that_is_not_a_statement_is_rejected(key: HostKey) -> None:
    bare = envelope_of(key.private_key, jcs(promotion()))  # the pre-1.1 payload
    with pytest.raises(ReceiptInvalid, match="not an in-toto Statement v1"):
        verify_document(bare, [key.public_key])
    extra = {**statement(promotion()), "note": "x"}
    with pytest.raises(ReceiptInvalid, match="Statement fields are"):
        verify_document(envelope_of(key.private_key, jcs(extra)), [key.public_key])


def test_signed_receipt_with_a_wrong_hash_is_rejected(key: HostKey) -> None:
    document = {**promotion(), "receipt_sha256": "0" * 64}
    data = envelope_of(key.private_key, jcs(statement(document)))  # valid signature, bad content
    with pytest.raises(ReceiptInvalid, match="wrong hash: receipt_sha256 says '0{64}'"):
        verify_document(data, [key.public_key])
    with pytest.raises(ReceiptInvalid, match="wrong hash"):
        sign_envelope(key, jcs(document))  # and the host refuses to sign it


def test_signed_non_canonical_payload_is_rejected(key: HostKey) -> None:
    body = json.dumps(statement(promotion()), indent=1).encode()
    with pytest.raises(ReceiptInvalid, match="not RFC 8785"):
        verify_document(envelope_of(key.private_key, body), [key.public_key])


def test_bare_document_with_a_public_key_is_refused(key: HostKey) -> None:
    with pytest.raises(ReceiptInvalid, match="bare PatchPromotionReceiptV1, not a signed"):
        verify_document(jcs(promotion()), [key.public_key])


def test_non_canonical_reencoding_is_rejected() -> None:
    for variant in (
        json.dumps(promotion(), indent=2),
        json.dumps(promotion()),
        jcs(promotion()).decode() + "\n",
    ):
        with pytest.raises(ReceiptInvalid, match="not canonical.*RFC 8785"):
            verify_document(variant.encode(), None)


@pytest.mark.parametrize(
    ("make", "field", "value", "message"),
    [
        pytest.param(
            rollback, "receipt_sha256", "f" * 64, "wrong hash: receipt_sha256", id="receipt"
        ),
        pytest.param(bundle, "bundle_id", "bnd_" + "0" * 32, "wrong id: bundle_id", id="bundle_id"),
        pytest.param(bundle, "total_bytes", 7, "wrong hash: bundle_sha256", id="bundle_sha256"),
        pytest.param(grant, "fence", 8, "wrong hash: grant_sha256", id="grant_sha256"),
    ],
)
def test_document_with_a_wrong_identity_is_rejected(
    make: Any, field: str, value: Any, message: str
) -> None:
    with pytest.raises(ReceiptInvalid, match=message):
        verify_document(jcs({**make(), field: value}), None)


def test_receipt_with_an_unknown_field_is_rejected() -> None:
    document = sealed({**promotion(), "note": "trust me"})
    with pytest.raises(ReceiptInvalid, match="not a valid PatchPromotionReceiptV1: note"):
        verify_document(jcs(document), None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"a":1,"a":1}', "not JSON"),
        (b'{"hello":"world"}', "neither a DSSE envelope nor a promoter document"),
        (b'{"schema":"PatchBundleV2"}', "unknown schema"),
        (b'{"payload":"","payloadType":"x"}', "not a DSSE envelope: signatures"),
        (
            b'{"payload":"%%%","payloadType":"' + PAYLOAD_TYPE.encode() + b'","signatures":[]}',
            "payload is not base64",
        ),
    ],
)
def test_garbage_is_rejected_with_receipt_invalid(data: bytes, message: str) -> None:
    with pytest.raises(ReceiptInvalid, match=message):
        verify_document(data, None)


def test_key_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    first = HostKey.load_or_create(credentials)
    path = credentials / "host-signing.key"
    info = path.lstat()
    assert info.st_mode & 0o777 == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert credentials.stat().st_mode & 0o777 == 0o700
    second = HostKey.load_or_create(credentials)
    assert second.keyid == first.keyid
    assert path.lstat().st_ino == info.st_ino
    assert first.keyid == hashlib.sha256(raw(first.public_key)).hexdigest()
    assert not [p for p in credentials.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("dangling", [False, True])
def test_symlinked_key_file_is_refused_and_left_alone(tmp_path: Path, dangling: bool) -> None:
    target = tmp_path / "elsewhere" / "host-signing.key"
    if not dangling:
        HostKey.load_or_create(target.parent)
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / "host-signing.key").symlink_to(target)
    with pytest.raises(ConfigError, match="is a symlink"):
        HostKey.load_or_create(credentials)
    assert (credentials / "host-signing.key").is_symlink()
    assert target.exists() is not dangling


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    credentials = tmp_path / "credentials"
    HostKey.load_or_create(credentials)
    os.chmod(credentials / "host-signing.key", mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o}"):
        HostKey.load_or_create(credentials)


def test_corrupt_key_file_is_refused_not_overwritten(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    path = credentials / "host-signing.key"
    path.write_bytes(b"garbage")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        HostKey.load_or_create(credentials)
    assert path.read_bytes() == b"garbage"
