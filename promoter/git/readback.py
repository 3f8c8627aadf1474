"""Typed, read-only facts about a git worktree: index entries, tree entries, blobs.

This module owns what promoter reads out of a repository's index and trees to decide
whether it may write, every merge stage kept apart, at a cost that follows the paths
asked about, not the repository (``index_entries`` and ``path_entries`` say how). Every
command only reads (protocol: promotion#git-reads-only). HEAD and
commits are ``head.py``'s, gitlinks in the way ``gitlinks.py``'s; ``RepoLayout``,
``discover`` and ``repository_identity`` are ``layout.py``'s, re-exported here.

Not here: what a fact means for a promotion (the engine compares).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import threading
from collections.abc import Iterator, Sequence

from promoter.errors import GitError
from promoter.git import index_memo, tree_reader
from promoter.git.layout import RepoLayout, discover, repo_env, repository_identity
from promoter.git.objects import CHUNK_SIZE, CatFile
from promoter.git.records import (
    IndexEntry,
    TreeEntry,
    check_pathspec_paths,
    parse_ls_files_stage,
    parse_ls_tree,
    require_oid,
)
from promoter.git.runner import GitResult, run_git

__all__ = [
    "IndexEntry",
    "RepoLayout",
    "TreeEntry",
    "blob_sha256",
    "discover",
    "index_entries",
    "iter_blob",
    "list_tree_files",
    "path_entries",
    "prefixes_of",
    "read_blob",
    "repository_identity",
    "tree_entries",
    "tree_entries_read",
]

GITLINK_MODE = "160000"
_ARGV_BYTES = 256 * 1024  # pathspec bytes (and pointers) per command, well under ARG_MAX
_ARGV_COUNT = 20_000
_FS_ENCODING = sys.getfilesystemencoding()  # what os.fsencode encodes names with
_FS_ERRORS = sys.getfilesystemencodeerrors()
_GLOB_SPECIAL = frozenset("*?[\\")
_TREE_CACHE_LIMIT = 200_000
# (common dir, tree) -> path -> entry; at most _TREE_CACHE_LIMIT entries in all
_TREE_CACHE: dict[tuple[str, str], dict[str, TreeEntry | None]] = {}
_TREE_CACHE_LOCK = threading.Lock()
_LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}


def _git(
    layout: RepoLayout,
    args: list[str],
    *,
    literal: bool = False,
    check: bool = True,
) -> GitResult:
    env = repo_env(layout)
    if literal:
        env.update(_LITERAL)
    return run_git(args, cwd=layout.worktree, env=env, check=check)


# --- index and trees ----------------------------------------------------------------------


def _batches(paths: Sequence[str]) -> Iterator[list[str]]:
    """Split paths into argv-sized groups."""
    batch: list[str] = []
    size = 0
    for path in paths:
        cost = len(path.encode(_FS_ENCODING, _FS_ERRORS)) + 9  # os.fsencode, minus a call
        if batch and (size + cost > _ARGV_BYTES or len(batch) >= _ARGV_COUNT):
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += cost
    if batch:
        yield batch


def exact_pathspec(path: str) -> str:
    """A pathspec that matches exactly ``path`` and nothing below it (module docstring)."""
    escaped = "".join("\\" + char if char in _GLOB_SPECIAL else char for char in path)
    if not escaped.startswith("\\"):
        escaped = "\\" + escaped
    return ":(glob)" + escaped


# ``index_entries``: one ``git ls-files`` per argv-sized batch, for the paths not answered
# before from the same index file (``promoter.git.index_memo``: the answer of a path is
# remembered under the index file's identity, checksum included, when that identity was
# the same before and after git read it). A path that may be a directory (a leading
# directory of another path asked about, or a directory on disk) is given as a ``:(glob)``
# pathspec with every character that is special to it escaped and the first one always
# escaped. An escaped pattern has no literal prefix, so git matches it with ``wildmatch``
# against whole names only: it matches the path itself and never the entries below it (a
# literal pathspec ``d`` would list all of ``d/``). This is why the leading directories of
# a path can be asked about at no extra cost. Other paths are ``:(literal)`` (cheaper for
# git to match; a file has nothing below). git matches every pathspec against every entry,
# so when the index holds at most ``WHOLE_LISTING_PER_PATH`` entries per path asked (read
# from the index header: a regular file, ``DIRC``, its entry count), one ``ls-files``
# without pathspecs lists it whole and the answers are picked out of that listing: the
# same entries, cheaper. An index of at most ``WHOLE_LISTING_REMEMBERED`` entries that has
# an identity is listed whole too, and the listing remembered as complete
# (``index_memo``): a later path, listed or not, is answered under the same index file
# without git.
def index_entries(layout: RepoLayout, paths: Sequence[str]) -> dict[str, list[IndexEntry]]:
    """Every index entry of each exact path, stages in order; ``[]`` when not in the index.

    A path that is a directory in the index has no entry of its own and maps to ``[]``;
    the entries below it are not listed at all, so asking costs the same for a directory
    of ten files as for one of a hundred thousand.
    """
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    before = index_memo.identity(layout)
    found = index_memo.recall(layout, before, wanted) if before is not None else {}
    asked = [path for path in wanted if path not in found]
    if not asked:
        return {path: found[path] for path in wanted}
    fresh: dict[str, list[IndexEntry]] = {path: [] for path in asked}
    if _whole_listing_is_cheaper(layout, len(asked), remembering=before is not None):
        listed = _git(layout, ["ls-files", "-s", "-z", "--debug", "--full-name"])
        every: dict[str, list[IndexEntry]] = {}
        for path, entry in parse_ls_files_stage(listed.stdout, debug=True):
            every.setdefault(path, []).append(entry)
        for path in asked:
            fresh[path] = every.get(path, [])
        return _remembered(layout, before, found, fresh, wanted, every)
    # A literal pathspec is cheaper for git to match than a pattern, and exact for a
    # file; a path that may be a directory (a leading directory of another path asked
    # about, or a directory on disk) gets the exact pattern, so nothing below is listed.
    leading = {p for path in wanted for p in prefixes_of(path)[:-1]}
    specs = {
        path: exact_pathspec(path)
        if path in leading or _is_real_dir(layout, path)
        else ":(literal)" + path
        for path in asked
    }
    for batch in _batches(asked):
        result = _git(
            layout,
            ["ls-files", "-s", "-z", "--debug", "--full-name", "--", *(specs[p] for p in batch)],
        )
        for path, entry in parse_ls_files_stage(result.stdout, debug=True):
            if path in fresh:
                fresh[path].append(entry)
    return _remembered(layout, before, found, fresh, wanted)


def _remembered(
    layout: RepoLayout,
    before: index_memo.Identity | None,
    found: dict[str, list[IndexEntry]],
    fresh: dict[str, list[IndexEntry]],
    wanted: list[str],
    every: dict[str, list[IndexEntry]] | None = None,
) -> dict[str, list[IndexEntry]]:
    """The answer of ``index_entries``: ``fresh`` sorted by stage and remembered when the
    index file git read is provably the one ``before`` names (``every``: the whole
    listing it came from, remembered as the answer for every path)."""
    for entries in (*fresh.values(), *(every or {}).values()):
        entries.sort(key=lambda entry: entry.stage)
    if before is not None and index_memo.identity(layout) == before:
        # git read the file ``before`` names
        if every is not None:
            index_memo.remember(layout, before, every, complete=True)
        else:
            index_memo.remember(layout, before, fresh)
    found.update(fresh)
    return {path: found[path] for path in wanted}


WHOLE_LISTING_PER_PATH = 2  # index entries per asked path up to which all are listed
WHOLE_LISTING_REMEMBERED = 4096  # entries up to which an index is listed whole, remembered


def _whole_listing_is_cheaper(layout: RepoLayout, asked: int, *, remembering: bool = False) -> bool:
    """Whether the index holds at most ``WHOLE_LISTING_PER_PATH`` entries per asked path
    (read from its header), so that listing every entry costs git less than matching each
    entry against every pathspec (that matching grows as paths x entries); or, when the
    listing will be ``remembering`` (the index file has an identity), at most
    ``WHOLE_LISTING_REMEMBERED``: then every later look-up under the same index file is
    answered from memory, whatever paths it asks about."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(os.path.join(layout.git_dir, "index"), flags)
    except FileNotFoundError:
        return True  # no index: nothing to list
    except OSError:
        return False
    try:
        header = os.pread(fd, 12, 0) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(header) != 12 or header[:4] != b"DIRC":
        return False
    count = int.from_bytes(header[8:12], "big")
    return count <= WHOLE_LISTING_PER_PATH * asked or (
        remembering and count <= WHOLE_LISTING_REMEMBERED
    )


