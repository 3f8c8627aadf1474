"""Symlinks by resolution (protocol: bundles#symlinks-by-resolution): where a link leads in the tree
a promotion leaves.

Under a grant's ``symlinks: inside`` a link must not only read as inside the worktree
(``links.target_problem``, lexical and per link): resolved against the worktree as it
will be after the promotion, through the links it meets on the way, it must stay inside
and never enter ``.git``. This module resolves one link the way the kernel does and
judges the result:

- the walk starts in the link's own directory; a component that is a link in the final
  tree is replaced by that link's target text (resolved from the directory holding it),
  so ``..`` after a link goes up from where the link leads, not lexically;
- a component that is not a link (a directory, a file, or nothing) is entered as if it
  were a directory. The kernel would stop at a file or a missing name (``ENOTDIR``,
  ``ENOENT``); continuing lexically is what ``os.path.realpath`` does and never judges
  a link safer than the kernel would, only, at worst, more strictly (a link whose
  resolution the kernel would refuse may be refused here for where it *would* lead);
- going above the worktree's root at any step, an absolute target met on the way, a
  component equal to ``.git`` under case-folding at any step, or more than
  ``MAX_HOPS`` links followed (the kernel's ``ELOOP`` bound) is a refusal.

``final_tree_problems`` applies this to a promotion: every link the bundle creates or
changes, and every link already in the worktree whose resolution passes through one of
them, must resolve inside.

Pure: the links of the final tree are given as a look-up (path -> target text or None);
which paths are directories or files is not needed (see above). Gathering the look-up
from the base tree or the disk is ``promoter.engine.verify.link_resolution``'s job.
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
