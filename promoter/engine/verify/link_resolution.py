"""Symlinks by resolution at verification, preflight and apply
(protocol: bundles#symlinks-by-resolution).

Under ``symlinks: inside`` a bundle whose links, resolved in the tree the promotion
would leave, lead outside the worktree or into ``.git`` is refused whole with
``symlink_policy`` (``SymlinkPolicy``). The judgement is ``promoter.domain.resolve``'s;
this module gathers what it resolves against:

- at verification, the base tree's links (``promoter.git.tree_links``: one ``ls-tree``
  and one ``cat-file`` per tree, remembered by tree id in ``Services.tree_links``),
  with the bundle's changes over them;
- at preflight and apply (after the read-back, under the lock for apply), the disk as
  it is now: every link the resolution meets is read by descriptor chain, never
  followed (``promoter.fs.link_text``), each path once; the existing links checked for
  passing through the bundle's are the base tree's links (the read-back has just
  found HEAD's tree to be the base tree), each read again from the disk.

Nothing is read when the grant is not ``inside`` or the bundle creates no link: only a
new link can make a resolution change for the worse (a removed link makes the kernel
stop where it was followed). The cost is one tree listing per base tree and a handful of
``readlinkat`` per link, never a walk of the worktree.

Deliberately not here: the lexical per-link rule (``promoter.domain.links``), and
links the person creates outside the base tree that no link of the bundle passes
through (they are the person's own; the bundle changes nothing about them). A residual
risk: a link the person makes between the read-back and the writes is not seen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from promoter.domain import links
from promoter.domain.models import GrantV1, PatchBundleV1
from promoter.domain.resolve import final_tree_problems
from promoter.errors import SymlinkPolicy
from promoter.fs.link_text import read_link_text
from promoter.git.tree_links import tree_links

if TYPE_CHECKING:
    from promoter.engine.repos import Repository
    from promoter.engine.services import Services
    from promoter.fs.root import Root
    from promoter.git.layout import RepoLayout

__all__ = [
    "bundle_changes",
    "cached_tree_links",
    "phrase",
    "refuse_escapes_on_disk",
    "resolution_problems",
]

_TREES_REMEMBERED = 64


def bundle_changes(
    bundle: PatchBundleV1, read: Callable[[str], bytes]
) -> dict[str, bytes | None] | None:
    """Every changed path with its new link target (None: not a link after the change),
    or None when no change creates a link (then nothing can resolve worse than before).
    ``read``: a blob's bytes by sha256."""
    if not any(links.is_link(c.new.mode) and c.new.sha256 for c in bundle.changes):
        return None
    return {
        c.path: read(c.new.sha256) if links.is_link(c.new.mode) and c.new.sha256 else None
        for c in bundle.changes
    }


def resolution_problems(
    changes: Mapping[str, bytes | None], existing: Mapping[str, bytes]
) -> list[tuple[str, str]]:
    """``final_tree_problems`` against a fixed map of the existing links (the base tree's)."""
    return final_tree_problems(changes, existing.keys(), existing.get)


def cached_tree_links(
    cache: dict[str, dict[str, bytes]], layout: RepoLayout, tree: str
) -> dict[str, bytes]:
    """``tree_links`` of ``tree``, remembered by the tree's id (its content's hash)."""
    found = cache.get(tree)
    if found is None:
        found = tree_links(layout, tree)
        if len(cache) >= _TREES_REMEMBERED:
            cache.clear()
        cache[tree] = found
    return found


def refuse_escapes_on_disk(
    services: Services,
    repository: Repository,
    root: Root,
    grant: GrantV1,
    bundle: PatchBundleV1,
) -> None:
    """Raise ``SymlinkPolicy`` when the bundle's links, resolved against the worktree on
    disk now, break ``symlinks: inside``; a no-op under the other policies."""
    if grant.symlinks != "inside":
        return
    changes = bundle_changes(bundle, services.blobs.read)
    if changes is None:
        return
    base = cached_tree_links(services.tree_links, repository.layout, grant.base_tree)
    seen: dict[str, bytes | None] = {}

    def on_disk(path: str) -> bytes | None:
        if path not in seen:
            seen[path] = read_link_text(root, path)
        return seen[path]

    problems = final_tree_problems(changes, base.keys(), on_disk)
    if problems:
        raise SymlinkPolicy(
            "a link would resolve outside the worktree or into .git (symlinks: inside): "
            + phrase(problems),
            paths=[path for path, _ in problems],
        )


def phrase(problems: list[tuple[str, str]], limit: int = 5) -> str:
    """``path: why; ...`` of the first ``limit`` problems."""
    head = "; ".join(f"{path}: {why}" for path, why in problems[:limit])
    more = len(problems) - limit
    return head + (f"; and {more} more" if more > 0 else "")
