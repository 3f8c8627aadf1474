"""What a webhook delivery is, apart from how it is sent: its id and its signatures.

``delivery_id`` names one delivery (the same on every retry: receivers deduplicate by
it). ``standard_signature`` is the Standard Webhooks ``webhook-signature``
(``v1,<base64 HMAC-SHA256 over <id>.<ts>.<body>>``), ``signature`` the older
``Promoter-Signature`` (``t=<ts>,v1=<hex HMAC-SHA256 over <ts>.<body>>``); the HMAC key is
the subscriber's secret, as UTF-8 bytes. ``verify`` is the receiver's check of
``Promoter-Signature`` (``docs/webhooks.md``); it answers False, never raises, on
anything malformed. Pure functions: no I/O. Deliberately not here: queueing, sending and
retrying over HTTP (``promoter.adapters.webhooks``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

STAMP = re.compile(r"[0-9]{1,15}")
HEX_MAC = re.compile(r"[0-9a-f]{64}")


def _mac(secret: str, message: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8", "surrogatepass"), message, hashlib.sha256).digest()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``Promoter-Signature``: ``t=<ts>,v1=<hex HMAC-SHA256 over <ts>.<body>>``."""
    return f"t={timestamp},v1={_mac(secret, f'{timestamp}.'.encode() + body).hex()}"


def standard_signature(secret: str, ident: str, timestamp: int, body: bytes) -> str:
    """``webhook-signature`` of the Standard Webhooks convention (key: the secret's bytes)."""
    mac = _mac(secret, f"{ident}.{timestamp}.".encode() + body)
    return "v1," + base64.b64encode(mac).decode("ascii")


def verify(secret: str, header: str, body: bytes, now: float, tolerance: float = 300) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` at a time within ``tolerance``.

    Anything malformed (no or a non-ASCII-digit ``t``, a ``v1`` that is not 64 lowercase
    hex digits, a header that is not text) answers False; this never raises.
    """
    if not isinstance(header, str) or not isinstance(body, bytes | bytearray):
        return False
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    stamp, mac = parts.get("t", ""), parts.get("v1", "")
    if STAMP.fullmatch(stamp) is None or HEX_MAC.fullmatch(mac) is None:
        return False
    if not abs(now - int(stamp)) <= tolerance:  # also False for a NaN ``now``
        return False
    expected = _mac(secret, f"{stamp}.".encode() + bytes(body))
    return hmac.compare_digest(expected, bytes.fromhex(mac))


def delivery_id(subscriber: str, position: int) -> str:
    digest = hashlib.sha256(f"{subscriber}\0{position}".encode()).hexdigest()
    return "whd_" + digest[:32]
