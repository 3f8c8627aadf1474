"""Where a worktree and its git directories are, and the identity derived from them.

This module owns ``discover`` (which paths are accepted as a repository promoter may
guard, and why others are refused; one ``git rev-parse`` for a worktree's top level),
the ``RepoLayout`` it returns, the repository identity (protocol: promotion#repository-identity),
and the environment that pins later git commands to a layout instead of letting git
rediscover it.

It deliberately reads nothing else from the repository: HEAD is ``head.py``'s, index,
trees and blobs are ``readback.py``'s. Discovery runs ``git rev-parse`` only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from promoter.domain.record_type import record
from promoter.errors import GitError, RepositoryInvalid
from promoter.git.runner import GitResult, run_git, stderr_tail

__all__ = ["RepoLayout", "discover", "repo_env", "repository_identity"]


@record(frozen=True)
class RepoLayout:
    """Where a non-bare SHA-1 worktree and its git directories are (all realpaths).

    ``git_dir`` is the per-worktree git directory (``.git`` or, for a linked worktree,
    ``.git/worktrees/NAME`` of the main one); ``common_dir`` holds objects and refs.
    """

    worktree: str
    git_dir: str
    common_dir: str
    object_format: str


def discover(path: str | Path) -> RepoLayout:
    """The layout of the worktree whose top level is ``path``.

    ``path`` must be the top level itself (after resolving symlinks): a subdirectory is
    refused rather than widened to its worktree, so a configured path never silently
    guards more than was named. Refused with ``RepositoryInvalid``: a path that is not
    in a git worktree, a bare repository or a git directory, a subdirectory, and
    SHA-256 repositories.
    """
    requested = os.path.realpath(path)
    if not os.path.isdir(requested):
        raise RepositoryInvalid(f"{requested} is not a directory", path=str(path))
    # In a worktree one command answers everything; where git refuses --show-toplevel
    # (a bare repository, a git directory) the probe without it names the reason.
    both = run_git([*_PROBE, "--show-toplevel"], cwd=requested, check=False)
    lines = both.stdout.decode("utf-8", "surrogateescape").split("\n")
    shown_top: str | None = lines[5] if len(lines) == 7 else None
    if both.returncode != 0 or shown_top is None or lines[6] != "":
        probe = _discovery_git(requested, _PROBE)
        lines = probe.stdout.decode("utf-8", "surrogateescape").split("\n")
        shown_top = None
        if len(lines) != 6 or lines[5] != "":
            raise GitError("unexpected output from git rev-parse", stdout_lines=len(lines))
    is_bare, inside, object_format, git_dir, common_dir = lines[:5]
    if is_bare == "true":
        raise RepositoryInvalid(f"{requested} is a bare repository; a worktree is required")
    if inside != "true":
        raise RepositoryInvalid(f"{requested} is not inside a git worktree (a .git directory?)")
    if object_format != "sha1":
        raise RepositoryInvalid(
            f"{requested} uses the {object_format} object format; "
            "SHA-256 repositories are not supported in v1",
            object_format=object_format,
        )
    if shown_top is None:
        top = _discovery_git(requested, ["rev-parse", "--show-toplevel"])
        shown_top = top.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
    toplevel = os.path.realpath(shown_top)
    if toplevel != requested:
        raise RepositoryInvalid(
            f"{requested} is not the top level of its worktree ({toplevel}); "
            "configure the top level",
            toplevel=toplevel,
        )
    return RepoLayout(
        worktree=toplevel,
        git_dir=os.path.realpath(git_dir),
        common_dir=os.path.realpath(common_dir),
        object_format=object_format,
    )


_PROBE = [
    "rev-parse",
    "--is-bare-repository",
    "--is-inside-work-tree",
    "--show-object-format",
    "--path-format=absolute",
    "--git-dir",
    "--git-common-dir",
]


def _discovery_git(cwd: str, args: list[str]) -> GitResult:
    """Run a discovery command; a refusal by git is ``RepositoryInvalid``, not a crash."""
    result = run_git(args, cwd=cwd, check=False)
    if result.returncode != 0:
        reason = stderr_tail(result.stderr) or f"exit status {result.returncode}"
        raise RepositoryInvalid(f"{cwd} is not a usable git worktree: {reason}", path=cwd)
    return result


def repository_identity(layout: RepoLayout) -> str:
    """``repo_`` + 32 hex of sha256(realpath(worktree) NUL realpath(common dir))."""
    material = (
        os.fsencode(os.path.realpath(layout.worktree))
        + b"\0"
        + os.fsencode(os.path.realpath(layout.common_dir))
    )
    return "repo_" + hashlib.sha256(material).hexdigest()[:32]


def repo_env(layout: RepoLayout) -> dict[str, str]:
    """The variables that pin git to this layout instead of rediscovering it."""
    return {"GIT_DIR": layout.git_dir, "GIT_WORK_TREE": layout.worktree}
