"""Gitlinks and nested repositories in the way of a path, read only.

``gitlinks_and_nested`` finds a gitlink or nested repository in the way of a path, from
the index entries of its leading directories, HEAD's tree and one look at each leading
directory on disk; a pass shares one ``seen`` map, so a directory is looked at once per
pass however many paths lie below it.

Deliberately not here: reading the index and trees themselves (``readback.py``), HEAD
(``head.py``). Its look at the disk is advisory: the descriptor-chain writer re-checks.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from promoter.git.head import commit_tree, head_commit
from promoter.git.layout import RepoLayout
from promoter.git.readback import GITLINK_MODE, index_entries, path_entries, prefixes_of
from promoter.git.records import IndexEntry, TreeEntry, check_pathspec_paths

__all__ = ["first_gitlink_reason", "gitlinks_and_nested"]


def gitlinks_and_nested(
    layout: RepoLayout,
    paths: Sequence[str],
    *,
    index: dict[str, list[IndexEntry]] | None = None,
    head_tree: tuple[str | None, dict[str, TreeEntry | None]] | None = None,
) -> dict[str, str]:
    """Paths that sit on or under a gitlink or a nested repository, with the reason.

    For each path, the path itself and each of its leading directories is looked up as a
    gitlink (mode 160000) in the index and in HEAD's tree, and on disk as a directory
    holding a ``.git`` entry. The disk walk uses ``lstat`` and stops at the first
    component that is not a real directory; it never follows a symlink. Clean paths are
    absent from the result.

    A caller that has already read them passes ``index`` (``index_entries`` of every
    path and leading directory) and ``head_tree`` (HEAD's tree, ``None`` when unborn,
    with ``path_entries`` of the paths in it), so nothing is read twice.
    """
    wanted = list(dict.fromkeys(paths))
    check_pathspec_paths(wanted)
    prefixes = list(dict.fromkeys(p for path in wanted for p in prefixes_of(path)))
    if index is None:
        index = index_entries(layout, prefixes)
    in_index = {
        prefix
        for prefix in prefixes
        if any(entry.mode == GITLINK_MODE for entry in index.get(prefix, []))
    }
    if head_tree is None:
        head = head_commit(layout)
        tree = None if head is None else commit_tree(layout, head)
        head_tree = (tree, path_entries(layout, tree, wanted) if tree is not None else {})
    entries = head_tree[1]
    in_head = {
        prefix
        for prefix in prefixes
        if (entry := entries.get(prefix)) is not None and entry.mode == GITLINK_MODE
    }
    offending: dict[str, str] = {}
    seen: dict[str, str | None] = {}
    for path in wanted:
        reason = first_gitlink_reason(layout, prefixes_of(path), in_index, in_head, seen)
        if reason is not None:
            offending[path] = reason
    return offending


_GO_ON = ""  # a directory without a ``.git`` entry: look at the next component


def first_gitlink_reason(
    layout: RepoLayout,
    prefixes: list[str],
    in_index: set[str],
    in_head: set[str],
    seen: dict[str, str | None] | None = None,
) -> str | None:
    """Why a path with these ``prefixes`` (leading directories first, the path last) is
    on or under a gitlink or a nested repository; None when it is not.

    ``seen``: what the disk said of each prefix already looked at in the same pass (a
    caller checking many paths passes one dict to all of them), so each distinct
    directory costs its two ``lstat`` calls once per pass, not once per path below it.
    """
    for prefix in prefixes:
        if prefix in in_index:
            return f"{prefix!r} is a gitlink (submodule) in the index"
        if prefix in in_head:
            return f"{prefix!r} is a gitlink (submodule) in HEAD"
    for prefix in prefixes:
        if seen is None:
            found = _on_disk(layout, prefix)
        elif prefix in seen:
            found = seen[prefix]
        else:
            found = seen[prefix] = _on_disk(layout, prefix)
        if found != _GO_ON:
            return found
    return None


def _on_disk(layout: RepoLayout, prefix: str) -> str | None:
    """``_GO_ON`` for a real directory without ``.git``; None when ``prefix`` is not a
    directory (nothing below it can be a repository); else the reason."""
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
        return _GO_ON
    except OSError as exc:
        return f"{prefix!r} cannot be examined: {exc.strerror or exc}"
    return f"{prefix!r} is a nested repository (it holds a .git entry)"