def tree_entries(
    layout: RepoLayout, tree: str, paths: Sequence[str]
) -> dict[str, TreeEntry | None]:
    """The entry of each exact path in ``tree``; ``None`` when the tree has no such path.

    A directory is reported as ``TreeEntry(mode="040000", type="tree")`` and a gitlink as
    ``type="commit"``; a path below a blob or a gitlink is ``None``.
    """
    require_oid(tree, "tree")
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    found: dict[str, TreeEntry | None] = dict.fromkeys(wanted)
    for batch in _batches(wanted):
        # -t shows the trees it walks through, so a named directory is listed itself.
        result = _git(
            layout,
            ["ls-tree", "-t", "-z", "--full-tree", tree, "--", *batch],
            literal=True,
        )
        for path, entry in parse_ls_tree(result.stdout):
            if path in found:
                found[path] = entry
    return found


def tree_entries_read(cat: CatFile, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry | None]:
    """``tree_entries`` read through a running ``cat-file --batch`` that reaches ``tree``'s
    objects (SHA-1 ones): the trees on the paths, each read once, no ``ls-tree`` started."""
    require_oid(tree, "tree")
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    trees: dict[str, dict[str, TreeEntry]] = {}

    def entries(oid: str) -> dict[str, TreeEntry]:
        if oid not in trees:
            info = cat.request(oid)
            if info is None or info.type != "tree":
                raise GitError(f"git cat-file has no tree {oid}")
            trees[oid] = tree_reader.parse_tree(b"".join(cat.chunks()), 20)
        return trees[oid]

    found: dict[str, TreeEntry | None] = {}
    for path in wanted:
        at: TreeEntry | None = TreeEntry("040000", tree, "tree")
        for name in path.split("/"):
            if at is None or at.type != "tree":  # below a blob or a gitlink: no entry
                at = None
                break
            at = entries(at.oid).get(name)
        found[path] = at
    return found


