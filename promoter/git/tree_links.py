"""Every symlink of a git tree with its target text, read-only.

``tree_links(layout, tree)``: one ``git ls-tree -r`` of the tree (mode ``120000``
entries kept) and one ``git cat-file --batch`` for their blobs. Used to resolve the
links a bundle creates against the base tree's links at verification
(``promoter.engine.link_resolution``); the caller remembers the answer per tree, since
git objects never change.

Deliberately not here: what a link's target means (``promoter.domain.resolve``) and the
links on disk (``promoter.fs.link_text``).
"""

from __future__ import annotations

from promoter.domain.state import SYMLINK_MODE
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.objects import CatFile
from promoter.git.readback import list_tree_files

__all__ = ["tree_links"]


def tree_links(layout: RepoLayout, tree: str) -> dict[str, bytes]:
    """Path -> target text of every symlink (mode 120000) in ``tree``, recursively."""
    oids = {
        path: entry.oid
        for path, entry in list_tree_files(layout, tree).items()
        if entry.mode == SYMLINK_MODE and entry.type == "blob"
    }
    if not oids:
        return {}
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        return {path: cat.read_blob(oid) for path, oid in sorted(oids.items())}
