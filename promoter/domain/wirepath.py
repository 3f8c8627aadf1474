"""The wire form of a path: any byte string as canonical text (protocol: documents#byte-paths).

A path is a byte string. Its wire form (the ``path`` of a bundle, a receipt, a journal
row or an event) is text: bytes that form valid UTF-8 appear as themselves, every other
byte appears as ``\\xNN`` (two lowercase hex digits) and a backslash byte as ``\\\\``.
No other escape exists. ``encode`` gives the one canonical spelling of a byte string;
``decode`` accepts exactly the canonical spellings and refuses everything else
(``PathInvalid``): an escape of bytes that would be valid UTF-8 in context (``\\xc3\\xa9``
for ``é``), an upper-case or short hex escape, a lone backslash, a surrogate code point.
So two spellings of the same bytes cannot both be accepted, and ``encode(decode(s)) == s``.

A name that is valid UTF-8 and holds no backslash is its own wire form, so documents of
such paths hash exactly as before the wire form existed.

The *disk form* (``to_disk``/``from_disk``) is how the rest of promoter names a path in
memory when it reaches the file system or git: a ``str`` whose undecodable bytes are
lone surrogates (PEP 383, ``surrogateescape``), what ``os.fsencode`` turns back into the
exact bytes on a UTF-8 file system encoding (every Linux build of Python 3.7+).

Pure: no I/O. It deliberately does not apply the path rules (``paths.py`` does).
"""

from __future__ import annotations

from promoter.errors import PathInvalid

__all__ = ["decode", "encode", "from_disk", "to_disk"]

_HEX = frozenset("0123456789abcdef")
_LOW, _HIGH = 0xDC80, 0xDCFF  # surrogateescape's stand-ins for the bytes 0x80..0xff


def _escape_text(text: str) -> str:
    """``text`` (decoded with surrogateescape) in wire form."""
    if "\\" not in text and text.isascii():
        return text
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if _LOW <= code <= _HIGH:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


def encode(raw: bytes) -> str:
    """The canonical wire form of the byte string ``raw``."""
    return _escape_text(raw.decode("utf-8", "surrogateescape"))


def decode(wire: str) -> bytes:
    """The bytes a canonical wire form names; ``PathInvalid`` for any other text."""
    if "\\" not in wire:
        try:
            return wire.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PathInvalid("path is not valid Unicode text", path=repr(wire)) from exc
    out = bytearray()
    index, end = 0, len(wire)
    while index < end:
        slash = wire.find("\\", index)
        stop = end if slash < 0 else slash
        try:
            out += wire[index:stop].encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PathInvalid("path is not valid Unicode text", path=repr(wire)) from exc
        if slash < 0:
            break
        following = wire[slash + 1 : slash + 2]
        if following == "\\":
            out.append(0x5C)
            index = slash + 2
        elif (
            following == "x" and len(wire) >= slash + 4 and set(wire[slash + 2 : slash + 4]) <= _HEX
        ):
            out.append(int(wire[slash + 2 : slash + 4], 16))
            index = slash + 4
        else:
            raise PathInvalid(
                "path has an escape other than '\\\\' or '\\xNN' (lowercase hex)",
                path=wire,
            )
    raw = bytes(out)
    if encode(raw) != wire:
        raise PathInvalid(
            "path escapes bytes that form valid UTF-8 (not the canonical wire form)",
            path=wire,
            canonical=encode(raw),
        )
    return raw


def to_disk(wire: str) -> str:
    """The disk form of a canonical wire path (``PathInvalid`` for any other text)."""
    if "\\" not in wire and wire.isascii():
        return wire
    return decode(wire).decode("utf-8", "surrogateescape")


def from_disk(name: str) -> str:
    """The wire form of a disk-form name (a str that may hold surrogateescape bytes)."""
    if "\\" not in name and name.isascii():
        return name
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file name decodes to: shown by its bytes
        raw = name.encode("utf-8", "surrogatepass")
    return encode(raw)