def prefixes_of(path: str) -> list[str]:
    """``a``, ``a/b``, ``a/b/c`` for ``a/b/c``: the path's leading directories and itself."""
    return list(_prefixes(path))


@functools.lru_cache(maxsize=1 << 16)
def _prefixes(path: str) -> tuple[str, ...]:
    """``prefixes_of`` remembered: a look-up of 10 000 paths asks for each several times."""
    ends = [i for i, char in enumerate(path) if char == "/"]
    return (*(path[:end] for end in ends), path)


# ``path_entries``: a tree's entries of some paths and of every leading directory of them.
# ``ls-tree`` has no such pathspec (it treats every pathspec as a literal prefix, so
# naming ``d`` and ``d/f`` lists all of ``d``); instead the paths are named with ``-t``
# (which shows the trees walked through), plus each leading directory that is not a
# directory on disk (so is probably no tree: a blob or a gitlink in the way, or absent, is
# shown or found missing). A leading directory that is neither shown nor was named (a
# gitlink that is checked out as a directory) is asked about in a second, small
# ``ls-tree``, so the answer is the same as naming every leading directory. Answers are
# remembered per repository, tree id and path, bounded in number: a tree id fixes the
# tree's entries (replace refs are off), so a remembered answer is the answer git would
# give.
def path_entries(
    layout: RepoLayout, tree: str, paths: Sequence[str]
) -> dict[str, TreeEntry | None]:
    """``tree_entries`` of every path and every leading directory of one, without
    listing the contents of those directories (see the comment above).

    Answers are remembered per repository, tree id and path (a tree's id fixes its
    entries), so a path read once, e.g. when its bundle was verified, costs no git
    process the next time it is asked about in the same tree.
    """
    require_oid(tree, "tree")
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    everything = list(dict.fromkeys(p for path in wanted for p in _prefixes(path)))
    store = (os.fspath(layout.common_dir), tree)
    with _TREE_CACHE_LOCK:
        cached = _TREE_CACHE.get(store, {})
        known = {p: cached[p] for p in everything if p in cached}
    if not known:  # nothing remembered (a first verification): every path is asked about
        todo, asked = wanted, everything
    else:
        todo = [path for path in wanted if any(p not in known for p in _prefixes(path))]
        if not todo:
            return {p: known[p] for p in everything}
        asked = list(dict.fromkeys(p for path in todo for p in _prefixes(path)))
    fresh = _path_entries(layout, tree, todo, asked)
    with _TREE_CACHE_LOCK:
        held = sum(len(entries) for entries in _TREE_CACHE.values())
        if held + len(fresh) > _TREE_CACHE_LIMIT:
            _TREE_CACHE.clear()
        _TREE_CACHE.setdefault(store, {}).update(fresh)
    return {p: fresh[p] if p in fresh else known[p] for p in everything}


