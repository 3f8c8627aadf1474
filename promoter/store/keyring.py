"""The host's receipt-signing keys: the active private key and the listed public keys.

Owns two files in the credentials directory: ``host-signing.key`` (the active Ed25519
private key, PKCS8 PEM, 0600, created once, refused when it is a symlink or readable by
anyone but its owner) and ``host-keys.json`` (every public key the host has signed with,
each with its validity window: ``not_before`` and, once rotated out, ``not_after``).
``rotate`` makes a new active key: the new private key is written beside the old one
(``host-signing.key.next``), the keyring then lists the old key as retired and the new
one as active, and only then does the new key replace ``host-signing.key``. A reader
that finds the keyring one step ahead of the key file (a crash between the last two
steps) signs with the ``.next`` key the keyring names; the next ``rotate`` finishes it.

Deliberately not here: signing or verifying (``promoter.engine.receipts.signing``), caching the
keyring in a running daemon (``promoter.engine.receipts.signing.host_keyring``), serving keys
(``promoter.api.routes.keys``). Retired private keys are not kept: only their public
halves stay listed, so old envelopes still verify and nothing new can be signed by them.
The durable writes (``promoter.store.durable``) are imported by the functions that write,
so an offline verifier reading public keys loads none of the state directory's code; PEM
(cryptography's ``serialization``, with its SSH and PKCS#12 readers) by the functions that
read or write it, so a key id or a JWK costs no more than the key itself.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from promoter.domain.canonical import canonical_bytes, rfc3339, sha256_hex
from promoter.errors import ConfigError

KEY_FILE = "host-signing.key"
NEXT_KEY_FILE = "host-signing.key.next"
KEYRING_FILE = "host-keys.json"
KEYRING_SCHEMA = "HostKeyringV1"
ALGORITHM = "ed25519"
MAX_KEY_FILE_BYTES = 64 * 1024


def raw_public(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes_raw()  # public_bytes(Encoding.Raw, PublicFormat.Raw)


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """sha256 hex of the raw 32-byte public key: stable for the key's whole life."""
    return sha256_hex(raw_public(public_key))


