"""Every symlink of a git tree with its target text, read-only.

``tree_links(layout, tree)``: one ``git ls-tree -r`` of the tree and one ``git
cat-file --batch`` for the blobs of its links. Only the records of mode ``120000`` are
parsed (picked out of the raw output by their prefix): on a tree of 100 000 files,
parsing every record would cost seconds, picking costs milliseconds. Used to resolve the
links a bundle creates against the base tree's links at verification
(``promoter.engine.verify.link_resolution``); the caller remembers the answer per tree, since
git objects never change.

Deliberately not here: what a link's target means (``promoter.domain.resolve``) and the
links on disk (``promoter.fs.link_text``).
"""

from __future__ import annotations

from promoter.domain.path_state import SYMLINK_MODE
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.objects import CatFile
from promoter.git.records import parse_ls_tree, require_oid
from promoter.git.runner import run_git

_LINK_RECORD = SYMLINK_MODE.encode() + b" "

__all__ = ["tree_links"]


def tree_links(layout: RepoLayout, tree: str) -> dict[str, bytes]:
    """Path -> target text of every symlink (mode 120000) in ``tree``, recursively."""
    require_oid(tree, "tree")
    listed = run_git(
        ["ls-tree", "-r", "-z", "--full-tree", tree], cwd=layout.worktree, env=repo_env(layout)
    ).stdout
    picked = b"".join(r + b"\0" for r in listed.split(b"\0") if r.startswith(_LINK_RECORD))
    oids = {path: entry.oid for path, entry in parse_ls_tree(picked) if entry.type == "blob"}
    if not oids:
        return {}
    with CatFile(cwd=layout.worktree, env=repo_env(layout)) as cat:
        return {path: cat.read_blob(oid) for path, oid in sorted(oids.items())}