def _path_entries(
    layout: RepoLayout, tree: str, wanted: list[str], everything: list[str]
) -> dict[str, TreeEntry | None]:
    """``everything``: ``wanted`` and their leading directories, each once, in order.

    Walked through the tree objects (``tree_reader``: no process once the repository's
    reader runs); where a tree on the way is too large to parse here, ``ls-tree``."""
    walked = _walked_entries(layout, tree, everything)
    if walked is not None:
        return walked
    return _listed_entries(layout, tree, wanted, everything)


def _walked_entries(
    layout: RepoLayout, tree: str, everything: list[str]
) -> dict[str, TreeEntry | None] | None:
    """Each path's entry, found by walking from ``tree`` one name at a time: absent
    when a leading directory is absent or no tree (a blob or a gitlink in the way)."""
    found: dict[str, TreeEntry | None] = {}

    def entry(path: str) -> TreeEntry | None | bool:
        if path in found:
            return found[path]
        parent, _, name = path.rpartition("/")
        if parent:
            above = entry(parent)
            if above is False:
                return False
            if above is None or not isinstance(above, TreeEntry) or above.type != "tree":
                found[path] = None
                return None
            listing = tree_reader.children(layout, above.oid)
        else:
            listing = tree_reader.children(layout, tree)
        if listing is None:
            return False  # too large to parse here
        found[path] = listing.get(name)
        return found[path]

    for path in everything:
        if entry(path) is False:
            return None
    return {p: found[p] for p in everything}


def _listed_entries(
    layout: RepoLayout, tree: str, wanted: list[str], everything: list[str]
) -> dict[str, TreeEntry | None]:
    """``_path_entries`` through ``ls-tree`` (see the module docstring)."""
    named_paths = set(wanted)
    leading = [p for p in everything if p not in named_paths]
    named = [*wanted, *(p for p in leading if not _is_real_dir(layout, p))]
    shown = _ls_tree(layout, tree, named)
    found: dict[str, TreeEntry | None] = {p: shown.get(p) for p in everything}
    # A leading directory that was not named and is not shown as a tree walked through
    # may still be a non-tree entry (a gitlink checked out as a directory): ask for it.
    asked = set(named)
    unknown: list[str] = []
    for path in wanted:
        for prefix in _prefixes(path)[:-1]:
            entry = shown.get(prefix)
            if entry is not None and entry.type == "tree":
                continue
            if entry is None and prefix not in asked:
                unknown.append(prefix)
            break
    if unknown:
        more = _ls_tree(layout, tree, list(dict.fromkeys(unknown)))
        found.update({p: more.get(p) for p in unknown})
    return found


def _ls_tree(layout: RepoLayout, tree: str, paths: list[str]) -> dict[str, TreeEntry]:
    shown: dict[str, TreeEntry] = {}
    for batch in _batches(paths):
        # -t shows the trees it walks through, so a named directory is listed itself.
        result = _git(
            layout,
            ["ls-tree", "-t", "-z", "--full-tree", tree, "--", *batch],
            literal=True,
        )
        shown.update(parse_ls_tree(result.stdout))
    return shown


def _is_real_dir(layout: RepoLayout, path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(layout.worktree, path)).st_mode)
    except OSError:
        return False


def list_tree_files(layout: RepoLayout, tree: str) -> dict[str, TreeEntry]:
    """Every non-directory entry of ``tree``, recursively: blobs and gitlinks (commits)."""
    require_oid(tree, "tree")
    result = _git(layout, ["ls-tree", "-r", "-z", "--full-tree", tree])
    return dict(parse_ls_tree(result.stdout))


# --- blobs --------------------------------------------------------------------------------


def blob_sha256(layout: RepoLayout, oids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """For each blob id, the sha256 of its exact bytes and its size (streamed): through
    the repository's running reader where a daemon guards it and the reader is free
    (``tree_reader.blob_sha256``), else through a ``cat-file`` of its own."""
    served = tree_reader.blob_sha256(layout, oids)
    if served is not None:
        return served
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        return cat.blob_sha256(oids)


def read_blob(layout: RepoLayout, oid: str) -> bytes:
    """The whole content of blob ``oid``."""
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        return cat.read_blob(oid)


def iter_blob(layout: RepoLayout, oid: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The content of blob ``oid`` in chunks, without holding it whole."""
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        yield from cat.blob_chunks(oid, chunk_size)
