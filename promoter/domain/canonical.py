"""Canonical bytes and hashes (protocol: documents#canonical-json).

Every hashed document is JSON canonicalized with RFC 8785 (JCS) and encoded as UTF-8.
This module is the single place that turns documents into bytes and bytes into
digests and ids; it performs no I/O.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

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


def _plain(value: Any) -> bool:
    """True if ``value`` is built only of exact str, bool, None, ints within +-2^53, lists,
    tuples and dicts whose keys are ASCII str: the documents ``_scan`` passes untouched.

    Leaves are tested inline, so only containers cost a call; False says nothing about
    why (``_scan`` then looks again, for its precise answer or error).
    """
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str or not key.isascii():
                return False
        items: Iterable[Any] = value.values()
    elif kind is list or kind is tuple:
        items = value
    elif kind is int:
        return bool(-MAX_SAFE_INT < value < MAX_SAFE_INT)
    else:
        return kind is str or kind is bool or value is None
    for item in items:
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -MAX_SAFE_INT < item < MAX_SAFE_INT:
                continue
            return False
        if not _plain(item):
            return False
    return True


def _scan(value: Any) -> bool:
    """Validate like ``_check_value`` on the common types; True if every key is ASCII.

    Exact-type dispatch keeps this fast on large documents; anything unusual (subclasses,
    other mappings, floats) falls back to ``_check_value`` for its precise error.
    """
    return _plain(value) or _scan_slowly(value)


def _scan_slowly(value: Any) -> bool:
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
            if not _scan_slowly(item) or not key.isascii():
                ascii_keys = False
        else:
            return ascii_keys
    elif kind is list or kind is tuple:
        ascii_keys = True
        for item in value:
            if not _scan_slowly(item):
                ascii_keys = False
        return ascii_keys
    _check_value(value, "$")
    return False


SLICE = 256  # items of a long list encoded per call


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _long(value: Any) -> bool:
    return type(value) is list and len(value) > SLICE


def _dumps_list(items: list[Any]) -> str:
    """``_dumps(items)``, SLICE items per encoder call."""
    return (
        "["
        + ",".join(
            _dumps(items[start : start + SLICE])[1:-1] for start in range(0, len(items), SLICE)
        )
        + "]"
    )


Writer = Callable[[Any], "str | None"]  # a member's JCS text, or None: not its shape


def _member_text(value: Any, writer: Writer | None) -> str:
    text = None if writer is None else writer(value)
    if text is not None:
        return text
    return _dumps_list(value) if _long(value) else _dumps(value)


def _members(
    document: dict[str, Any], writers: Mapping[str, Writer] | None = None
) -> list[tuple[str, str]]:
    """Each member of ``document`` as ``(key, '"key":value')``, in key order; a member
    with a writer in ``writers`` is written by it unless it answers None."""
    writers = writers or {}
    return [
        (key, f"{_dumps(key)}:{_member_text(value, writers.get(key))}")
        for key, value in sorted(document.items())
    ]


def _encode(document: Any) -> str:
    """``_dumps(document)``, with a long list (the document, or a member of a top-level
    object) encoded in slices.

    One C encoder call on a 10 000-change bundle holds the GIL for tens of milliseconds,
    stalling the event loop; slices let other threads run in between. Same text.
    """
    if _long(document):
        return _dumps_list(document)
    if not isinstance(document, dict) or not any(_long(v) for v in document.values()):
        return _dumps(document)
    return "{" + ",".join(member for _, member in _members(document)) + "}"


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
    import rfc8785  # imported only off the fast path

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


def canonical_with_projection(
    document: Mapping[str, Any],
    identity_fields: Iterable[str],
    *,
    plain: bool = False,
    writers: Mapping[str, Writer] | None = None,
) -> tuple[bytes, bytes]:
    """``canonical_bytes(document)`` and ``canonical_bytes(projection(document, ...))``.

    On the fast path each member is encoded once and both byte strings are joined from
    the same member bytes (UTF-8 is concatenative, and a projection's members keep their
    order); anything else encodes the two documents separately. ``plain``: the caller
    knows the document is built only of what ``_scan`` admits (a strict wire model was
    parsed from it), so it is not walked again; lone surrogates still go to ``rfc8785``.
    ``writers``: per member key, a writer that answers that member's JCS text (exactly
    what the standard library's encoder would) or None for the general encoder.
    """
    if type(document) is dict and (plain or _scan(document)):
        drop = set(identity_fields)
        try:
            members = [(key, text.encode("utf-8")) for key, text in _members(document, writers)]
        except UnicodeEncodeError:
            pass  # lone surrogates: canonical_bytes hands them to rfc8785
        else:
            whole = b"{" + b",".join(data for _, data in members) + b"}"
            kept = b"{" + b",".join(data for key, data in members if key not in drop) + b"}"
            return whole, kept
    return canonical_bytes(document), canonical_bytes(projection(document, identity_fields))


def canonical_sealed(document: Mapping[str, Any], field: str) -> tuple[bytes, str]:
    """``(canonical_bytes(sealed), digest)``, where ``digest`` is
    ``projection_sha256(document, [field])`` and ``sealed`` the document with ``field``
    set to it (a receipt and its ``receipt_sha256``).

    On the fast path the members before ``field`` and those after it are encoded once
    each: the projection's bytes and the sealed document's are joined from them around
    ``field``'s member (key order is code point order for ASCII keys, as ``_scan``
    requires). Anything else encodes the two documents separately.
    """
    head = {key: value for key, value in document.items() if key < field}
    tail = {key: value for key, value in document.items() if key > field}
    if field.isascii() and _scan(head) and _scan(tail):
        try:
            parts = [_encode(part).encode("utf-8")[1:-1] for part in (head, tail)]
        except UnicodeEncodeError:
            pass  # lone surrogates: canonical_bytes hands them to rfc8785
        else:
            digest = sha256_hex(b"{" + b",".join(p for p in parts if p) + b"}")
            member = f"{_dumps(field)}:{_dumps(digest)}".encode()
            whole = b"{" + b",".join(p for p in (parts[0], member, parts[1]) if p) + b"}"
            return whole, digest
    digest = projection_sha256(document, (field,))
    return canonical_bytes({**document, field: digest}), digest


def content_id(prefix: str, sha256: str) -> str:
    """``<prefix>_<first 32 hex of the sha256>``."""
    return f"{prefix}_{sha256[:32]}"


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix and whole seconds."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    from datetime import UTC

    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Parse the exact timestamp form (protocol: documents#timestamps)."""
    from datetime import UTC, datetime

    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    return moment.replace(tzinfo=UTC)


def now_rfc3339() -> str:
    """``rfc3339(utcnow())``: the current second in UTC, read without ``datetime``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def utcnow() -> datetime:
    from datetime import UTC, datetime

    return datetime.now(UTC).replace(microsecond=0)
