"""Whether a worktree's own index can serve the builder as a stat cache, and its copy.

This module owns the preconditions of ``seeded.SeededShadow``: ``copy_index`` copies
``.git/index`` in the kernel (keeping its modification time, which git's racy-entry rule
compares entries against) and maps the copy read-only, so the bytes walked are the bytes
git reads and none is copied through this process; ``plain_index`` reads its entries
(index versions 2 to 4) to refuse any that is not plain (assume-unchanged,
skip-worktree, intent-to-add, a stage other than 0) and a split or sparse index; it
returns the index's gitlink and ``.gitattributes`` paths. ``harmless_attributes`` says
whether an attributes text sets only attributes that never change bytes.
``converting_config`` says whether a git configuration or attributes file exists that
may have converted bytes on checkout or add (``autocrlf``, ``eol``, an attributes file,
``ignoreStat``, an include not followed). ``candidates_index`` writes the candidates'
index: the entries of a few paths of an index already walked (found from the walk's
marks, in the very file the walk read), for a status pass limited to those paths.

It deliberately does not run git, verify the index's checksum (the git commands that
read the same copy do, and fail) or decide anything about changes. Every refusal is
``NotPlain``; the caller then computes without the seed.
"""

from __future__ import annotations

import bisect
import errno
import functools
import hashlib
import mmap
import os
import re
import stat
import struct
from collections.abc import Sequence
from typing import TypeAlias

from promoter.domain.record_type import field, record

__all__ = [
    "MARK_EVERY",
    "NotPlain",
    "PlainIndex",
    "candidates_index",
    "converting_config",
    "copy_index",
    "harmless_attributes",
    "nonempty",
    "plain_index",
]

Index: TypeAlias = bytes | mmap.mmap  # an index's bytes, or the map of its copy

_LIMIT = 1 << 31
MARK_EVERY = 64  # entries between two marks of a walk (a look-up walks at most these)
_ENTRY = struct.Struct(">I32xH")  # mode, (uid gid size sha-1), flags; at offset 24
_ASSUME_VALID, _EXTENDED, _STAGE, _NAME = 0x8000, 0x4000, 0x3000, 0x0FFF
_FLAG_BITS = _ASSUME_VALID | _EXTENDED | _STAGE
_SHORT_FLAGS = _NAME - 1  # flags above it: a flag bit set, or a name of 0xFFF bytes or more
_ATTRIBUTES, _NESTED_ATTRIBUTES = b".gitattributes", b"/.gitattributes"
_SKIP_WORKTREE, _INTENT_TO_ADD = 0x4000, 0x2000
_GITLINK = 0o160000
_REFUSED_EXTENSIONS = (b"link", b"sdir")  # split index, sparse index
# Attributes that only steer diff, merge, archive or hosting tools, never the bytes.
_HARMLESS = {b"binary", b"diff", b"merge", b"delta", b"lockable", b"export-ignore"}
_HARMLESS |= {b"export-subst", b"whitespace"}
_HARMLESS_VALUED = {b"diff", b"merge", b"whitespace", b"conflict-marker-size", b"delta"}
_HARMLESS_PREFIXES = (b"linguist-", b"gitlab-")
# Any of these keys, or an include we do not follow, refuses the seed. (A filter driver
# alone converts nothing: only attributes name one, and those are checked.)
_CONVERTING_CONFIG = re.compile(
    rb"(?im)^\s*(?:autocrlf|eol|attributesfile|ignorestat)\b|^\s*\[\s*include"
)


@functools.cache  # compiled when an index is first walked
def _block_pattern(entries: int) -> re.Pattern[bytes]:
    """``entries`` version 2 or 3 entries in a row that the tight loop of ``_walk_v2``
    would skip, matched by ``re`` (no Python step per entry): each one's mode, after 24
    bytes of stat data, is not a gitlink's (its third byte is not a gitlink's ``0xE0``:
    one class of bytes, not a look-ahead; stricter than the loop's test, so a block it
    refuses is walked by the loop, which decides); its flags' high byte is zero (no flag
    bit, a name shorter than 256 bytes) and its low byte, the name's length, gives what
    follows (the 62 bytes, the name and 1 to 8 NULs: ``(length + 70) & ~7`` bytes in
    all), as git reads it: by the length, whatever those bytes are."""
    by_size: dict[int, list[int]] = {}
    for length in range(256):
        by_size.setdefault(((length + 70) & ~7) - 62, []).append(length)
    rest = b"|".join(
        b"[%s-%s].{%d}" % (re.escape(bytes([n[0]])), re.escape(bytes([n[-1]])), size)
        for size, n in sorted(by_size.items())
    )
    third = re.escape(struct.pack(">I", _GITLINK)[2:3])
    entry = b".{26}[^" + third + b"].{33}\\x00(?:" + rest + b")"
    return re.compile(b"(?s)(?:" + entry + b"){%d}+" % entries)


