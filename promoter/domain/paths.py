"""Lexical path rules for bundle targets (SPEC §3.2).

Pure string checks, no filesystem access: a path that passes here is still resolved on
disk only through descriptor chains (``promoter.fs``). Violations raise ``PathInvalid``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from promoter.errors import PathInvalid

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
# SPEC §10.2: names promoter gives its own temp and kept files; a bundle may not use them.
RESERVED_PREFIXES = (".promoter-tmp-", ".promoter-kept-")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _has_control(text: str) -> bool:
    """A C0 control, DEL or a C1 control anywhere in ``text``."""
    return _CONTROL.search(text) is not None


def check_path(path: str) -> str:
    """Return ``path`` unchanged if it obeys every rule of SPEC §3.2, else raise."""
    if not isinstance(path, str) or path == "":
        raise PathInvalid("path must be a non-empty string", path=path)
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PathInvalid("path is not valid UTF-8", path=repr(path)) from exc
    if "\x00" in path:
        raise PathInvalid("path contains NUL", path=repr(path))
    if _has_control(path):
        raise PathInvalid("path contains a control character", path=repr(path))
    if "\\" in path:
        raise PathInvalid("path contains a backslash", path=path)
    if path.startswith("/"):
        raise PathInvalid("path must be relative", path=path)
    if unicodedata.normalize("NFC", path) != path:
        raise PathInvalid("path is not NFC-normalized", path=path)
    if len(encoded) > MAX_PATH_BYTES:
        raise PathInvalid(f"path is longer than {MAX_PATH_BYTES} bytes", path=path)
    for component in path.split("/"):
        if component in ("", ".", ".."):
            raise PathInvalid("path has an empty, '.' or '..' component", path=path)
        if len(component.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise PathInvalid(
                f"a path component is longer than {MAX_COMPONENT_BYTES} bytes", path=path
            )
        if component.casefold() == ".git":
            raise PathInvalid("path has a '.git' component", path=path)
        if component.casefold().startswith(RESERVED_PREFIXES):
            raise PathInvalid(
                "a path component uses a name reserved for promoter's own files", path=path
            )
    return path


def check_path_set(paths: Iterable[str]) -> None:
    """Paths unique (also under casefold) and none a prefix directory of another."""
    seen: dict[str, str] = {}
    for path in paths:
        folded = path.casefold()
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
    """Bundles list changes sorted by the UTF-8 bytes of ``path``."""
    return path.encode("utf-8")


def wire_path(path: str) -> str:
    """``path`` as UTF-8 text for journals, events and reports.

    A name read from disk that is not valid UTF-8 (decoded with ``surrogateescape``) is
    shown with each such byte as ``\\xNN``; a valid path is returned unchanged.
    """
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


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
    """The one temp name step ``seq`` of an attempt may use beside its target (SPEC §10.1).

    A pure function of journaled facts, so the name is journaled before the file exists
    and recovery finds exactly the names promoter may have created, never by prefix.
    """
    return f"{RESERVED_PREFIXES[0]}{operation_id}-{attempt}-{seq}"
