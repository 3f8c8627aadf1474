"""Index answers remembered while the index file is provably the one they were read from.

This module owns ``identity`` (what names one version of a repository's index file: its
inode, size, modification and change times, and the checksum git writes as its last
bytes, which covers everything before it) and a bounded memory of index answers per
index file and identity (``recall``, ``remember``). git never rewrites an index in place:
it writes ``index.lock`` and renames it over ``index``, so a new index is a new file with
a new checksum; an identity that is equal before and after a look-up names the very file
the look-up read. An index without a checksum (``index.skipHash``), a missing index, or
one that is not a regular file has no identity, and nothing is remembered for it.

A whole listing of an index (``remember(..., complete=True)``) answers every path: a
path it does not list has no entry (``[]``), so a later look-up of a new path under the
same index file costs no git process either.

Deliberately not here: running git or parsing its answers (``promoter.git.readback``
does both and hands in what it read), and any write to the repository.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Mapping

from promoter.git.layout import RepoLayout
from promoter.git.records import IndexEntry

__all__ = ["LIMIT", "identity", "recall", "remember"]

LIMIT = 100_000  # remembered paths over all repositories
Identity = tuple[int, int, int, int, int, bytes]

# per index file: its identity, the answers read from it, and whether they are all of
# its entries (a whole listing: every other path has none)
_memory: dict[str, tuple[Identity, dict[str, tuple[IndexEntry, ...]], bool]] = {}
_held = 0
_lock = threading.Lock()


def _index_path(layout: RepoLayout) -> str:
    return os.path.join(layout.git_dir, "index")


def identity(layout: RepoLayout) -> Identity | None:
    """What names this version of the index file; ``None``: it cannot be named."""
    size = 32 if layout.object_format == "sha256" else 20
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(_index_path(layout), flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < 12 + size:
            return None
        trailer = os.pread(fd, size, st.st_size - size)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(trailer) != size or not trailer.strip(b"\0"):
        return None  # no checksum written: the content is not named
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, trailer)


def recall(
    layout: RepoLayout, ident: Identity, paths: Iterable[str]
) -> dict[str, list[IndexEntry]]:
    """The remembered answers for those of ``paths`` read from the index ``ident`` names."""
    with _lock:
        held = _memory.get(_index_path(layout))
        if held is None or held[0] != ident:
            return {}
        answers, complete = held[1], held[2]
        if complete:
            return {path: list(answers.get(path, ())) for path in paths}
        return {path: list(answers[path]) for path in paths if path in answers}


def remember(
    layout: RepoLayout,
    ident: Identity,
    answers: Mapping[str, list[IndexEntry]],
    *,
    complete: bool = False,
) -> None:
    """Keep ``answers``, read from the index ``ident`` names (a caller checked it after);
    ``complete``: they are every entry of that index (a whole listing)."""
    global _held
    key = _index_path(layout)
    with _lock:
        held = _memory.get(key)
        if held is not None and held[0] == ident and held[2]:
            return  # every answer of this index is known already
        if held is None or held[0] != ident or complete:
            if held is not None:
                _held -= len(held[1])
            held = (ident, {}, False)
            _memory[key] = held
        if _held + len(answers) > LIMIT:
            _memory.clear()
            _held = 0
            held = (ident, {}, False)
            _memory[key] = held
            if len(answers) > LIMIT:
                return
        if complete:
            held = (ident, held[1], True)
            _memory[key] = held
        for path, entries in answers.items():
            if path not in held[1]:
                _held += 1
            held[1][path] = tuple(entries)
