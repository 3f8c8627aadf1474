"""What a post-promotion check changed in a repository (protocol: recovery#post-promotion-check).

This module owns the comparison of a repository before and after its check command:
``Baseline.take`` fingerprints the worktree (every entry but what is inside ``.git``
directories) and the git common directory (``promoter.fs.walk``), and lists the index
entries; ``Baseline.changes`` walks again and returns ``CheckChanges``: every path of
the worktree created, modified or removed outside the promotion's targets, and every
change in the git directory. The targets themselves are read back by
``promoter.engine.operation.outcome`` through the descriptor chain, by content.

Choices made here (docs/decisions/checks-compared-before-and-after.md):

- Ignored files count: a check that rewrites a user's ignored ``.env`` is as visible as
  one that edits a tracked file.
- In the git directory, loose objects and packs (``objects/`` except ``objects/info``)
  and ``promoter.lock`` are not compared: objects are inert until a ref names them,
  and refs, ``HEAD``, ``packed-refs``, ``config``, hooks, ``info/`` and alternates are
  compared. The index is compared by its entries (mode, oid, stage, path), so a
  stat-cache refresh is not a change and a ``git add`` is.

Deliberately not here: running the check (``promoter.engine.operation.check``), deciding what a
change means for the operation (``promoter.engine.operation.outcome``), and any write: nothing
here creates, changes or removes a file.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from promoter.domain.paths import wire_path
from promoter.fs.walk import RACY_WINDOW_NS, Difference, Tree, compare, hashed, walk
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.records import parse_ls_files_stage
from promoter.git.runner import run_git

__all__ = ["MAX_LISTED", "Baseline", "CheckChanges"]

MAX_LISTED = 1000  # per list in a report; the rest is counted in ``omitted``

_GIT_ENTRY = ".git"
_INDEX = "index"


def _text(path: str) -> str:
    """The wire form (protocol: documents#byte-paths) a report names a path by: exact, never
    lossy."""
    return wire_path(path)


def _prune_worktree(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1] == _GIT_ENTRY


def _prune_git(rel: str) -> bool:
    """Loose objects and packs: neither entered nor compared (``objects/info`` is)."""
    return rel.startswith("objects/") and not (
        rel == "objects/info" or rel.startswith("objects/info/")
    )


class Changed(TypedDict):
    """One path the check changed, as a report lists it."""

    path: str
    change: str
    fields: list[str]


class ChangesWire(TypedDict):
    """``CheckChanges.wire``: the lists of a report, and what each left out."""

    other_paths: list[Changed]
    git_paths: list[Changed]
    index_paths: list[str]
    omitted: NotRequired[dict[str, int]]


@dataclass(frozen=True)
class CheckChanges:
    """Paths the check changed: worktree paths outside the targets, and in git."""

    other_paths: tuple[Difference, ...]
    git_paths: tuple[Difference, ...]
    index_paths: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.other_paths) + len(self.git_paths) + len(self.index_paths)

    def wire(self) -> ChangesWire:
        """The lists for a report, each cut at ``MAX_LISTED`` (``omitted`` counts the rest)."""

        def listed(items: tuple[Difference, ...]) -> list[Changed]:
            return [
                {"path": _text(d.path), "change": d.change, "fields": list(d.fields)}
                for d in items[:MAX_LISTED]
            ]

        wire: ChangesWire = {
            "other_paths": listed(self.other_paths),
            "git_paths": listed(self.git_paths),
            "index_paths": [_text(p) for p in self.index_paths[:MAX_LISTED]],
        }
        omitted = {
            name: len(items) - MAX_LISTED
            for name, items in (
                ("other_paths", self.other_paths),
                ("git_paths", self.git_paths),
                ("index_paths", self.index_paths),
            )
            if len(items) > MAX_LISTED
        }
        if omitted:
            wire["omitted"] = omitted
        return wire

    def summary(self, limit: int) -> list[str]:
        """The first ``limit`` changed paths as a message names them (git under ``.git/``)."""
        names = [_text(d.path) for d in self.other_paths[:limit]]
        names += [".git/" + _text(d.path) for d in self.git_paths[:limit]]
        names += [f".git/index: {_text(p)}" for p in self.index_paths[:limit]]
        return names[:limit]


@dataclass(frozen=True)
class Baseline:
    """The repository as it was just before the check."""

    layout: RepoLayout
    worktree: Tree
    git: Tree
    index: dict[str, list[tuple[str, str, int]]]

    @classmethod
    def take(cls, layout: RepoLayout) -> Baseline:
        return cls(
            layout,
            walk(layout.worktree, prune=_prune_worktree),
            _walk_git(layout, hash_paths=(), first=True),
            _index(layout),
        )

    def changes(self, targets: Collection[str]) -> CheckChanges:
        """Walk again and compare; ``targets`` are left to the read-back."""
        excluded = set(targets)
        worktree = walk(
            self.layout.worktree,
            prune=_prune_worktree,
            hash_paths=hashed(self.worktree),
            racy_window_ns=None,
        )
        other = [d for d in compare(self.worktree, worktree) if d.path not in excluded]
        git = _walk_git(self.layout, hash_paths=hashed(self.git), first=False)
        index_name = _index_name(self.layout)
        git_paths = [d for d in compare(self.git, git) if d.path != index_name]
        index = _index(self.layout)
        index_paths = sorted(
            (p for p in self.index.keys() | index.keys() if self.index.get(p) != index.get(p)),
            key=os.fsencode,
        )
        return CheckChanges(tuple(other), tuple(git_paths), tuple(index_paths))


def _index_name(layout: RepoLayout) -> str:
    """The index file's path relative to the common directory (as the git walk keys it)."""
    return os.path.relpath(os.path.join(layout.git_dir, _INDEX), layout.common_dir)


def _walk_git(layout: RepoLayout, *, hash_paths: Collection[str], first: bool) -> Tree:
    """The common directory, plus the per-worktree git directory if it lies elsewhere."""
    window = RACY_WINDOW_NS if first else None
    common = walk(layout.common_dir, prune=_prune_git, hash_paths=hash_paths, racy_window_ns=window)
    tree = {
        path: entry
        for path, entry in common.items()
        if path != "promoter.lock" and not _prune_git(path)
    }
    inside = os.path.commonpath([layout.git_dir, layout.common_dir]) == layout.common_dir
    if not inside:
        prefix = os.path.relpath(layout.git_dir, layout.common_dir) + "/"
        own = {p[len(prefix) :] for p in hash_paths if p.startswith(prefix)}
        for path, entry in walk(layout.git_dir, hash_paths=own, racy_window_ns=window).items():
            tree[prefix + path] = entry
    return tree


def _index(layout: RepoLayout) -> dict[str, list[tuple[str, str, int]]]:
    """Every index entry by path: (mode, oid, stage), stages in order."""
    result = run_git(
        ["ls-files", "-s", "-z", "--full-name"], cwd=layout.worktree, env=repo_env(layout)
    )
    entries: dict[str, list[tuple[str, str, int]]] = {}
    for path, entry in parse_ls_files_stage(result.stdout, debug=False):
        entries.setdefault(path, []).append((entry.mode, entry.oid, entry.stage))
    return entries
