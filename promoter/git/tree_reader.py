"""Tree objects read through one long-lived ``git cat-file --batch`` per repository.

``children`` answers what ``git ls-tree -t --full-tree <tree>`` prints for a tree's
direct entries, through one ``cat-file --batch`` per guarded repository (started on
first use by ``promoter.git.runner``, at most ``MAX_READERS`` at once, replaced once if it
fails; ``close_all`` stops them) and a bounded memory of trees read (a tree id fixes its
entries). Only for a repository the daemon guards (``serve``); elsewhere, and for a tree
larger than ``MAX_TREE_BYTES``, it answers None and the caller runs ``ls-tree``.
``blob_sha256`` asks the same reader for blob digests when it is free.

Not here: which paths are asked about or what an entry means (``promoter.git.readback``),
blob bytes (``promoter.git.objects``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from promoter.errors import GitError
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.objects import CatFile
from promoter.git.records import TreeEntry, require_oid

__all__ = ["MAX_TREE_BYTES", "blob_sha256", "children", "close_all", "serve"]

MAX_TREE_BYTES = 1 << 20  # about 25 000 entries
_LIMIT = 200_000  # remembered entries, all trees together
MAX_READERS = 8  # running at once; the one used longest ago is stopped for a new one
_TYPES = {b"40000": "tree", b"160000": "commit"}

_lock = threading.Lock()  # guards the two dictionaries below
_readers: dict[str, _Reader] = {}  # in the order they were last used
_trees: dict[tuple[str, str], dict[str, TreeEntry]] = {}
_held = 0
_served: set[str] = set()  # common git directories of the repositories a daemon guards


def serve(layout: RepoLayout) -> None:
    """Let ``children`` keep a reader running for ``layout``'s repository (a daemon's)."""
    with _lock:
        _served.add(os.fspath(layout.common_dir))


class _Reader:
    """One running ``cat-file --batch``, used by one thread at a time."""

    def __init__(self, layout: RepoLayout) -> None:
        self.lock = threading.Lock()
        self.closed = False
        self._cat = CatFile(cwd=layout.worktree, env=repo_env(layout))
        self._cat.__enter__()

    def tree_bytes(self, oid: str) -> bytes | None:
        """The tree object's bytes; None when it is larger than ``MAX_TREE_BYTES``.
        ``GitError`` when it is missing or is not a tree."""
        info = self._cat.request(oid)
        if info is None or info.type != "tree":
            raise GitError(f"object {oid} is not a tree in this repository")
        if info.size > MAX_TREE_BYTES:
            return None  # its bytes are skipped by the next request
        return b"".join(self._cat.chunks())

    def blob_sha256(self, oids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each blob's sha256 and size (``CatFile.blob_sha256``)."""
        return self._cat.blob_sha256(oids)

    def close(self, *, kill: bool = False) -> None:
        self.closed = True
        self._cat.close(kill=kill)


def _reader(layout: RepoLayout) -> _Reader:
    key = os.fspath(layout.common_dir)
    stopped: list[_Reader] = []
    with _lock:
        reader = _readers.pop(key, None)
        if reader is None or reader.closed:
            while len(_readers) >= MAX_READERS:
                stopped.append(_readers.pop(next(iter(_readers))))
            reader = _Reader(layout)
        _readers[key] = reader
    for old in stopped:
        with old.lock:
            old.close()
    return reader


def _drop(layout: RepoLayout, reader: _Reader) -> None:
    key = os.fspath(layout.common_dir)
    with _lock:
        if _readers.get(key) is reader:
            del _readers[key]
    reader.close(kill=True)


def _read(layout: RepoLayout, oid: str) -> bytes | None:
    """The tree's bytes through the repository's reader; a failed reader is replaced
    once (a missing object is a ``GitError`` either way)."""
    for attempt in (1, 2):
        reader = _reader(layout)
        with reader.lock:
            if reader.closed:
                continue
            try:
                return reader.tree_bytes(oid)
            except (GitError, OSError):
                _drop(layout, reader)
                if attempt == 2:
                    raise
    raise GitError("the tree reader was closed while it was asked")


def blob_sha256(layout: RepoLayout, oids: Sequence[str]) -> dict[str, tuple[str, int]] | None:
    """For each blob id, the sha256 of its exact bytes and its size, through the
    repository's running reader. None, and the caller starts a ``cat-file`` of its own as
    it always did, when no daemon here guards the repository, when its reader is busy
    answering another thread (a large blob is not waited for), or when the reader fails
    (a missing object, one that is no blob, a process that died): that reader is
    stopped, and the caller's own process gives the answer or the error it always gave."""
    with _lock:
        if os.fspath(layout.common_dir) not in _served:
            return None
    reader = _reader(layout)
    if not reader.lock.acquire(blocking=False):
        return None
    try:
        if reader.closed:
            return None
        try:
            return reader.blob_sha256(oids)
        except (GitError, OSError):
            _drop(layout, reader)
            return None
    finally:
        reader.lock.release()


def parse_tree(data: bytes, oid_bytes: int) -> dict[str, TreeEntry]:
    """A tree object's entries by name (``<mode> <name>NUL<raw id>`` each)."""
    entries: dict[str, TreeEntry] = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space + 1)
        mode = data[pos:space]
        raw = data[nul + 1 : nul + 1 + oid_bytes]
        if len(raw) != oid_bytes or not mode.isdigit():
            raise GitError("git cat-file gave a tree that does not parse")
        kind = _TYPES.get(mode, "blob")
        entries[os.fsdecode(data[space + 1 : nul])] = TreeEntry(
            mode.decode().rjust(6, "0"), raw.hex(), kind
        )
        pos = nul + 1 + oid_bytes
    return entries


def children(layout: RepoLayout, oid: str) -> dict[str, TreeEntry] | None:
    """The direct entries of tree ``oid`` by name; None for a tree too large to parse
    here, or of a repository no daemon here guards (the caller asks ``ls-tree``
    instead). ``GitError`` when it is no tree."""
    global _held
    require_oid(oid, "tree")
    key = (os.fspath(layout.common_dir), oid)
    with _lock:
        if key[0] not in _served:
            return None
        known = _trees.get(key)
    if known is not None:
        return known
    data = _read(layout, oid)
    if data is None:
        return None
    entries = parse_tree(data, len(oid) // 2)
    with _lock:
        if _held + len(entries) > _LIMIT:
            _trees.clear()
            _held = 0
        if key not in _trees:
            _trees[key] = entries
            _held += len(entries)
    return entries


def close_all() -> None:
    """Stop every reader (a later ``children`` starts a new one)."""
    with _lock:
        readers = list(_readers.values())
        _readers.clear()
    for reader in readers:
        with reader.lock:
            reader.close()
