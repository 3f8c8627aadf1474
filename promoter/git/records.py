"""Typed records of git's NUL-terminated output, and their parsers.

This module owns the shape of the facts promoter reads out of git (index entries, tree
entries, raw diff entries), the parsing of ``-z`` output into them, and the checks on
object ids and pathspec paths that promoter hands to git.

It is pure: no subprocesses and no file system. Output that does not have the exact
expected shape raises ``GitError`` rather than being guessed at. Paths are decoded with
``os.fsdecode`` so that bytes that are not UTF-8 still round-trip; deciding whether such
a path is acceptable is the path rules' job, not this module's.
"""

from __future__ import annotations

import os
import re
from typing import Literal, cast

from promoter.domain.record_type import record
from promoter.errors import GitError

__all__ = [
    "EMPTY_BLOB",
    "EMPTY_TREE",
    "DiffEntry",
    "IndexEntry",
    "TreeEntry",
    "check_pathspec_paths",
    "decode_path",
    "parse_diff_raw",
    "parse_ls_files_stage",
    "parse_ls_tree",
    "require_oid",
    "unopened_directories",
]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
_ZERO_OID = "0" * 40
_ABSENT_MODE = "000000"

_OID = re.compile(r"[0-9a-f]{40}")
_NOT_NORMALIZED = re.compile(r"(?:\A|/)\.{0,2}(?:/|\Z)")  # an empty, "." or ".." component
_STAGE_LINE = re.compile(rb"([0-7]{6}) ([0-9a-f]{40}) ([0-3])\t(.+)", re.DOTALL)
_TREE_LINE = re.compile(rb"([0-7]{6}) (blob|tree|commit) ([0-9a-f]{40})\t(.+)", re.DOTALL)
_RAW_HEAD = re.compile(rb":([0-7]{6}) ([0-7]{6}) ([0-9a-f]{40}) ([0-9a-f]{40}) ([ADMT])")
_DEBUG_KEYS = (b"  ctime: ", b"  mtime: ", b"  dev: ", b"  uid: ", b"  size: ")
_DEBUG_FLAGS = re.compile(rb"  size: [0-9]+\tflags: ([0-9a-f]+)")
_CE_INTENT_TO_ADD = 1 << 29  # git's in-memory cache-entry flag, printed by ls-files --debug


@record(frozen=True)
class IndexEntry:
    """One index entry for a path: git mode, blob id and merge stage (0, or 1-3).

    ``intent_to_add`` marks an entry made by ``git add -N``; git lists it with the empty
    blob's id, so without the flag it would look like a staged empty file.
    """

    mode: str
    oid: str
    stage: int
    intent_to_add: bool = False


@record(frozen=True)
class TreeEntry:
    """One entry of a git tree: mode, object id and object type (blob, tree, commit)."""

    mode: str
    oid: str
    type: str


DiffStatus = Literal["A", "D", "M", "T"]


@record(frozen=True)
class DiffEntry:
    """One changed path between two trees; the absent side of an A or D is ``None``.

    ``status`` is ``A`` (created), ``D`` (deleted), ``M`` (content or mode changed) or
    ``T`` (type changed, e.g. a file became a symlink).
    """

    status: DiffStatus
    path: str
    old_mode: str | None
    new_mode: str | None
    old_oid: str | None
    new_oid: str | None


def require_oid(value: str, what: str = "object id") -> str:
    """Return ``value`` if it is a full lowercase SHA-1 object id; else ``ValueError``.

    Only full ids reach git, so nothing promoter passes can be read as an option, a
    revision expression or a second ``cat-file --batch`` request.
    """
    if not isinstance(value, str) or not _OID.fullmatch(value):
        raise ValueError(f"{what} must be 40 lowercase hex digits, got {value!r}")
    return value


def check_pathspec_paths(paths: list[str]) -> None:
    """``ValueError`` unless every path is a normalized relative path git can take.

    An empty pathspec matches everything and ``./``, ``..``, a leading or trailing ``/``
    would be rewritten by git, so none of them may pass as an exact path.
    """
    for path in paths:
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"not a usable path: {path!r}")
        if _NOT_NORMALIZED.search(path) is not None:
            raise ValueError(f"path is not a normalized relative path: {path!r}")


def decode_path(raw: bytes) -> str:
    """A path as git printed it, decoded the way the operating system decodes names."""
    return os.fsdecode(raw)


# git's warning for a directory it could not read while it listed untracked files; it
# goes on without it. git cuts a warning at 4095 bytes: a cut one has lost its reason.
_UNOPENED = b"warning: could not open directory '"
_WARNING_CUT = 4095