class NotPlain(Exception):
    """The index cannot vouch for raw bytes; compute without it."""


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """What names one version of a file: device, inode, size, mtime and ctime (a write
    in place changes the ctime, and so does setting the mtime back)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _open_index(source: str) -> tuple[int, os.stat_result]:
    """The index file at ``source`` opened (never through a link) and its status: a
    regular file of at most ``_LIMIT`` bytes; else ``NotPlain``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise NotPlain from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > _LIMIT:
        os.close(fd)
        raise NotPlain
    return fd, st


def copy_index(source: str, dest: str) -> tuple[mmap.mmap, tuple[int, ...]]:
    """Copy the index at ``source`` to ``dest`` in the kernel, its modification time kept;
    the copy mapped read-only (the caller closes the map) and the identity of the file it
    was copied from (unchanged while copied)."""
    fd, st = _open_index(source)
    try:
        if st.st_size < 32:
            raise NotPlain  # no header: nothing to map, nothing git would read as an index
        create = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(dest, create, 0o600)
        try:
            _copy(fd, out, st.st_size)
            if _identity(os.fstat(fd)) != _identity(st):
                raise NotPlain  # written in place while copied
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            if os.fstat(out).st_size != st.st_size:
                raise NotPlain  # cut short while copied
            return mmap.mmap(out, 0, access=mmap.ACCESS_READ), _identity(st)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _copy(fd: int, out: int, size: int) -> None:
    """The first ``size`` bytes of ``fd`` (fewer if it is shorter now) into ``out``, by
    ``sendfile``, or read and written where the file system cannot send."""
    done = 0
    while done < size:
        try:
            sent = os.sendfile(out, fd, done, size - done)
        except OSError as exc:
            if done or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            break
        if sent == 0:
            return
        done += sent
    while done < size:
        chunk = os.pread(fd, min(size - done, 1 << 20), done)
        if not chunk:
            return
        os.write(out, chunk)
        done += len(chunk)


@record(frozen=True)
class PlainIndex:
    """What the builder needs of a plain index: its gitlinks and ``.gitattributes`` files.

    ``marks``: where every ``MARK_EVERY``-th entry begins (versions 2 and 3; none for
    version 4); ``source``: the identity of the file the walked bytes were read from,
    when known (``copy_index``). Neither is compared: they say where, not what."""

    gitlinks: tuple[str, ...]
    attributes: tuple[str, ...]
    marks: tuple[int, ...] = field(default=(), compare=False)
    source: tuple[int, ...] = field(default=(), compare=False)


def plain_index(data: Index) -> PlainIndex:
    """The gitlink and attribute-file paths of an index (its bytes) whose every entry is
    plain, and its marks; else ``NotPlain``."""
    marks: list[int] = []
    gitlinks, attributes = _walk_plain(data, marks)
    return PlainIndex(
        tuple(os.fsdecode(p) for p in gitlinks),
        tuple(os.fsdecode(p) for p in attributes),
        tuple(marks),
    )


def _walk_plain(data: Index, marks: list[int]) -> tuple[list[bytes], list[bytes]]:
    """Gitlink and ``.gitattributes`` paths of a plain index; else ``NotPlain``."""
    if len(data) < 32:
        raise NotPlain
    signature, version, count = struct.unpack_from(">4sII", data, 0)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise NotPlain
    end = len(data) - 20
    gitlinks: list[bytes] = []
    attributes: list[bytes] = []
    try:
        if version == 4:
            off = _walk_v4(data, count, gitlinks, attributes)
        else:
            off = _walk_v2(data, count, gitlinks, attributes, marks)
        if off > end:
            raise NotPlain
        while off + 8 <= end:  # extensions: signature, size, payload
            name, size = struct.unpack_from(">4sI", data, off)
            if name in _REFUSED_EXTENSIONS:
                raise NotPlain
            off += 8 + size
    except (struct.error, IndexError) as exc:  # cut short
        raise NotPlain from exc
    return gitlinks, attributes


