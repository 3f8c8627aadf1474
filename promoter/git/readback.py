"""Typed, read-only facts about a git worktree.

This module owns what promoter reads out of a repository to decide whether it may write:
symbolic HEAD and HEAD's commit and tree, the index entries and tree entries of given
paths (every merge stage kept apart), blob contents and hashes, gitlinks and nested
repositories in the way of a path, and full tree listings. ``RepoLayout``, ``discover``
and ``repository_identity`` live in ``layout.py`` and are re-exported here.

Every git command here only reads: plumbing commands, ``GIT_OPTIONAL_LOCKS=0``, the
repository pinned with ``GIT_DIR`` and ``GIT_WORK_TREE`` once discovered, literal
pathspecs. Nothing here writes the index, refs, objects or config. It deliberately does
not decide what a fact means for a promotion (the engine compares), and its look at the
disk in ``gitlinks_and_nested`` is advisory: the descriptor-chain writer re-checks.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

from promoter.errors import GitError
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
from promoter.git.runner import GitResult, run_git, stderr_tail

__all__ = [
    "IndexEntry",
    "RepoLayout",
    "TreeEntry",
    "blob_sha256",
    "commit_exists",
    "commit_tree",
    "discover",
    "gitlinks_and_nested",
    "head_commit",
    "index_entries",
    "iter_blob",
    "list_tree_files",
    "read_blob",
    "repository_identity",
    "symbolic_head",
    "tree_entries",
]

GITLINK_MODE = "160000"
_ARGV_BYTES = 64 * 1024  # pathspec bytes per command, well under ARG_MAX
_ARGV_COUNT = 1000
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


# --- HEAD and commits ---------------------------------------------------------------------


def symbolic_head(layout: RepoLayout) -> str | None:
    """The ref HEAD points at (``refs/heads/main``), or ``None`` when HEAD is detached."""
    result = _git(layout, ["symbolic-ref", "-q", "HEAD"], check=False)
    if result.returncode == 1:
        return None
    if result.returncode != 0:
        raise GitError("git symbolic-ref HEAD failed", stderr=stderr_tail(result.stderr))
    return result.stdout.decode("utf-8", "surrogateescape").rstrip("\n")


def head_commit(layout: RepoLayout) -> str | None:
    """HEAD's commit id, or ``None`` on an unborn branch; ``GitError`` if HEAD is no commit."""
    result = _git(layout, ["rev-parse", "-q", "--verify", "HEAD"], check=False)
    if result.returncode != 0:
        return None
    oid = result.stdout.decode("ascii", "replace").strip()
    require_oid(oid, "HEAD")
    if not commit_exists(layout, oid):
        raise GitError(f"HEAD points at {oid}, which is not a commit in the repository")
    return oid


def _peel(layout: RepoLayout, oid: str, kind: str) -> str | None:
    result = _git(layout, ["rev-parse", "-q", "--verify", f"{oid}^{{{kind}}}"], check=False)
    if result.returncode != 0:
        return None
    return result.stdout.decode("ascii", "replace").strip()


def commit_exists(layout: RepoLayout, oid: str) -> bool:
    """Whether ``oid`` names a commit object in the repository (a tag to one does not)."""
    require_oid(oid, "commit")
    return _peel(layout, oid, "commit") == oid


def commit_tree(layout: RepoLayout, commit: str) -> str | None:
    """The tree of commit ``commit``, or ``None`` if there is no such commit."""
    if not commit_exists(layout, commit):
        return None
    tree = _peel(layout, commit, "tree")
    if tree is None:
        raise GitError(f"commit {commit} has no readable tree", commit=commit)
    return require_oid(tree, "tree")


# --- index and trees ----------------------------------------------------------------------


def _batches(paths: Sequence[str]) -> Iterator[list[str]]:
    """Split paths into argv-sized groups."""
    batch: list[str] = []
    size = 0
    for path in paths:
        cost = len(os.fsencode(path)) + 1
        if batch and (size + cost > _ARGV_BYTES or len(batch) >= _ARGV_COUNT):
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += cost
    if batch:
        yield batch


def index_entries(layout: RepoLayout, paths: Sequence[str]) -> dict[str, list[IndexEntry]]:
    """Every index entry of each exact path, stages in order; ``[]`` when not in the index.

    A path that is a directory in the index has no entry of its own and maps to ``[]``.
    """
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    found: dict[str, list[IndexEntry]] = {path: [] for path in wanted}
    for batch in _batches(wanted):
        result = _git(
            layout,
            ["ls-files", "-s", "-z", "--debug", "--full-name", "--", *batch],
            literal=True,
        )
        for path, entry in parse_ls_files_stage(result.stdout, debug=True):
            if path in found:
                found[path].append(entry)
    for entries in found.values():
        entries.sort(key=lambda entry: entry.stage)
    return found


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


def list_tree_files(layout: RepoLayout, tree: str) -> dict[str, TreeEntry]:
    """Every non-directory entry of ``tree``, recursively: blobs and gitlinks (commits)."""
    require_oid(tree, "tree")
    result = _git(layout, ["ls-tree", "-r", "-z", "--full-tree", tree])
    return dict(parse_ls_tree(result.stdout))


# --- blobs --------------------------------------------------------------------------------


def blob_sha256(layout: RepoLayout, oids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """For each blob id, the sha256 of its exact bytes and its size (streamed)."""
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


# --- repository shape ---------------------------------------------------------------------


def _prefixes(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def gitlinks_and_nested(layout: RepoLayout, paths: Sequence[str]) -> dict[str, str]:
    """Paths that sit on or under a gitlink or a nested repository, with the reason.

    For each path, the path itself and each of its leading directories is looked up as a
    gitlink (mode 160000) in the index and in HEAD's tree, and on disk as a directory
    holding a ``.git`` entry. The disk walk uses ``lstat`` and stops at the first
    component that is not a real directory; it never follows a symlink. Clean paths are
    absent from the result.
    """
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    prefixes = list(dict.fromkeys(p for path in wanted for p in _prefixes(path)))
    in_index = {
        prefix
        for prefix, entries in index_entries(layout, prefixes).items()
        if any(entry.mode == GITLINK_MODE for entry in entries)
    }
    in_head: set[str] = set()
    head = head_commit(layout)
    if head is not None:
        tree = commit_tree(layout, head)
        assert tree is not None
        in_head = {
            prefix
            for prefix, entry in tree_entries(layout, tree, prefixes).items()
            if entry is not None and entry.mode == GITLINK_MODE
        }
    offending: dict[str, str] = {}
    for path in wanted:
        reason = _first_reason(layout, _prefixes(path), in_index, in_head)
        if reason is not None:
            offending[path] = reason
    return offending


def _first_reason(
    layout: RepoLayout, prefixes: list[str], in_index: set[str], in_head: set[str]
) -> str | None:
    for prefix in prefixes:
        if prefix in in_index:
            return f"{prefix!r} is a gitlink (submodule) in the index"
        if prefix in in_head:
            return f"{prefix!r} is a gitlink (submodule) in HEAD"
    for prefix in prefixes:
        directory = os.path.join(layout.worktree, prefix)
        try:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{prefix!r} cannot be examined: {exc.strerror or exc}"
        try:
            os.lstat(os.path.join(directory, ".git"))
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{prefix!r} cannot be examined: {exc.strerror or exc}"
        return f"{prefix!r} is a nested repository (it holds a .git entry)"
    return None