def unopened_directories(stderr: bytes) -> dict[str, str | None]:
    """The directories git said it could not open (``-z`` listings go on without them),
    each with git's reason, or ``None`` where git cut its line (a path of thousands of
    bytes: the name is a prefix of the directory's, the reason lost)."""
    found: dict[str, str | None] = {}
    for line in stderr.split(b"\n"):
        if not line.startswith(_UNOPENED):
            continue
        rest = line[len(_UNOPENED) :]
        path, quote, reason = rest.rpartition(b"': ")
        if quote and len(line) < _WARNING_CUT:
            found[decode_path(path.rstrip(b"/"))] = reason.decode("utf-8", "replace")
        else:
            found[decode_path(rest.rstrip(b"/"))] = None
    return found


def parse_ls_files_stage(data: bytes, *, debug: bool) -> list[tuple[str, IndexEntry]]:
    """Parse ``git ls-files -s -z`` (with ``--debug`` when ``debug``) into entries."""
    entries: list[tuple[str, IndexEntry]] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\0", pos)
        if end < 0:
            raise _unexpected("ls-files", "an entry is not NUL-terminated")
        match = _STAGE_LINE.fullmatch(data, pos, end)
        if match is None:
            raise _unexpected("ls-files", "an entry does not read 'mode oid stage<TAB>path'")
        pos = end + 1
        intent_to_add = False
        if debug:
            flags, pos = _parse_debug_block(data, pos)
            intent_to_add = bool(flags & _CE_INTENT_TO_ADD)
        mode, oid, stage, path = match.groups()
        entries.append(
            (
                decode_path(path),
                IndexEntry(mode.decode(), oid.decode(), int(stage), intent_to_add),
            )
        )
    return entries


def _parse_debug_block(data: bytes, pos: int) -> tuple[int, int]:
    """Read the five ``--debug`` lines after an entry; return its flags and the new offset."""
    line = b""
    for key in _DEBUG_KEYS:
        end = data.find(b"\n", pos)
        if end < 0:
            raise _unexpected("ls-files", "a --debug block is truncated")
        line = data[pos:end]
        if not line.startswith(key):
            raise _unexpected("ls-files", f"a --debug block lacks {key.strip()!r}")
        pos = end + 1
    match = _DEBUG_FLAGS.fullmatch(line)
    if match is None:
        raise _unexpected("ls-files", "a --debug block has no flags")
    return int(match.group(1), 16), pos


def parse_ls_tree(data: bytes) -> list[tuple[str, TreeEntry]]:
    """Parse ``git ls-tree -z`` (default format) into ``(path, TreeEntry)`` pairs."""
    entries: list[tuple[str, TreeEntry]] = []
    for line in _records(data, "ls-tree"):
        match = _TREE_LINE.fullmatch(line)
        if match is None:
            raise _unexpected("ls-tree", "an entry does not read 'mode type oid<TAB>path'")
        mode, kind, oid, path = match.groups()
        entries.append((decode_path(path), TreeEntry(mode.decode(), oid.decode(), kind.decode())))
    return entries


def parse_diff_raw(data: bytes) -> list[DiffEntry]:
    """Parse ``git diff-tree -r -z --no-renames --no-abbrev`` raw output."""
    records = _records(data, "diff-tree")
    if len(records) % 2:
        raise _unexpected("diff-tree", "a change has no path")
    entries: list[DiffEntry] = []
    for head, path in zip(records[0::2], records[1::2], strict=True):
        match = _RAW_HEAD.fullmatch(head)
        if match is None:
            raise _unexpected("diff-tree", "a change does not have raw format")
        old_mode, new_mode, old_oid, new_oid, status = (g.decode() for g in match.groups())
        old_absent = old_mode == _ABSENT_MODE
        new_absent = new_mode == _ABSENT_MODE
        if (status == "A") != old_absent or (status == "D") != new_absent:
            raise _unexpected("diff-tree", f"status {status} disagrees with the modes")
        entries.append(
            DiffEntry(
                status=cast(DiffStatus, status),  # _RAW_HEAD admits only these
                path=decode_path(path),
                old_mode=None if old_absent else old_mode,
                new_mode=None if new_absent else new_mode,
                old_oid=None if old_absent or old_oid == _ZERO_OID else old_oid,
                new_oid=None if new_absent or new_oid == _ZERO_OID else new_oid,
            )
        )
    return entries


def _records(data: bytes, command: str) -> list[bytes]:
    """Split NUL-terminated output into records; the last one must be terminated too."""
    if not data:
        return []
    if not data.endswith(b"\0"):
        raise _unexpected(command, "the output is not NUL-terminated")
    records = data[:-1].split(b"\0")
    if any(not record for record in records):
        raise _unexpected(command, "the output holds an empty record")
    return records


def _unexpected(command: str, why: str) -> GitError:
    return GitError(f"unexpected output from git {command}: {why}", command=command)
