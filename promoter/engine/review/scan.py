"""What a reviewer must be shown about one file: a streaming scan, flags, visible text.

``scan_blob`` reads a stored blob once, in ``SCAN_CHUNK`` pieces, and answers its size,
sha256 (checked against the name it is stored under), line count, longest line, whether
git would call it binary (a NUL byte in its first ``BINARY_PROBE`` bytes, as git's
``buffer_is_binary``), whether it is valid UTF-8, and which kinds of characters that hide
code it holds (bidirectional controls, invisible characters, control characters). Memory
stays at a few chunks whatever the blob's size. ASCII chunks are checked in one pass in C;
a non-ASCII chunk is searched only when it holds a byte that can begin a hidden character
(or continues one begun in the last chunk). With ``exact=False`` only lines over
``LONG_LINE`` bytes are measured, by probes ``LONG_LINE + 1`` bytes apart (no object per
line). ``count_bytes`` answers only the counts of bytes in memory whose digest the caller
checked (a diff's old side, whose flags are never shown).

``visible`` (``promoter.domain.hidden``'s, with the character classes) renders one line
of a diff so that nothing in it is hidden: bytes that are not UTF-8 become ``\\xNN``, and
every character of BIDI, INVISIBLE and CONTROL (and a carriage return not ending the
line) becomes ``<U+XXXX>``. Lines are decoded with ``surrogateescape`` first (lossless),
so no byte is dropped or replaced.

``path_flags`` and ``mode_flags`` name what a path or mode change means for what runs:
CI configuration, files run by hooks or on entering the directory, an executable bit
turned on, a symbolic link.

Deliberately not here: diffing (``promoter.engine.review.diff``) or any rendering beyond
one line.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from promoter.domain.answers import DiffFlag
from promoter.domain.hidden import BIDI, CONTROL, INVISIBLE, visible
from promoter.errors import BlobHashMismatch, BlobMissing

__all__ = [
    "BINARY_PROBE",
    "LONG_LINE",
    "Scan",
    "count_bytes",
    "mode_flags",
    "path_flags",
    "scan_blob",
    "scan_bytes",
    "visible",
]

SCAN_CHUNK = 256 * 1024
BINARY_PROBE = 8000  # git's FIRST_FEW_BYTES: a NUL byte in these makes a file binary
LONG_LINE = 1000  # bytes: a longer line is flagged (code can hide past the screen's edge)
SYMLINK_TARGET_MAX = 4096

_BIDI = re.compile(f"[{BIDI}]")
_INVISIBLE = re.compile(f"[{INVISIBLE}]")
_LONE_CR = re.compile("\r(?!\n)")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_SUSPECT = re.compile(f"[{BIDI}{INVISIBLE}{CONTROL}\udc80-\udcff]")
_TEXT_FLAGS: frozenset[DiffFlag] = frozenset(
    {"bidi_control", "invisible_character", "control_character", "not_utf8"}
)
# Bytes that are shown as they are in ASCII text: tab, line feed, carriage return, printable.
_ASCII_SHOWN = bytes([9, 10, 13, *range(32, 127)])
# Every byte but those that can begin a character of BIDI, INVISIBLE or CONTROL in UTF-8:
# a chunk without any is searched no further (stray bytes are found by encoding back).
_SUSPECT_BYTES = {*range(0, 9), 11, 12, *range(14, 32), 127, 0xC2, 0xCD, 0xD8, 0xE1, 0xE2}
_SUSPECT_BYTES |= {0xE3, 0xEF, 0xF3}
_NOT_SUSPECT = bytes(b for b in range(256) if b not in _SUSPECT_BYTES)

# Paths whose content runs without the person asking: CI configuration runs on a push,
# hooks on a git action, ``.envrc`` on entering the directory, editor tasks on opening it.
CI_DIRS = (".github/", ".gitlab/", ".circleci/", ".buildkite/", ".woodpecker/", ".forgejo/")
CI_FILES = frozenset(
    {
        ".gitlab-ci.yml",
        ".travis.yml",
        "azure-pipelines.yml",
        "Jenkinsfile",
        "bitbucket-pipelines.yml",
        ".drone.yml",
        ".woodpecker.yml",
    }
)
HOOK_DIRS = frozenset({".githooks", ".husky", "hooks", ".git-hooks", ".devcontainer"})
HOOK_FILES = frozenset(
    {
        ".pre-commit-config.yaml",
        ".pre-commit-hooks.yaml",
        ".envrc",
        ".gitattributes",
        ".gitmodules",
        "lefthook.yml",
        ".lefthook.yml",
        ".vscode/tasks.json",
        ".vscode/settings.json",
    }
)


@dataclass
class Scan:
    """One side of a change as read: counts and flags, never its whole content."""

    size: int = 0
    sha256: str = ""
    lines: int = 0
    longest_line: int = 0
    binary: bool = False
    flags: set[DiffFlag] = field(default_factory=set)
    longest_exact: bool = True  # false: ``longest_line`` is exact only over LONG_LINE
    head: bytes = b""  # the first bytes (a symlink's target text)


def _kind(char: str) -> DiffFlag:
    if _BIDI.match(char):
        return "bidi_control"
    if _INVISIBLE.match(char):
        return "invisible_character"
    if _NOT_UTF8.match(char):
        return "not_utf8"
    return "control_character"


class _Scanner:
    """Feeds of chunks in order; ``exact``: measure the longest line even when short (cost:
    an object per line), else only lines over ``LONG_LINE`` are measured."""

    def __init__(self, exact: bool, hashed: bool = True) -> None:
        self.scan = Scan(longest_exact=exact)
        self._hash = hashlib.sha256() if hashed else None
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._run = 0  # bytes since the last line feed
        self._started = False
        self._pending_cr = False

    def feed(self, chunk: bytes, final: bool = False) -> None:
        scan = self.scan
        if self._hash is not None:
            self._hash.update(chunk)
        if scan.size < BINARY_PROBE and b"\x00" in chunk[: BINARY_PROBE - scan.size]:
            scan.binary = True
        if len(scan.head) < SYMLINK_TARGET_MAX:
            scan.head += chunk[: SYMLINK_TARGET_MAX - len(scan.head)]
        scan.size += len(chunk)
        scan.lines += chunk.count(b"\n")
        self._lines(chunk)
        carried = bool(self._decoder.getstate()[0])  # a character begun in the last chunk
        text = self._decoder.decode(chunk, final)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._pending_cr:
            text = "\r" + text
            self._pending_cr = False
        if text.endswith("\r") and not final:
            text = text[:-1]
            self._pending_cr = True
        self._characters(chunk, text, carried)

    def _characters(self, chunk: bytes, text: str, carried: bool) -> None:
        flags = self.scan.flags
        if "\r" in text and _LONE_CR.search(text):
            flags.add("control_character")
        if text.isascii():  # the common case: one pass in C
            if text.encode("ascii").translate(None, _ASCII_SHOWN):
                flags.add("control_character")
            return
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            flags.add("not_utf8")
        if not carried and not chunk.translate(None, _NOT_SUSPECT):
            return  # no byte that can start a hidden character
        for found in _SUSPECT.finditer(text):
            flags.add(_kind(found.group()))
            if len(flags & _TEXT_FLAGS) == len(_TEXT_FLAGS):
                return

    def _lines(self, chunk: bytes) -> None:
        scan = self.scan
        first = chunk.find(b"\n")
        if first < 0:
            self._run += len(chunk)
            scan.longest_line = max(scan.longest_line, self._run)
            return
        scan.longest_line = max(scan.longest_line, self._run + first)
        last = chunk.rfind(b"\n")
        if scan.longest_exact:
            if last > first:
                inner = chunk[first + 1 : last].split(b"\n")
                scan.longest_line = max(scan.longest_line, max(map(len, inner)))
        else:
            # a line of more than LONG_LINE bytes holds a probe: probes are that far apart
            stride = LONG_LINE + 1
            pos = first + stride
            while pos < last:
                if chunk[pos] == 0x0A:
                    pos += stride
                    continue
                start = chunk.rfind(b"\n", 0, pos) + 1
                end = chunk.find(b"\n", pos)
                scan.longest_line = max(scan.longest_line, end - start)
                pos = end + stride
        self._run = len(chunk) - last - 1
        scan.longest_line = max(scan.longest_line, self._run)

    def finish(self) -> Scan:
        self.feed(b"", final=True)
        scan = self.scan
        if scan.size and self._run:
            scan.lines += 1  # a last line without a line feed
        scan.sha256 = self._hash.hexdigest() if self._hash is not None else ""
        if scan.longest_line > LONG_LINE:
            scan.flags.add("long_line")
        return scan


def scan_bytes(data: bytes, sha256: str | None = None) -> Scan:
    """The scan of bytes already in memory (a small blob); ``sha256``: their digest,
    already checked by the caller (not computed again)."""
    scanner = _Scanner(exact=True, hashed=sha256 is None)
    scanner.feed(data)
    scan = scanner.finish()
    if sha256 is not None:
        scan.sha256 = sha256
    return scan


def count_bytes(data: bytes, sha256: str) -> Scan:
    """What a diff needs of a side whose flags and longest line are not shown (an old
    side): ``size``, ``lines``, ``binary`` and ``head`` exactly as ``scan_bytes`` counts
    them, ``sha256`` as given (checked by the caller); no flags, ``longest_line`` 0."""
    scan = Scan(size=len(data), sha256=sha256, longest_exact=False)
    scan.lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    scan.binary = b"\x00" in data[:BINARY_PROBE]
    scan.head = data[:SYMLINK_TARGET_MAX]
    return scan


def _chunks(path: str) -> Iterator[bytes]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        while chunk := os.read(fd, SCAN_CHUNK):
            yield chunk
    finally:
        os.close(fd)


def scan_blob(path: str, sha256: str, *, exact: bool = True) -> Scan:
    """Scan the stored blob at ``path``, streaming; its bytes must hash to ``sha256``.

    ``exact=False`` (a side too large to diff): the longest line is measured only when it
    is over ``LONG_LINE`` bytes (``Scan.longest_exact`` is then false).
    """
    scanner = _Scanner(exact)
    try:
        for chunk in _chunks(path):
            scanner.feed(chunk)
    except FileNotFoundError as exc:
        raise BlobMissing(f"blob {sha256} is not in the blob store", sha256=sha256) from exc
    scan = scanner.finish()
    if scan.sha256 != sha256:
        raise BlobHashMismatch(f"stored blob {sha256} no longer hashes correctly", sha256=sha256)
    return scan


def path_flags(path: str) -> list[DiffFlag]:
    """``ci_config`` for CI configuration, ``hook_path`` for what hooks or tools run."""
    flags: list[DiffFlag] = []
    name = path.rsplit("/", 1)[-1]
    if path.startswith(CI_DIRS) or name in CI_FILES:
        flags.append("ci_config")
    top = path.split("/", 1)[0] if "/" in path else ""
    if path in HOOK_FILES or name in HOOK_FILES or top in HOOK_DIRS:
        flags.append("hook_path")
    return flags


def mode_flags(old_mode: str | None, new_mode: str | None) -> list[DiffFlag]:
    """``executable`` when the executable bit is turned on, ``symlink`` for a link,
    ``mode_change`` for any other change of an existing file's mode (the bit turned off,
    a link made a file)."""
    flags: list[DiffFlag] = []
    if new_mode == "100755" and old_mode != "100755":
        flags.append("executable")
    if new_mode == "120000":
        flags.append("symlink")
    if not flags and old_mode and new_mode and old_mode != new_mode:
        flags.append("mode_change")
    return flags
