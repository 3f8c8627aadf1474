"""Whether a worktree's own index can serve the builder as a stat cache, and its copy.

This module owns the preconditions of ``seeded.SeededShadow``: ``copy_index`` copies
``.git/index`` (keeping its modification time, which git's racy-entry rule compares
entries against), and ``plain_gitlinks`` reads its entries (index versions 2 to 4) to
refuse any that is not plain (assume-unchanged, skip-worktree, intent-to-add, a stage
other than 0), a split or sparse index, and any path naming ``.gitattributes``; it
returns the index's gitlink paths. ``converting_config`` says whether a git
configuration or attributes file exists that may have converted bytes on checkout or
add (``autocrlf``, ``eol``, an attributes file, ``ignoreStat``, an include not followed).

It deliberately does not run git, verify the index's checksum (the git commands that
read the same copy do, and fail) or decide anything about changes. Every refusal is
``NotPlain``; the caller then computes without the seed.
"""

from __future__ import annotations

import os
import re
import stat
import struct

__all__ = ["NotPlain", "converting_config", "copy_index", "nonempty", "plain_gitlinks"]

_LIMIT = 1 << 31
_ENTRY = struct.Struct(">I12x20sH")  # mode, (uid gid size), sha-1, flags; at offset 24
_ASSUME_VALID, _EXTENDED, _STAGE, _NAME = 0x8000, 0x4000, 0x3000, 0x0FFF
_SKIP_WORKTREE, _INTENT_TO_ADD = 0x4000, 0x2000
_GITLINK = 0o160000
_REFUSED_EXTENSIONS = (b"link", b"sdir")  # split index, sparse index
# Any of these keys, or an include we do not follow, refuses the seed. (A filter driver
# alone converts nothing: only attributes name one, and those are checked.)
_CONVERTING_CONFIG = re.compile(
    rb"(?im)^\s*(?:autocrlf|eol|attributesfile|ignorestat)\b|^\s*\[\s*include"
)


class NotPlain(Exception):
    """The index cannot vouch for raw bytes; compute without it."""


def copy_index(source: str, dest: str) -> bytes:
    """Copy the index at ``source`` to ``dest``, its modification time kept; its bytes."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise NotPlain from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _LIMIT:
            raise NotPlain
        data = handle.read()
    with open(dest, "xb") as out:
        out.write(data)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    return data


def plain_gitlinks(data: bytes) -> tuple[str, ...]:
    """The gitlink paths of an index (its bytes) whose every entry is plain; else
    ``NotPlain`` (also for a name that is, or may be, a ``.gitattributes``)."""
    if b".gitattributes" in data:
        raise NotPlain
    return tuple(os.fsdecode(path) for path in _gitlinks_of_plain(data))


def _gitlinks_of_plain(data: bytes) -> list[bytes]:
    """The gitlink paths of an index whose every entry is plain; else ``NotPlain``."""
    if len(data) < 32:
        raise NotPlain
    signature, version, count = struct.unpack_from(">4sII", data, 0)
    if signature != b"DIRC" or version not in (2, 3, 4):
        raise NotPlain
    end = len(data) - 20
    off = 12
    previous = b""
    gitlinks: list[bytes] = []
    unpack = _ENTRY.unpack_from
    find = data.find
    try:
        for _ in range(count):
            mode, _oid, flags = unpack(data, off + 24)
            if flags & (_ASSUME_VALID | _STAGE):
                raise NotPlain
            start = off + 62
            if flags & _EXTENDED:
                if version < 3:
                    raise NotPlain
                (extended,) = struct.unpack_from(">H", data, start)
                if extended & (_SKIP_WORKTREE | _INTENT_TO_ADD):
                    raise NotPlain
                start += 2
            if version == 4:
                strip, start = _varint(data, start)
                stop = find(b"\0", start)
                if stop < 0 or strip > len(previous):
                    raise NotPlain
                path = previous[: len(previous) - strip] + data[start:stop]
                if path == b".gitattributes" or path.endswith(b"/.gitattributes"):
                    raise NotPlain  # v4 compresses names: the text check may miss one
                previous = path
                off = stop + 1
            else:
                length = flags & _NAME
                stop = start + length if length < _NAME else find(b"\0", start)
                if stop < 0:
                    raise NotPlain
                path = b""
                if mode == _GITLINK:
                    path = data[start:stop]
                off += (stop - off + 8) & ~7
            if off > end:
                raise NotPlain
            if mode == _GITLINK:
                gitlinks.append(path)
        while off + 8 <= end:  # extensions: signature, size, payload
            name, size = struct.unpack_from(">4sI", data, off)
            if name in _REFUSED_EXTENSIONS:
                raise NotPlain
            off += 8 + size
    except (struct.error, IndexError) as exc:  # cut short
        raise NotPlain from exc
    return gitlinks


def _varint(data: bytes, at: int) -> tuple[int, int]:
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
