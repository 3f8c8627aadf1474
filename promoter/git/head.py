"""HEAD and commits of a git repository, read only.

Symbolic HEAD, HEAD's commit and its tree, whether an id names a commit, and a commit's
tree. Every git command here only reads (plumbing, ``GIT_OPTIONAL_LOCKS=0`` through
``repo_env``, the repository pinned once discovered).

``read_head`` reads symbolic HEAD, HEAD's commit and its tree from one
``git for-each-ref`` of the branch HEAD is expected on (``%(HEAD)`` marks the ref HEAD
resolves to, and the ref's object type and tree come with it); any other case
(detached, unborn, another branch, not a commit) is answered by ``symbolic_head``,
``head_commit`` and ``commit_tree`` exactly as before.

Deliberately not here: the index, trees below the root and blobs (``readback.py``),
deciding what HEAD means for a promotion (the engine compares).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from promoter.errors import GitError
from promoter.git.layout import RepoLayout, repo_env
from promoter.git.records import require_oid
from promoter.git.runner import GitResult, run_git, stderr_tail

__all__ = [
    "HeadState",
    "commit_exists",
    "commit_tree",
    "head_commit",
    "read_head",
    "symbolic_head",
]


def _git(layout: RepoLayout, args: list[str], *, check: bool = True) -> GitResult:
    return run_git(args, cwd=layout.worktree, env=repo_env(layout), check=check)


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


@dataclass(frozen=True)
class HeadState:
    """Symbolic HEAD (``None``: detached), HEAD's commit (``None``: unborn) and its tree."""

    branch: str | None
    commit: str | None
    tree: str | None


def read_head(layout: RepoLayout, expected_branch: str | None = None) -> HeadState:
    """``symbolic_head``, ``head_commit`` and ``commit_tree`` of HEAD, read together.

    When HEAD is ``expected_branch`` and that ref points at a commit, one
    ``git for-each-ref`` answers all three; otherwise (or when it fails) they are read
    one by one, so the answers are always those of the three functions.
    """
    if expected_branch is not None and expected_branch.startswith("refs/"):
        fast = _head_from_ref(layout, expected_branch)
        if fast is not None:
            return fast
    branch = symbolic_head(layout)
    commit = head_commit(layout)
    tree = commit_tree(layout, commit) if commit else None
    return HeadState(branch, commit, tree)


def _head_from_ref(layout: RepoLayout, branch: str) -> HeadState | None:
    fields = "%(HEAD)%00%(refname)%00%(objecttype)%00%(objectname)%00%(tree)"
    result = _git(layout, ["for-each-ref", f"--format={fields}", "--", branch], check=False)
    if result.returncode != 0:
        return None
    for line in result.stdout.split(b"\n"):
        parts = line.split(b"\0")
        if len(parts) != 5 or os.fsdecode(parts[1]) != branch:
            continue
        marker, _, kind, commit, tree = (part.decode("ascii", "replace") for part in parts)
        if marker != "*" or kind != "commit":
            return None
        return HeadState(branch, require_oid(commit, "HEAD"), require_oid(tree, "tree"))
    return None


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
    """The tree of commit ``commit``, or ``None`` if there is no such commit.

    One ``git cat-file --batch-check`` peels ``commit`` to a commit and to a tree.
    """
    require_oid(commit, "commit")
    request = f"{commit}^{{commit}}\n{commit}^{{tree}}\n".encode("ascii")
    result = run_git(
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        cwd=layout.worktree,
        env=repo_env(layout),
        input=request,
    )
    lines = result.stdout.decode("ascii", "replace").split("\n")
    if len(lines) != 3 or lines[2]:
        raise GitError("unexpected output from git cat-file --batch-check", commit=commit)
    if lines[0] != f"{commit} commit":
        return None
    oid, _, kind = lines[1].partition(" ")
    if kind != "tree":
        raise GitError(f"commit {commit} has no readable tree", commit=commit)
    return require_oid(oid, "tree")