def _walk_v2(
    data: Index, count: int, gitlinks: list[bytes], attributes: list[bytes], marks: list[int]
) -> int:
    """Versions 2 and 3: the offset after the last entry; its gitlinks and attribute files,
    and where every ``MARK_EVERY``-th entry begins (``marks``).

    Most entries need only their length: no flag bit set, a name shorter than the 12-bit
    field's 0xFFF, not a gitlink, and no ``.gitattributes`` text ending inside the entry
    (every place that text ends is found first). Those are skipped a block of
    ``MARK_EVERY`` at a time: by one match of the whole block (``_block_pattern``, names
    shorter than 256 bytes: no Python step per entry), else in one tight loop; any other
    entry is read whole by ``_entry_v2``.
    """
    ends = []  # where each ".gitattributes" text in the index ends, then a sentinel
    at = data.find(_ATTRIBUTES, 0)  # from 0: a map's find starts at its position
    while at >= 0:
        ends.append(at + len(_ATTRIBUTES))
        at = data.find(_ATTRIBUTES, at + 1)
    ends.append(len(data) + 1)
    unpack, short, gitlink = _ENTRY.unpack_from, _SHORT_FLAGS, _GITLINK  # locals: faster
    whole = _block_pattern(MARK_EVERY)
    off, done, mark, every = 12, 0, 0, MARK_EVERY
    while done < count:  # each turn at a new entry: a block's first is marked
        if done % every == 0:
            marks.append(off)
        while ends[mark] <= off:
            mark += 1
        limit = ends[mark]
        stop = min(count, done - done % every + every)
        if stop - done == every:  # a whole block, when every entry in it is skipped
            block = whole.match(data, off, limit)
            if block is not None:
                off, done = block.end(), stop
                continue
        for entry in range(done, stop):
            mode, flags = unpack(data, off + 24)
            step = (flags + 70) & ~7  # 62 bytes, the name, 1 to 8 NULs
            if flags > short or mode == gitlink or off + step > limit:
                done = entry
                break
            off += step
        else:
            done = stop
            continue
        off = _entry_v2(data, off, gitlinks, attributes)
        done += 1
    return off


def _entry_v2(data: Index, off: int, gitlinks: list[bytes], attributes: list[bytes]) -> int:
    """One version 2 or 3 entry at ``off``, read whole: the offset of the next one."""
    mode, flags = _ENTRY.unpack_from(data, off + 24)
    start = off + 62
    if flags & _FLAG_BITS:  # each bit looked at only when one is set
        if flags & (_ASSUME_VALID | _STAGE):
            raise NotPlain
        if struct.unpack_from(">I", data, 4)[0] < 3:
            raise NotPlain
        (extended,) = struct.unpack_from(">H", data, start)
        if extended & (_SKIP_WORKTREE | _INTENT_TO_ADD):
            raise NotPlain
        start += 2
    length = flags & _NAME
    stop = start + length if length < _NAME else data.find(b"\0", start)
    if stop < 0:
        raise NotPlain
    off += (stop - off + 8) & ~7
    if off > len(data) - 20:
        raise NotPlain
    # a name is sliced out only when it is kept
    if mode == _GITLINK:
        gitlinks.append(data[start:stop])
    elif (
        stop - start >= len(_ATTRIBUTES)
        and data[stop - len(_ATTRIBUTES) : stop] == _ATTRIBUTES
        and (stop - start == len(_ATTRIBUTES) or data[stop - len(_ATTRIBUTES) - 1] == 0x2F)
    ):
        attributes.append(data[start:stop])
    return off


def _walk_v4(data: Index, count: int, gitlinks: list[bytes], attributes: list[bytes]) -> int:
    """Version 4: the offset after the last entry; its gitlinks and attribute files.

    Every name is rebuilt (prefix compression may split ``.gitattributes``)."""
    end = len(data) - 20
    off = 12
    previous = b""
    unpack = _ENTRY.unpack_from
    find = data.find
    for _ in range(count):
        mode, flags = unpack(data, off + 24)
        start = off + 62
        if flags & _FLAG_BITS:  # rare: each bit looked at only when one is set
            if flags & (_ASSUME_VALID | _STAGE):
                raise NotPlain
            (extended,) = struct.unpack_from(">H", data, start)
            if extended & (_SKIP_WORKTREE | _INTENT_TO_ADD):
                raise NotPlain
            start += 2
        strip, start = _varint(data, start)
        stop = find(b"\0", start)
        if stop < 0 or strip > len(previous):
            raise NotPlain
        path = previous[: len(previous) - strip] + data[start:stop]
        previous = path
        off = stop + 1
        if off > end:
            raise NotPlain
        if mode == _GITLINK:
            gitlinks.append(path)
        elif path == _ATTRIBUTES or path.endswith(_NESTED_ATTRIBUTES):
            attributes.append(path)
    return off


