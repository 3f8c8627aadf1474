"""``promoter.domain.resolve`` against the kernel: random small trees built with ``os.symlink``.

Hypothesis draws a worktree of a few directories and files and up to eight links whose
targets are random paths of names, ``..``, ``.`` and ``.git``; the tree is built for real
in a temporary directory and every link is resolved by ``os.path.realpath`` (which asks
the kernel about each component, as a program following the link would). What the pure
resolver says must agree: a link it calls inside really resolves to the same place inside
the worktree, outside ``.git``; a link it calls outside really resolves outside. A loop
or a ``.git`` on the way may only ever be refused.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain.resolve import final_tree_problems, resolve

DIRS = ("a", "b", "a/a", ".git")
FILES = ("c", "a/c", ".git/config")
SLOTS = ("l", "m", "n", "a/l", "a/m", "a/a/l", "b/l", "b/m")
PARTS = ("a", "b", "c", "l", "m", "n", "..", ".", ".git", "")

targets = (
    st.lists(st.sampled_from(PARTS), min_size=1, max_size=5)
    .map(lambda parts: "/".join(parts).encode())
    .filter(lambda t: t != b"" and not t.startswith(b"/"))
)
trees = st.dictionaries(st.sampled_from(SLOTS), targets, min_size=1, max_size=8)


def build(root: Path, links: dict[str, bytes]) -> None:
    for rel in DIRS:
        (root / rel).mkdir(parents=True)
    for rel in FILES:
        (root / rel).write_bytes(b"x\n")
    for rel, target in links.items():
        os.symlink(target, root / rel)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_the_resolver_agrees_with_the_kernel_on_random_trees(links: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "outer" / "wt"  # nothing outside is named like anything inside
        root.mkdir(parents=True)
        build(root, links)
        real_root = os.path.realpath(root)
        for path in links:
            found = resolve(path, links.get)
            real = os.path.realpath(root / path)
            inside = real == real_root or real.startswith(real_root + os.sep)
            if found.inside:
                assert inside, (path, links, real)
                rel = os.path.relpath(real, real_root)
                assert (rel if rel != "." else "") == found.resolved, (path, links, real)
                assert ".git" not in rel.split(os.sep), (path, links, real)
            elif "outside" in str(found.problem):
                assert not inside, (path, links, real, found.problem)
            else:  # a loop or .git on the way: only ever refused, never let through
                assert "more than" in str(found.problem) or ".git" in str(found.problem)


@settings(max_examples=200, deadline=None)
@given(trees, st.sets(st.sampled_from(SLOTS), min_size=1, max_size=3))
def test_a_promotion_is_refused_whenever_a_new_or_reached_link_escapes(
    links: dict[str, bytes], new: set[str]
) -> None:
    """Split the drawn links into the worktree's and the bundle's: the final tree is the
    same, so every bundle link that does not resolve inside must be reported, and every
    existing one that follows a bundle link and escapes too."""
    changes: dict[str, bytes | None] = {p: links.get(p) for p in new}
    existing = {p: t for p, t in links.items() if p not in new}
    problems = {path for path, _ in final_tree_problems(changes, existing, existing.get)}
    for path in links:
        found = resolve(path, links.get)
        created = {p for p, t in changes.items() if t is not None}
        must = path in created or bool(created.intersection(found.followed))
        assert (path in problems) == (must and not found.inside), (path, links, new)
