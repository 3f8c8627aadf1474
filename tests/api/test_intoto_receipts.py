"""The supply-chain ecosystem reads promoter's envelopes (protocol: bundles#signed-receipts).

Every receipt kind is fetched from the real server and checked with libraries from
PyPI that know nothing of promoter: ``securesystemslib`` (DSSE), ``in_toto`` (its
metadata loader and signature check) and ``in_toto_attestation`` (the Statement v1
protobuf and its ``validate``). Each attack — a tampered payload, a wrong key, a wrong
payload type, a rotated-out key — fails in those libraries too, not only in promoter.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format
from in_toto.exceptions import InvalidMetadata, SignatureVerificationError
from in_toto.models.metadata import Envelope as InTotoEnvelope
from in_toto.models.metadata import Metadata
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, sha
from tests.support.promotion import promote, submit

V1 = b"print('v1')\n"
V2 = b"print('v2')\n"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One daemon, one promotion and its rollback: the three envelopes and the keys."""
    root = tmp_path_factory.mktemp("intoto")
    repo = init_repo(root / "work")
    with running_daemon(root / "state", {"work": repo}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
        answer = promote(daemon, bundle, receipt)
        assert answer.status_code == 200, answer.text
        op = answer.json()["operation_id"]
        envelopes = {
            "verification": _get(daemon, f"/v1/bundles/{bundle['bundle_id']}/verification.dsse"),
            "promotion": _get(daemon, f"/v1/operations/{op}/receipt.dsse"),
        }
        receipts = {
            "verification": _raw(daemon, f"/v1/bundles/{bundle['bundle_id']}/verification"),
            "promotion": _raw(daemon, f"/v1/operations/{op}/receipt"),
        }
        with daemon.operator() as operator:
            assert operator.post(f"/v1/operations/{op}/rollback").status_code == 200
        envelopes["rollback"] = _get(daemon, f"/v1/operations/{op}/rollback-receipt.dsse")
        yield {
            "bundle": bundle,
            "envelopes": envelopes,
            "receipts": receipts,
            "keys": _keys(daemon),
        }


def _raw(daemon: Daemon, path: str) -> bytes:
    with daemon.orchestrator() as orch:
        answer = orch.get(path)
    assert answer.status_code == 200, answer.text
    return answer.content


def _get(daemon: Daemon, path: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(_raw(daemon, path))
    return value


def _keys(daemon: Daemon) -> list[dict[str, Any]]:
    with daemon.client() as anonymous:
        keys: list[dict[str, Any]] = anonymous.get("/v1/keys").json()["keys"]
    return keys


def sslib_key(entry: dict[str, Any]) -> SSlibKey:
    """The served JWK as a securesystemslib key, from its RFC 8037 ``x`` alone."""
    raw = base64.urlsafe_b64decode(entry["x"] + "=" * (-len(entry["x"]) % 4))
    return SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(raw), keyid=entry["kid"])


def stranger_key(keyid: str) -> SSlibKey:
    """Another host's key that claims the same keyid (the keyid is not a secret)."""
    return SSlibKey.from_crypto(Ed25519PrivateKey.generate().public_key(), keyid=keyid)


def intoto_key(key: SSlibKey) -> dict[str, Any]:
    return {"keyid": key.keyid, **key.to_dict()}


KINDS = ("verification", "promotion", "rollback")
PREDICATE_TYPES = {
    "verification": "urn:promoter:receipt:verification:v1",
    "promotion": "urn:promoter:receipt:promotion:v1",
    "rollback": "urn:promoter:receipt:rollback:v1",
}


@pytest.mark.parametrize("kind", KINDS)
def test_securesystemslib_verifies_every_receipt_envelope(
    served: dict[str, Any], kind: str
) -> None:
    [entry] = served["keys"]
    envelope = Envelope.from_dict(deepcopy(served["envelopes"][kind]))
    assert envelope.payload_type == PAYLOAD_TYPE
    accepted = envelope.verify([sslib_key(entry)], 1)
    assert list(accepted) == [entry["keyid"]]


@pytest.mark.parametrize("kind", KINDS)
def test_in_toto_loads_the_envelope_and_checks_its_signature(
    served: dict[str, Any], kind: str
) -> None:
    [entry] = served["keys"]
    metadata = Metadata.from_dict(deepcopy(served["envelopes"][kind]))
    assert isinstance(metadata, InTotoEnvelope)
    metadata.verify_signature(intoto_key(sslib_key(entry)))


@pytest.mark.parametrize("kind", KINDS)
def test_in_toto_attestation_parses_a_valid_statement_v1(served: dict[str, Any], kind: str) -> None:
    payload = base64.b64decode(served["envelopes"][kind]["payload"])
    proto = json_format.Parse(payload, statement_pb2.Statement())
    Statement.copy_from_pb(proto).validate()
    assert proto.type == "https://in-toto.io/Statement/v1"
    assert proto.predicate_type == PREDICATE_TYPES[kind]
    subjects = [(s.name, dict(s.digest)) for s in proto.subject]
    if kind == "verification":
        bundle = served["bundle"]
        assert subjects == [(bundle["bundle_id"], {"sha256": bundle["bundle_sha256"]})]
    elif kind == "promotion":
        assert subjects == [("src/app.py", {"sha256": sha(V2)})]
    else:
        assert subjects == [("src/app.py", {"sha256": sha(V1)})]  # restored
    predicate = json_format.MessageToDict(proto.predicate)
    assert predicate["schema"] == json.loads(payload)["predicate"]["schema"]


@pytest.mark.parametrize("kind", ("verification", "promotion"))
def test_predicate_is_the_stored_receipt_byte_for_byte(served: dict[str, Any], kind: str) -> None:
    payload = base64.b64decode(served["envelopes"][kind]["payload"])
    stored = served["receipts"][kind]
    assert b'"predicate":' + stored + b',"predicateType":' in payload
    assert json.loads(payload)["predicate"] == json.loads(stored)


def test_tampered_payload_fails_in_every_library(served: dict[str, Any]) -> None:
    [entry] = served["keys"]
    envelope = dict(served["envelopes"]["promotion"])
    body = base64.b64decode(envelope["payload"])
    tampered = body.replace(sha(V2).encode(), sha(b"evil\n").encode())
    assert tampered != body
    envelope["payload"] = base64.b64encode(tampered).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(deepcopy(envelope)).verify([sslib_key(entry)], 1)
    with pytest.raises(SignatureVerificationError):
        Metadata.from_dict(deepcopy(envelope)).verify_signature(intoto_key(sslib_key(entry)))


def test_wrong_key_fails_in_every_library(served: dict[str, Any]) -> None:
    [entry] = served["keys"]
    envelope = served["envelopes"]["promotion"]
    impostor = stranger_key(entry["keyid"])
    with pytest.raises(VerificationError):
        Envelope.from_dict(deepcopy(envelope)).verify([impostor], 1)
    with pytest.raises(SignatureVerificationError):
        Metadata.from_dict(deepcopy(envelope)).verify_signature(intoto_key(impostor))


def test_wrong_payload_type_fails_in_every_library(served: dict[str, Any]) -> None:
    [entry] = served["keys"]
    relabelled = {**served["envelopes"]["promotion"], "payloadType": "application/json"}
    with pytest.raises(VerificationError):  # the type is inside the signed PAE
        Envelope.from_dict(deepcopy(relabelled)).verify([sslib_key(entry)], 1)
    with pytest.raises(InvalidMetadata):  # in-toto only reads its own payload type
        Metadata.from_dict(deepcopy(relabelled))


def test_rotated_out_key_fails_on_new_envelopes_in_every_library(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code == 200, answer.text
    operation_id = answer.json()["operation_id"]
    path = f"/v1/operations/{operation_id}/receipt.dsse"
    before = _get(daemon, path)
    [old] = _keys(daemon)
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}
    rotated = subprocess.run(
        [
            sys.executable,
            "-m",
            "promoter.cli.main",
            "keys",
            "rotate",
            "--state-dir",
            str(daemon.state_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    new, retired = _keys(daemon)
    assert retired["kid"] == old["kid"] and retired["status"] == "retired"
    assert _get(daemon, path) == before  # made once, when the receipt was: never re-signed
    with daemon.operator() as op:  # a receipt made after the rotation
        assert op.post(f"/v1/operations/{operation_id}/rollback").status_code == 200
    fresh = _get(daemon, f"/v1/operations/{operation_id}/rollback-receipt.dsse")
    assert fresh["signatures"][0]["keyid"] == new["kid"]
    with pytest.raises(VerificationError):
        Envelope.from_dict(deepcopy(fresh)).verify([sslib_key(old)], 1)
    with pytest.raises(SignatureVerificationError):
        Metadata.from_dict(deepcopy(fresh)).verify_signature(intoto_key(sslib_key(old)))
    # the envelope signed before the rotation still verifies with the retired, listed key
    Envelope.from_dict(deepcopy(before)).verify([sslib_key(retired)], 1)
    Envelope.from_dict(deepcopy(fresh)).verify([sslib_key(new)], 1)