def candidates_index(
    source: str, walked: PlainIndex, key: str, paths: Sequence[bytes]
) -> tuple[bytes, int]:
    """The candidates' index of ``paths``, from the index at ``source``: its bytes and the
    source's mtime (git's racy-entry rule compares entries against it); else ``NotPlain``.

    ``walked`` is a walk of that very file (``source`` names the same device, inode, size,
    mtime and ctime, and its trailer is ``key``'s), so its marks are where entries begin.
    The candidates' index holds, in the index's order, the entries a status pass limited
    to ``paths`` (literal pathspecs) reads: each path's own and every one below it; and,
    for each leading directory of a path, its own entry and the first one below it, so
    that git sees the same directories tracked while it looks for untracked files. A
    version 2 or 3 index without extensions (the cache tree would name trees of the
    entries left out), its checksum written.
    """
    if not walked.marks or not walked.source:
        raise NotPlain
    fd, st = _open_index(source)
    try:
        if _identity(st) != walked.source:
            raise NotPlain
        with mmap.mmap(fd, st.st_size, prot=mmap.PROT_READ) as view:
            if f"{st.st_size}:{view[-20:].hex()}" != key:
                raise NotPlain
            found = _Marked(view, walked.marks)
            picked: set[int] = set()
            for path in paths:
                found.pick(path, picked)
            body = b"".join(view[o : found.end(o)] for o in sorted(picked))
            version = found.version
        if _identity(os.fstat(fd)) != walked.source:
            raise NotPlain  # written in place meanwhile
    except (OSError, ValueError, IndexError, struct.error) as exc:
        raise NotPlain from exc
    finally:
        os.close(fd)
    data = b"DIRC" + struct.pack(">II", version, len(picked)) + body
    trailer = hashlib.sha1(data, usedforsecurity=False).digest()  # git's checksum
    return data + trailer, st.st_mtime_ns


