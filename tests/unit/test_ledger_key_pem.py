"""The ledger's key set as PEM (``GET /v1/keys.pem``), read back by the verifier.

Each block's explanatory lines give its host and window; a ``keyid:`` line that names
another key than the block after it is refused rather than trusted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from promoter.cli.trusted_keys import load_trusted
from promoter.errors import ConfigError
from promoter.store.keyring import keyid_of


def _pem(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def test_a_pem_key_set_gives_every_key_with_its_host_and_window(tmp_path: Path) -> None:
    a, b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    a_id, b_id = keyid_of(a.public_key()), keyid_of(b.public_key())
    text = (
        f"keyid: {a_id}\nhost_id: host-a\nstatus: active\n{_pem(a)}"
        f"keyid: {b_id}\nhost_id: host-b\nstatus: retired\nnot_after: 2026-12-05T10:00:00Z\n"
        f"{_pem(b)}"
    )
    (tmp_path / "keys.pem").write_text(text)
    keys = load_trusted(tmp_path / "keys.pem")
    assert [(k.keyid, k.host_id, k.not_after) for k in keys] == [
        (a_id, "host-a", None),
        (b_id, "host-b", "2026-12-05T10:00:00Z"),
    ]


def test_a_keyid_line_naming_another_key_is_refused(tmp_path: Path) -> None:
    a, b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    text = f"keyid: {keyid_of(a.public_key())}\nhost_id: host-a\n{_pem(b)}"
    (tmp_path / "keys.pem").write_text(text)
    with pytest.raises(ConfigError, match="keyid line does not match"):
        load_trusted(tmp_path / "keys.pem")


def test_a_plain_pem_key_still_loads_without_a_host(tmp_path: Path) -> None:
    a = Ed25519PrivateKey.generate()
    (tmp_path / "key.pem").write_text(_pem(a))
    [key] = load_trusted(tmp_path / "key.pem")
    assert (key.keyid, key.host_id, key.not_after) == (keyid_of(a.public_key()), None, None)
