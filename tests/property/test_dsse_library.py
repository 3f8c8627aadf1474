"""Property: the DSSE envelope made through securesystemslib is the one DSSE v1 defines.

The pre-authentication encoding is compared, on generated payload types and bodies, with
the encoding written out by hand from the DSSE v1 protocol (the one promoter computed
itself before): ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, lengths in ASCII
decimal bytes, and with the library's own (which signs; the verifier encodes without
loading it). Signed envelopes are checked with cryptography alone. The edge where
promoter's verifier deliberately differs from ``Envelope.verify`` is pinned: a keyid is an
unauthenticated hint, so a good signature under another keyid still verifies.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from promoter.engine.receipts.signing import HostKey, pae, sign_envelope, verify_document
from tests.unit.test_signing import PAYLOAD_TYPE, jcs, promotion


def hand_pae(kind: str, body: bytes) -> bytes:
    """DSSE v1 PAE as the protocol text spells it."""
    encoded = kind.encode("utf-8")
    return b"DSSEv1 " + b" ".join(
        [str(len(encoded)).encode("ascii"), encoded, str(len(body)).encode("ascii"), body]
    )


@settings(max_examples=300, deadline=None)
@given(kind=st.text(alphabet=st.characters(exclude_categories=["Cs"])), body=st.binary())
def test_pae_equals_the_hand_written_encoding(kind: str, body: bytes) -> None:
    assert pae(kind, body) == hand_pae(kind, body)


@settings(max_examples=300, deadline=None)
@given(kind=st.text(alphabet=st.characters(exclude_categories=["Cs"])), body=st.binary())
def test_the_verifiers_pae_is_the_one_the_library_signs(kind: str, body: bytes) -> None:
    """The verifier encodes without securesystemslib; what it checks is what was signed."""
    assert pae(kind, body) == Envelope(body, kind, {}).pae()


@pytest.fixture
def key(tmp_path: Path) -> HostKey:
    return HostKey.load_or_create(tmp_path / "credentials")


def test_signed_envelope_is_standard_base64_over_the_pae(key: HostKey) -> None:
    envelope = sign_envelope(key, jcs(promotion()))
    assert sorted(envelope) == ["payload", "payloadType", "signatures"]
    assert envelope["payloadType"] == PAYLOAD_TYPE
    body = base64.b64decode(envelope["payload"], validate=True)
    [signature] = envelope["signatures"]
    assert sorted(signature) == ["keyid", "sig"]
    assert signature["keyid"] == key.keyid
    key.public_key.verify(
        base64.b64decode(signature["sig"], validate=True), hand_pae(PAYLOAD_TYPE, body)
    )


def test_a_good_signature_under_another_keyid_verifies(key: HostKey) -> None:
    """DSSE keyids are hints: promoter tries every key; ``Envelope.verify`` does not."""
    envelope = sign_envelope(key, jcs(promotion()))
    envelope["signatures"][0]["keyid"] = ""
    data = json.dumps(envelope).encode()
    assert verify_document(data, [key.public_key]).keyid == key.keyid
    sslib_key = SSlibKey.from_crypto(key.public_key, keyid=key.keyid, scheme="ed25519")
    with pytest.raises(VerificationError):
        Envelope.from_dict(json.loads(data)).verify([sslib_key], 1)


def test_two_signatures_under_one_keyid_verify(key: HostKey, tmp_path: Path) -> None:
    """A stale signature beside a good one under the same keyid does not hide the good one;
    ``Envelope.from_dict`` refuses such an envelope outright."""
    other = HostKey.load_or_create(tmp_path / "other")
    envelope = sign_envelope(key, jcs(promotion()))
    stale = sign_envelope(other, jcs(promotion()))["signatures"][0]
    envelope["signatures"].insert(0, {**stale, "keyid": key.keyid})
    data = json.dumps(envelope).encode()
    assert verify_document(data, [key.public_key]).keyid == key.keyid
    with pytest.raises(ValueError, match="Multiple signatures"):
        Envelope.from_dict(json.loads(data))