class _Marked:
    """Entries of a version 2 or 3 index found from a walk's marks (bisected, then the
    ``MARK_EVERY`` entries of one mark's block, read once, bisected); any inconsistency
    is ``NotPlain`` (a block whose names do not ascend, or that does not end where the
    next mark begins). Each entry is parsed once and each name looked up once (the
    candidates share their folders)."""

    def __init__(self, view: mmap.mmap, marks: tuple[int, ...]) -> None:
        signature, version, count = struct.unpack_from(">4sII", view, 0)
        if signature != b"DIRC" or version not in (2, 3) or len(marks) != -(-count // MARK_EVERY):
            raise NotPlain
        self.view, self.version, self.count, self.marks = view, version, count, marks
        self._entries_end = len(view) - 20
        self._entries: dict[int, tuple[bytes, int]] = {}  # offset -> _read's answer
        self._bounds: dict[bytes, tuple[int, int]] = {}  # target -> lower_bound's answer
        self._blocks: dict[int, tuple[list[bytes], list[int]]] = {}  # mark -> names, offsets

    def name(self, off: int) -> bytes:
        return self._read(off)[0]

    def end(self, off: int) -> int:
        return self._read(off)[1]

    def _read(self, off: int) -> tuple[bytes, int]:
        """The name of the entry at ``off`` and where the next begins."""
        read = self._entries.get(off)
        if read is None:
            read = self._entries[off] = self._parse(off)
        return read

    def _parse(self, off: int) -> tuple[bytes, int]:
        view = self.view
        if off < 12 or (off - 12) % 8 or off + 62 > self._entries_end:
            raise NotPlain
        _, flags = _ENTRY.unpack_from(view, off + 24)
        if flags & (_ASSUME_VALID | _STAGE):
            raise NotPlain
        start = off + 62
        if flags & _EXTENDED:
            (extended,) = struct.unpack_from(">H", view, start)
            if self.version < 3 or extended & (_SKIP_WORKTREE | _INTENT_TO_ADD):
                raise NotPlain
            start += 2
        length = flags & _NAME
        stop = start + length if length < _NAME else view.find(b"\0", start)
        after = off + ((stop - off + 8) & ~7)
        if stop <= start or after > self._entries_end or view[stop] != 0:
            raise NotPlain
        return view[start:stop], after

    def lower_bound(self, target: bytes) -> tuple[int, int]:
        """(entry number, offset) of the first entry whose name is not below ``target``;
        (count, -1) when there is none."""
        found = self._bounds.get(target)
        if found is None:
            found = self._bounds[target] = self._lower_bound(target)
        return found

    def _lower_bound(self, target: bytes) -> tuple[int, int]:
        low, high = 0, len(self.marks)
        while low < high:  # the last mark whose name is below target
            middle = (low + high) // 2
            if self.name(self.marks[middle]) < target:
                low = middle + 1
            else:
                high = middle
        for block in range(max(low - 1, 0), len(self.marks)):
            names, offsets = self._block(block)
            at = bisect.bisect_left(names, target)
            if at < len(names):
                return block * MARK_EVERY + at, offsets[at]
        return self.count, -1

    def _block(self, block: int) -> tuple[list[bytes], list[int]]:
        """The names and offsets of the entries from mark ``block`` to the next."""
        found = self._blocks.get(block)
        if found is not None:
            return found
        names: list[bytes] = []
        offsets: list[int] = []
        off = self.marks[block]
        for _ in range(min(MARK_EVERY, self.count - block * MARK_EVERY)):
            name, after = self._read(off)
            if names and name <= names[-1]:
                raise NotPlain  # git's index names ascend
            names.append(name)
            offsets.append(off)
            off = after
        if block + 1 < len(self.marks) and off != self.marks[block + 1]:
            raise NotPlain  # the steps and the marks disagree
        found = self._blocks[block] = (names, offsets)
        return found

    def pick(self, path: bytes, picked: set[int]) -> None:
        """Add the offsets of the entries a status pass limited to ``path`` reads."""
        number, off = self.lower_bound(path)
        if number < self.count and self.name(off) == path:
            picked.add(off)
        below = path + b"/"
        number, off = self.lower_bound(below)
        while number < self.count and self.name(off).startswith(below):
            picked.add(off)
            number, off = number + 1, self.end(off)
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            folder = b"/".join(parts[:depth])
            number, off = self.lower_bound(folder)
            if number < self.count and self.name(off) == folder:
                picked.add(off)
            number, off = self.lower_bound(folder + b"/")
            if number < self.count and self.name(off).startswith(folder + b"/"):
                picked.add(off)


def harmless_attributes(text: bytes) -> bool:
    """Whether a ``.gitattributes`` text sets nothing that changes bytes on checkout or add.

    Only the listed attributes pass (``binary``, ``diff``, ``merge``, ``whitespace``,
    ``export-*``, ``linguist-*`` …, any unset or unspecified one); a macro definition, a
    quoted pattern or any other attribute (``text``, ``eol``, ``filter``, ``ident``,
    ``working-tree-encoding``, a macro) does not.
    """
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        if line.startswith((b"[attr]", b'"')):
            return False
        for token in line.split()[1:]:
            if token.startswith((b"-", b"!")) or token in _HARMLESS:
                continue
            name = token.split(b"=", 1)[0]
            if name in _HARMLESS_VALUED or name.startswith(_HARMLESS_PREFIXES):
                continue
            return False
    return True


def _varint(data: Index, at: int) -> tuple[int, int]:
    """git's offset varint (``decode_varint``) at ``at``: (value, next offset)."""
    byte = data[at]
    at += 1
    value = byte & 0x7F
    while byte & 0x80:
        byte = data[at]
        at += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at


def nonempty(path: str) -> bool:
    """Whether ``path`` exists with content (unreadable counts as content)."""
    try:
        return os.stat(path).st_size > 0
    except FileNotFoundError:
        return False
    except OSError:
        return True


def converting_config(common_dir: str, git_dir: str) -> bool:
    """Whether a git configuration or attributes file that may convert bytes exists.

    These are the files the user's own git reads when it checks out or adds (the
    repository's, the user's and the system's); the seed is not trusted when any of
    them may have made a file's bytes differ from the blob its index entry names.
    """
    if os.environ.get("GIT_CONFIG_PARAMETERS") or os.environ.get("GIT_CONFIG_COUNT"):
        return True
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    attributes = [os.path.join(common_dir, "info", "attributes"), "/etc/gitattributes"]
    attributes.append(os.path.join(xdg, "git", "attributes"))
    if any(nonempty(path) for path in attributes):
        return True
    candidates = [
        os.path.join(common_dir, "config"),
        os.path.join(git_dir, "config.worktree"),
        os.path.join(home, ".gitconfig") if home else "",
        os.path.join(xdg, "git", "config"),
        "/etc/gitconfig",
        os.environ.get("GIT_CONFIG_GLOBAL", ""),
        os.environ.get("GIT_CONFIG_SYSTEM", ""),
    ]
    for path in dict.fromkeys(p for p in candidates if p and p != "/dev/null"):
        try:
            with open(path, "rb") as handle:
                if _CONVERTING_CONFIG.search(handle.read()):
                    return True
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return False
