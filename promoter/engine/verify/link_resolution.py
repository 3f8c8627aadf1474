"""Symlinks by resolution at verification, preflight and apply.

This module gathers what ``promoter.domain.resolve`` resolves against: the base tree's
links (``promoter.git.tree_links``, remembered per tree in ``Services.tree_links``) with
the bundle's changes at verification, the disk as it is now (``promoter.fs.link_text``)
at preflight and apply, and raises ``SymlinkPolicy`` for a bundle that leads outside
(protocol: bundles#symlinks-by-resolution, bundles#where-links-are-read).

Not here: the judgement (``promoter.domain.resolve``), the lexical per-link rule
(``promoter.domain.links``).
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
    from promoter.engine.ports import LinkChecks
    from promoter.engine.repos import Repository
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
    services: LinkChecks,
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