def public_pem(public_key: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class KeyEntry(TypedDict):
    """``ListedKey.entry``: promoter's fields plus an RFC 8037 OKP JWK."""

    keyid: str
    algorithm: str
    public_key_pem: str
    public_key_raw_b64: str
    status: str
    not_before: str | None
    not_after: str | None
    kty: str
    crv: str
    x: str
    kid: str
    alg: str
    use: str


class HostKeyEntry(KeyEntry):
    """A key of the ledger's key set: the entry and the host that signs or signed with it."""

    host_id: str


class ListedKey(NamedTuple):  # no dataclass: made at an offline check's import
    """A public key the host signs or signed with, and when."""

    public_key: Ed25519PublicKey
    keyid: str
    not_before: str | None  # None: listed before windows were recorded
    not_after: str | None  # None: the active key

    @property
    def status(self) -> str:
        return "active" if self.not_after is None else "retired"

    def entry(self) -> KeyEntry:
        """The ``GET /v1/keys`` entry: promoter's fields plus an RFC 8037 OKP JWK."""
        raw = raw_public(self.public_key)
        return {
            "keyid": self.keyid,
            "algorithm": ALGORITHM,
            "public_key_pem": public_pem(self.public_key),
            "public_key_raw_b64": base64.b64encode(raw).decode("ascii"),
            "status": self.status,
            "not_before": self.not_before,
            "not_after": self.not_after,
            "kty": "OKP",
            "crv": "Ed25519",
            "x": _b64url(raw),
            "kid": self.keyid,
            "alg": "EdDSA",
            "use": "sig",
        }


class HostKey(NamedTuple):  # no dataclass: made at an offline check's import
    """The host's active receipt-signing key (the private half stays in memory)."""

    private_key: Ed25519PrivateKey
    keyid: str

    @classmethod
    def load_or_create(cls, credentials_dir: Path) -> HostKey:
        """Read ``host-signing.key``, creating it durably (0600) when it does not exist."""
        from promoter.store.durable import make_dirs, write_new

        make_dirs(credentials_dir, mode=0o700)
        path = credentials_dir / KEY_FILE
        data = read_key_file(path)
        if data is None:
            try:
                write_new(path, _fresh_pem(), mode=0o600)  # links: a concurrent creator wins
            except OSError as exc:
                raise ConfigError(f"cannot create the host signing key {path}: {exc}") from exc
            data = read_key_file(path) or b""
        return cls.from_pem(data, path)

    @classmethod
    def from_pem(cls, data: bytes, path: Path) -> HostKey:
        from cryptography.hazmat.primitives import serialization

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
        return public_pem(self.public_key)

    def public_jwk(self) -> KeyEntry:
        """This key's ``GET /v1/keys`` entry as the active key with an unknown window."""
        return ListedKey(self.public_key, self.keyid, None, None).entry()

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


class Keyring(NamedTuple):  # no dataclass: made at an offline check's import
    """The active key and every listed public key (active first, then newest retired)."""

    active: HostKey
    listed: tuple[ListedKey, ...]

    def entries(self) -> list[KeyEntry]:
        return [key.entry() for key in self.listed]


def _fresh_pem() -> bytes:
    from cryptography.hazmat.primitives import serialization

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def read_key_file(path: Path) -> bytes | None:
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


# --- the keyring file -------------------------------------------------------------------------


def keyring_stamp(credentials_dir: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of the keyring file: changes whenever a rotation lands."""
    try:
        info = os.stat(credentials_dir / KEYRING_FILE, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot stat {credentials_dir / KEYRING_FILE}: {exc}") from exc
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def _read_listed(path: Path) -> list[ListedKey] | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the keyring {path}: {exc}") from exc
    try:
        document = json.loads(data)
        entries = document["keys"]
        if document.get("schema") != KEYRING_SCHEMA or not isinstance(entries, list):
            raise ValueError("not a HostKeyringV1")
        return [_listed(entry) for entry in entries]
    except (ValueError, KeyError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{path} is not a valid keyring: {exc}") from exc


def _listed(entry: dict[str, Any]) -> ListedKey:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(entry["public_key_pem"].encode("ascii"))
    if not isinstance(key, Ed25519PublicKey) or keyid_of(key) != entry["keyid"]:
        raise ValueError(f"entry {entry.get('keyid')!r} does not hold the Ed25519 key it names")
    return ListedKey(key, entry["keyid"], entry.get("not_before"), entry.get("not_after"))


def _write_listed(path: Path, listed: list[ListedKey]) -> None:
    entries = [
        {
            "keyid": key.keyid,
            "public_key_pem": public_pem(key.public_key),
            "not_before": key.not_before,
            "not_after": key.not_after,
        }
        for key in listed
    ]
    data = canonical_bytes({"schema": KEYRING_SCHEMA, "keys": entries})
    from promoter.store.durable import write_replace

    try:
        write_replace(path, data, mode=0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write the keyring {path}: {exc}") from exc


def load_keyring(credentials_dir: Path) -> Keyring:
    """The active key and the listed keys; creates the key and keyring on first use.

    Never replaces a key file: when the keyring names a key that only
    ``host-signing.key.next`` holds (a rotation stopped before its last rename), that
    key is the active one.
    """
    current = HostKey.load_or_create(credentials_dir)
    path = credentials_dir / KEYRING_FILE
    listed = _read_listed(path)
    if listed is None:
        listed = [ListedKey(current.public_key, current.keyid, None, None)]
        _write_listed(path, listed)
    active = [key for key in listed if key.not_after is None]
    if len(active) != 1:
        raise ConfigError(f"{path} lists {len(active)} active keys; exactly one must be active")
    if active[0].keyid != current.keyid:
        current = _pending_key(credentials_dir, active[0].keyid) or _mismatch(path, current)
    ordered = active + sorted(
        (key for key in listed if key.not_after is not None),
        key=lambda key: (key.not_after or "", key.keyid),
        reverse=True,
    )
    return Keyring(active=current, listed=tuple(ordered))


def _pending_key(credentials_dir: Path, keyid: str) -> HostKey | None:
    path = credentials_dir / NEXT_KEY_FILE
    data = read_key_file(path)
    if data is None:
        return None
    pending = HostKey.from_pem(data, path)
    return pending if pending.keyid == keyid else None


def _mismatch(path: Path, current: HostKey) -> HostKey:
    raise ConfigError(
        f"{path} names another active key than {KEY_FILE} ({current.keyid}); restore the "
        "key file or the keyring from a backup"
    )


def rotate(credentials_dir: Path, now: datetime) -> Keyring:
    """Retire the active key at ``now`` and make a new one active from ``now``."""
    from promoter.store.durable import write_new

    keyring = load_keyring(credentials_dir)
    _finish_pending(credentials_dir, keyring.active.keyid)
    at = rfc3339(now)
    next_path = credentials_dir / NEXT_KEY_FILE
    try:
        write_new(next_path, _fresh_pem(), mode=0o600)
    except OSError as exc:
        raise ConfigError(f"cannot create the new signing key {next_path}: {exc}") from exc
    fresh = HostKey.from_pem(read_key_file(next_path) or b"", next_path)
    retired = [
        ListedKey(key.public_key, key.keyid, key.not_before, key.not_after or at)
        for key in keyring.listed
    ]
    _write_listed(
        credentials_dir / KEYRING_FILE,
        [ListedKey(fresh.public_key, fresh.keyid, at, None), *retired],
    )
    _finish_pending(credentials_dir, fresh.keyid)
    return load_keyring(credentials_dir)


def _finish_pending(credentials_dir: Path, active_keyid: str) -> None:
    """Move ``.next`` over the key file when it is the active key; drop a never-listed one."""
    from promoter.store.durable import fsync_dir, remove_written

    next_path = credentials_dir / NEXT_KEY_FILE
    data = read_key_file(next_path)
    if data is None:
        return
    try:
        if HostKey.from_pem(data, next_path).keyid == active_keyid:
            os.replace(next_path, credentials_dir / KEY_FILE)
        else:  # written by a rotation that stopped before listing it: never signed anything
            remove_written(next_path, data)
        fsync_dir(credentials_dir)
    except OSError as exc:
        raise ConfigError(f"cannot finish the key rotation in {credentials_dir}: {exc}") from exc
