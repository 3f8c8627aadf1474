"""Symlinks by resolution: where a link leads in the tree a promotion leaves.

Under a grant's ``symlinks: inside``, ``final_tree_problems`` resolves every link the
bundle creates or changes, and every existing link that passes through one, the way the
kernel does, and judges the result (protocol: bundles#symlinks-by-resolution,
bundles#how-a-link-resolves). Pure: the final tree's links are given as a look-up (path ->
target text or None).

Not here: the lexical rule of one link (``links.target_problem``), gathering the look-up
from the base tree or the disk (``promoter.engine.verify.link_resolution``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MAX_HOPS", "LinkLookup", "Resolution", "final_tree_problems", "overlay", "resolve"]

MAX_HOPS = 40  # the kernel's MAXSYMLINKS

# the final tree's link at a worktree-relative path: its target text, or None (no link)
LinkLookup = Callable[[str], bytes | None]


@dataclass(frozen=True)
class Resolution:
    """Where a link leads: ``resolved`` (worktree-relative, ``""`` the root) when inside,
    else ``problem`` says why not. ``followed``: every link met on the way, in order
    (the resolved link itself first)."""

    path: str
    resolved: str | None
    problem: str | None
    followed: tuple[str, ...]

    @property
    def inside(self) -> bool:
        return self.problem is None


def _parts(target: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in target.split(b"/")]


def resolve(path: str, lookup: LinkLookup) -> Resolution:
    """Resolve the link at ``path`` (its target read through ``lookup``) in the final tree."""
    followed: list[str] = []

    def refused(problem: str) -> Resolution:
        return Resolution(path, None, problem, tuple(followed))

    first = lookup(path)
    if first is None:
        return Resolution(path, path, None, ())
    where = path.split("/")[:-1]  # the directory holding the link: real directories
    followed.append(path)
    pending = _parts(first)
    if first.startswith(b"/"):
        return refused(f"{path} is absolute")
    pending.reverse()  # a stack: the next component is last
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not where:
                return refused("resolves outside the worktree" + _through(followed))
            where.pop()
            continue
        if part.casefold() == ".git":
            return refused("resolves into .git" + _through(followed))
        candidate = "/".join([*where, part])
        target = lookup(candidate)
        if target is None:
            where.append(part)
            continue
        followed.append(candidate)
        if len(followed) > MAX_HOPS:
            return refused(f"follows more than {MAX_HOPS} links (a loop)")
        if target.startswith(b"/"):
            return refused(f"reaches {candidate}, an absolute link")
        pending.extend(reversed(_parts(target)))  # resolved from the link's own directory
    return Resolution(path, "/".join(where), None, tuple(followed))


def _through(followed: list[str]) -> str:
    return f" through {', '.join(followed[1:])}" if len(followed) > 1 else ""


def overlay(changes: Mapping[str, bytes | None], existing: LinkLookup) -> LinkLookup:
    """The final tree's links: the bundle's changed paths (their new link target, or None
    for a file or a deletion) over the worktree's existing links."""

    def lookup(path: str) -> bytes | None:
        if path in changes:
            return changes[path]
        return existing(path)

    return lookup


def final_tree_problems(
    changes: Mapping[str, bytes | None], existing_links: Iterable[str], existing: LinkLookup
) -> list[tuple[str, str]]:
    """Why the tree a promotion leaves breaks ``symlinks: inside``, as ``(link path, why)``;
    empty when it does not.

    ``changes``: every path the bundle changes, with its new link target (None when the
    new state is not a link). ``existing_links``: paths of links the worktree holds now
    (those the bundle changes are skipped); ``existing``: their targets and any other
    path's, now. Checked: each new link; each existing link whose resolution follows a
    new link (an existing link that reaches none of them resolves as it did before, and
    is the person's, not the bundle's).
    """
    final = overlay(changes, existing)
    created = {path for path, target in changes.items() if target is not None}
    problems: list[tuple[str, str]] = []
    for path in sorted(created):
        found = resolve(path, final)
        if not found.inside:
            problems.append((path, str(found.problem)))
    for path in sorted(set(existing_links) - changes.keys()):
        found = resolve(path, final)
        if not found.inside and created.intersection(found.followed):
            new = next(p for p in found.followed if p in created)
            problems.append((path, f"already in the worktree, through {new}, {found.problem}"))
    return problems
