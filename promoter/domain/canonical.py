"""Canonical bytes and hashes (SPEC §2).

Every hashed document is JSON canonicalized with RFC 8785 (JCS) and encoded as UTF-8.
This module is the single place that turns documents into bytes and bytes into
digests and ids; it performs no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import rfc8785

MAX_SAFE_INT = 2**53


def _check_value(value: Any, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) >= MAX_SAFE_INT:
            raise ValueError(f"{where}: integer {value} is outside +-2^53")
        return
    if isinstance(value, float):
        raise ValueError(f"{where}: floats are not allowed in canonical documents")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: object keys must be strings")
            _check_value(item, f"{where}.{key}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_value(item, f"{where}[{index}]")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


def _scan(value: Any) -> bool:
    """Validate like ``_check_value`` on the common types; True if every key is ASCII.

    Exact-type dispatch keeps this fast on large documents; anything unusual (subclasses,
    other mappings, floats) falls back to ``_check_value`` for its precise error.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        if -MAX_SAFE_INT < value < MAX_SAFE_INT:
            return True
    elif kind is dict:
        ascii_keys = True
        for key, item in value.items():
            if type(key) is not str:
                break
            if not _scan(item) or not key.isascii():
                ascii_keys = False
        else:
            return ascii_keys
    elif kind is list or kind is tuple:
        ascii_keys = True
        for item in value:
            if not _scan(item):
                ascii_keys = False
        return ascii_keys
    _check_value(value, "$")
    return False


SLICE = 256  # items of a long top-level list encoded per call


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _encode(document: Any) -> str:
    """``_dumps(document)``, with long lists in a top-level object encoded in slices.

    One C encoder call on a 10 000-change bundle holds the GIL for tens of milliseconds,
    stalling the event loop; slices let other threads run in between. Same text.
    """
    if not isinstance(document, dict) or not any(
        type(v) is list and len(v) > SLICE for v in document.values()
    ):
        return _dumps(document)
    parts = []
    for key, value in sorted(document.items()):
        if type(value) is list and len(value) > SLICE:
            items = ",".join(
                _dumps(value[start : start + SLICE])[1:-1] for start in range(0, len(value), SLICE)
            )
            parts.append(f"{_dumps(key)}:[{items}]")
        else:
            parts.append(f"{_dumps(key)}:{_dumps(value)}")
    return "{" + ",".join(parts) + "}"


def canonical_bytes(document: Any) -> bytes:
    """RFC 8785 bytes of a JSON document made of str, int, bool, None, list and dict.

    Documents whose object keys are all ASCII (every promoter document) take a fast path:
    for them, sorting keys by code point equals JCS's UTF-16 order, and the standard
    library's escaping (short escapes for b, t, n, f and r; lowercase u00xx for other
    controls, everything else literal) is JCS's. A property test holds the two equal;
    anything else goes through ``rfc8785``.
    """
    if _scan(document):
        try:
            return _encode(document).encode("utf-8")
        except UnicodeEncodeError:
            pass  # lone surrogates: let rfc8785 refuse them
    return bytes(rfc8785.dumps(document))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def projection(document: Mapping[str, Any], identity_fields: Iterable[str]) -> dict[str, Any]:
    """The document without its own identity fields."""
    drop = set(identity_fields)
    return {key: value for key, value in document.items() if key not in drop}


def projection_sha256(document: Mapping[str, Any], identity_fields: Iterable[str]) -> str:
    """``sha256(JCS(projection))``: the hash that a document's identity fields carry."""
    return sha256_hex(canonical_bytes(projection(document, identity_fields)))


def content_id(prefix: str, sha256: str) -> str:
    """``<prefix>_<first 32 hex of the sha256>``."""
    return f"{prefix}_{sha256[:32]}"


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix and whole seconds."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Parse the exact timestamp form of SPEC §2."""
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    return moment.replace(tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
