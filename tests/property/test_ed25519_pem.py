"""Property: an Ed25519 public key's PEM read without cryptography's PEM reader reads as
that reader reads it.

``promoter.cli.trusted_keys`` reads a PEM exactly as cryptography writes an Ed25519 public
key (the form the ledger's ``GET /v1/keys`` carries) itself, and hands any other bytes to
``serialization.load_pem_public_key``. Over drawn keys, drawn 32-byte strings and drawn
edits of a written PEM: whatever it reads itself, the reader reads as the same key, and
the keys the ledger writes are read without it.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.cli.trusted_keys import _SPKI_ED25519, _pem_public_key, _written_ed25519
from promoter.store.keyring import public_pem, raw_public


def _readers(data: bytes) -> bytes | None:
    """The raw key cryptography's PEM reader reads from ``data``, None if it refuses."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        return None
    return raw_public(key) if isinstance(key, Ed25519PublicKey) else None


def _pem_of(raw: bytes) -> bytes:
    der = base64.b64encode(_SPKI_ED25519 + raw)
    return b"-----BEGIN PUBLIC KEY-----\n" + der + b"\n-----END PUBLIC KEY-----\n"


def test_the_ledgers_keys_are_read_without_the_pem_reader() -> None:
    for _ in range(20):
        key = Ed25519PrivateKey.generate().public_key()
        data = public_pem(key).encode("ascii")
        written = _written_ed25519(data)
        assert written is not None and raw_public(written) == raw_public(key)
        assert raw_public(_pem_public_key(data, "keys.json")) == raw_public(key)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(min_size=32, max_size=32))
def test_any_32_bytes_read_here_are_read_alike_by_the_reader(raw: bytes) -> None:
    written = _written_ed25519(_pem_of(raw))
    if written is not None:
        assert _readers(_pem_of(raw)) == raw_public(written) == raw


@settings(max_examples=500, deadline=None)
@given(
    raw=st.binary(min_size=32, max_size=32),
    at=st.integers(min_value=0, max_value=200),
    cut=st.integers(min_value=0, max_value=3),
    put=st.binary(max_size=3),
)
def test_an_edited_pem_is_read_here_only_as_the_reader_reads_it(
    raw: bytes, at: int, cut: int, put: bytes
) -> None:
    data = _pem_of(raw)
    at = min(at, len(data))
    edited = data[:at] + put + data[at + cut :]
    written = _written_ed25519(edited)
    if written is not None:
        assert _readers(edited) == raw_public(written)
