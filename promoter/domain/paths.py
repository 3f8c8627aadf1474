"""Lexical path rules for bundle targets (protocol: documents#path-rules, documents#byte-paths).

A bundle's path is a wire form (``wirepath``) naming a byte string; the rules apply to
those bytes, and sorting, uniqueness and case-folding compare them. ``disk_path`` and
``wire_path`` convert between the wire form and the disk form the file system and git
layers take. Pure checks, no filesystem access: a path that passes here is still resolved
on disk only through descriptor chains (``promoter.fs``). Violations raise ``PathInvalid``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from promoter.domain import wirepath
from promoter.errors import PathInvalid

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
# protocol: documents#reserved-names: names promoter gives its own temp and kept files; a bundle may
# not use them.
RESERVED_PREFIXES = (".promoter-tmp-", ".promoter-kept-")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control(text: str) -> bool:
    """A C0 control, DEL or a C1 control anywhere in ``text``."""
    return _CONTROL.search(text) is not None


def _decoded(path: str) -> bytes:
    if not isinstance(path, str) or path == "":
        raise PathInvalid("path must be a non-empty string", path=path)
    return wirepath.decode(path)


def check_path(path: str) -> str:
    """Return ``path`` unchanged if it obeys every path rule, else raise.

    protocol: documents#path-rules, documents#byte-paths.

    ``path`` is a wire form (``wirepath``): it must be canonical; the byte rules (NUL,
    ``/``, ``.``, ``..``, ``.git`` under case-folding, reserved prefixes, lengths) apply
    to the bytes it names; control characters are refused wherever they appear as text;
    the NFC rule applies to each component that is valid UTF-8.
    """
    raw = _decoded(path)
    if b"\x00" in raw:
        raise PathInvalid("path contains NUL", path=repr(path))
    if _has_control(path):
        raise PathInvalid("path contains a control character", path=repr(path))
    if raw.startswith(b"/"):
        raise PathInvalid("path must be relative", path=path)
    if len(raw) > MAX_PATH_BYTES:
        raise PathInvalid(f"path is longer than {MAX_PATH_BYTES} bytes", path=path)
    for component in raw.split(b"/"):
        if component in (b"", b".", b".."):
            raise PathInvalid("path has an empty, '.' or '..' component", path=path)
        if len(component) > MAX_COMPONENT_BYTES:
            raise PathInvalid(
                f"a path component is longer than {MAX_COMPONENT_BYTES} bytes", path=path
            )
        name = component.decode("utf-8", "surrogateescape")
        if name.casefold() == ".git":
            raise PathInvalid("path has a '.git' component", path=path)
        if name.casefold().startswith(RESERVED_PREFIXES):
            raise PathInvalid(
                "a path component uses a name reserved for promoter's own files", path=path
            )
        if _is_text(component) and unicodedata.normalize("NFC", name) != name:
            raise PathInvalid("path is not NFC-normalized", path=path)
    return path


def _is_text(component: bytes) -> bool:
    try:
        component.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _folded(path: str) -> str:
    """What uniqueness compares: the decoded bytes, case-folded (surrogateescape text)."""
    try:
        return wirepath.to_disk(path).casefold()
    except PathInvalid:  # refused on its own by ``check_path``; compared as written
        return path.casefold()


def check_path_set(paths: Iterable[str]) -> None:
    """Paths unique (also under casefold) and none a prefix directory of another.

    Compared on the bytes the wire forms name (protocol: documents#byte-paths), case-folded as text
    with each byte that is not UTF-8 standing for itself.
    """
    seen: dict[str, str] = {}
    for path in paths:
        folded = _folded(path)
        if folded in seen:
            raise PathInvalid(
                "two paths collide (identical or equal under case-folding)",
                path=path,
                other=seen[folded],
            )
        seen[folded] = path
    for folded, path in seen.items():
        parts = folded.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if prefix in seen:
                raise PathInvalid(
                    "a path is a prefix directory of another path",
                    path=path,
                    other=seen[prefix],
                )


def sort_key(path: str) -> bytes:
    """Bundles list changes sorted by the bytes their wire paths name
    (protocol: documents#byte-paths).

    For a valid UTF-8 path without a backslash that is its UTF-8 encoding. A wire form
    that is not canonical (refused by ``check_path``) sorts by its own text's bytes.
    """
    try:
        return wirepath.decode(path)
    except PathInvalid:
        return path.encode("utf-8", "surrogatepass")


def wire_path(path: str) -> str:
    """The wire form (protocol: documents#byte-paths) of ``path`` as named on disk.

    ``path`` is the disk form: a name read from disk or from git that is not valid UTF-8
    holds its bytes as surrogates (``surrogateescape``); each such byte is shown as
    ``\\xNN`` and a backslash as ``\\\\``. A valid path without a backslash is returned
    unchanged.
    """
    return wirepath.from_disk(path)


def disk_path(path: str) -> str:
    """The disk form of the wire path ``path`` (``PathInvalid`` if it is not canonical)."""
    return wirepath.to_disk(path)


def wire_all(value: Any) -> Any:
    """``value`` (JSON-like) with every string passed through ``wire_path``."""
    if isinstance(value, str):
        return wire_path(value)
    if isinstance(value, dict):
        return {wire_path(k) if isinstance(k, str) else k: wire_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_all(v) for v in value]
    return value


def temp_name(operation_id: str, attempt: int, seq: int) -> str:
    """The one temp name step ``seq`` of an attempt may use beside its target
    (protocol: recovery#removal-provably-ours).

    A pure function of journaled facts, so the name is journaled before the file exists
    and recovery finds exactly the names promoter may have created, never by prefix.
    """
    return f"{RESERVED_PREFIXES[0]}{operation_id}-{attempt}-{seq}"
