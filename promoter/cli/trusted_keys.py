"""Public keys a receipt is checked against, read from a file or from what a daemon serves.

A PEM public key file (one key, or the ledger's key set ``GET /v1/keys.pem`` serves: PEM
blocks each preceded by ``keyid:``, ``host_id:``, ``not_after:`` … lines), a JWKS (RFC 8037
OKP/Ed25519) or the JSON ``GET /v1/keys`` serves; every id and key form an entry carries
must agree (``keyid``, ``kid``, ``x`` and the PEM), and a listed end of validity
(``not_after``) must be a timestamp. A file that is none of these raises ``ConfigError``
naming it. Deliberately not here: checking a
signature (``promoter.engine.receipts.signing``), fetching keys (``promoter.cli.receipt_cmd``).
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from promoter.domain.canonical import parse_rfc3339
from promoter.engine.receipts.signing import ALGORITHM, TrustedKey, keyid_of
from promoter.errors import ConfigError

__all__ = [
    "load_public_key",
    "load_public_keys",
    "load_trusted",
    "trusted_from_json",
    "trusted_from_pem",
]


def load_public_keys(path: Path) -> list[Ed25519PublicKey]:
    """Every key in a PEM public key file, a JWKS or the JSON ``GET /v1/keys`` serves."""
    return [key.public_key for key in load_trusted(path)]


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The first key of ``load_public_keys``."""
    return load_public_keys(path)[0]


def load_trusted(path: Path) -> list[TrustedKey]:
    """``load_public_keys`` with each listed key's end of validity (``not_after``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read public key file {path}: {exc}") from exc
    if data.lstrip()[:1] in (b"{", b"["):
        return trusted_from_json(data, str(path))
    if PEM_BEGIN in data:
        return trusted_from_pem(data, str(path))
    if data.lstrip().startswith(b"-----BEGIN"):
        return [TrustedKey(_pem_public_key(data, str(path)))]  # says what it holds instead
    return trusted_from_json(data, str(path))


PEM_BEGIN = b"-----BEGIN PUBLIC KEY-----"
PEM_END = b"-----END PUBLIC KEY-----"


def trusted_from_pem(data: bytes, where: str) -> list[TrustedKey]:
    """Every PUBLIC KEY block, with the ``name: value`` lines written before it."""
    keys: list[TrustedKey] = []
    rest = data
    while PEM_BEGIN in rest:
        text, _, rest = rest.partition(PEM_BEGIN)
        body, found, rest = rest.partition(PEM_END)
        if not found:
            raise ConfigError(f"{where}: a PEM block has no END line")
        key = _pem_public_key(PEM_BEGIN + body + PEM_END + b"\n", where)
        fields = _explanatory(text, where)
        if fields.get("keyid", keyid_of(key)) != keyid_of(key):
            raise ConfigError(f"{where}: the keyid line does not match the PEM block after it")
        not_after = fields.get("not_after")
        if not_after is not None:
            _check_time(not_after, where)
        keys.append(TrustedKey(key, not_after, fields.get("host_id")))
    if not keys:
        raise ConfigError(f"{where}: no PUBLIC KEY block")
    return keys


def _explanatory(text: bytes, where: str) -> dict[str, str]:
    """The ``name: value`` lines before a PEM block (RFC 7468 explanatory text)."""
    fields: dict[str, str] = {}
    for raw in text.decode("utf-8", "replace").splitlines():
        name, sep, value = raw.partition(":")
        if sep and name.strip() in ("keyid", "host_id", "status", "not_before", "not_after"):
            fields[name.strip()] = value.strip()
    return fields


def _check_time(value: str, where: str) -> None:
    try:
        parse_rfc3339(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: not_after {value!r} is not a timestamp") from exc


def trusted_from_json(data: bytes, where: str) -> list[TrustedKey]:
    try:
        served = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where} is neither a PEM public key nor a JWKS") from exc
    entries = served.get("keys") if isinstance(served, dict) and "keys" in served else [served]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where} lists no keys")
    return [_served_key(entry, where) for entry in entries]


def _served_key(entry: Any, where: str) -> TrustedKey:
    """One JWKS or ``/v1/keys`` entry; every id and key form it carries must agree."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: a key entry is not a JSON object")
    pem, x = entry.get("public_key_pem"), entry.get("x")
    if isinstance(pem, str) and entry.get("algorithm", ALGORITHM) == ALGORITHM:
        key = _pem_public_key(pem.encode("ascii", "replace"), where)
    elif entry.get("kty") == "OKP" and entry.get("crv") == "Ed25519" and isinstance(x, str):
        key = _jwk_public_key(x, where)
    else:
        raise ConfigError(f"{where}: a key entry is neither {ALGORITHM} PEM nor an OKP JWK")
    keyid = keyid_of(key)
    if isinstance(x, str) and keyid_of(_jwk_public_key(x, where)) != keyid:
        raise ConfigError(f"{where}: the key entry's x does not match its PEM")
    kid = entry.get("kid")
    if entry.get("keyid", keyid) != keyid or (_is_keyid(kid) and kid != keyid):
        raise ConfigError(f"{where}: the key entry's keyid does not match its key")
    not_after = entry.get("not_after")
    if not_after is not None:
        _check_time(str(not_after), where)
    host = entry.get("host_id")
    return TrustedKey(
        key, None if not_after is None else str(not_after), host if isinstance(host, str) else None
    )


def _is_keyid(value: Any) -> bool:
    hexdigits = "0123456789abcdef"
    return isinstance(value, str) and len(value) == 64 and all(c in hexdigits for c in value)


def _jwk_public_key(x: str, where: str) -> Ed25519PublicKey:
    try:
        raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        return Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, binascii.Error) as exc:
        raise ConfigError(f"{where}: the JWK x is not a 32-byte Ed25519 key") from exc


# an Ed25519 key's SubjectPublicKeyInfo (RFC 8410) before its 32 bytes, and its PEM
# as cryptography writes it: the only form read here without cryptography's PEM reader
_SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")
_PEM_HEAD, _PEM_TAIL = b"-----BEGIN PUBLIC KEY-----\n", b"\n-----END PUBLIC KEY-----\n"


def _written_ed25519(data: bytes) -> Ed25519PublicKey | None:
    """The key of a PEM exactly as cryptography writes an Ed25519 public key, else None."""
    if len(data) != len(_PEM_HEAD) + 60 + len(_PEM_TAIL):
        return None
    text = data[len(_PEM_HEAD) : -len(_PEM_TAIL)]
    if data != _PEM_HEAD + text + _PEM_TAIL:
        return None
    try:
        der = base64.b64decode(text, validate=True)
        if base64.b64encode(der) != text or der[:12] != _SPKI_ED25519 or len(der) != 44:
            return None
        return Ed25519PublicKey.from_public_bytes(der[12:])
    except (ValueError, binascii.Error):
        return None  # cryptography's reader says what it is


def _pem_public_key(data: bytes, where: str) -> Ed25519PublicKey:
    written = _written_ed25519(data)  # the ledger's keys: no PEM reader (SSH, PKCS#12) loaded
    if written is not None:
        return written
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{where}: not a PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{where}: holds a {type(key).__name__}, not an Ed25519 key")
    return key
