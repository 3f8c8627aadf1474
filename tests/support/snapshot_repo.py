"""A small worktree for snapshot tests: tracked files, ignore rules, untracked and ignored files.

Shared by the snapshot capture tests (``tests/integration/test_snapshot_paths.py`` and
``test_snapshot_watch.py``); it does not capture anything itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tests.gitutil import git

TRACKED = {
    "app.py": b"print('v1')\n",
    ".gitignore": b"*.log\nbuild/\n",
    "sub/.gitignore": b"local.txt\n",
    "sub/kept.txt": b"kept\n",
    "deep/a/b.txt": b"deep\n",
    "tool.sh": b"#!/bin/sh\n",
}


def snapshot_worktree(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """``TRACKED`` (plus ``extra``) committed at ``path``, an untracked and an ignored file."""
    for rel, data in {**TRACKED, **(extra or {})}.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    git(path.parent, "init", "-q", "-b", "main", str(path))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    (path / "untracked.txt").write_bytes(b"not in git, in the snapshot\n")
    (path / "noise.log").write_bytes(b"ignored\n")
    return path


Change = Callable[[Path], object]


def write(rel: str, data: bytes, mode: int = 0o644) -> Change:
    """A change that writes ``data`` at ``rel`` (parents made) with ``mode``."""

    def change(repo: Path) -> None:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
        os.chmod(repo / rel, mode)

    return change


def delete(rel: str) -> Change:
    """A change that unlinks ``rel``."""
    return lambda repo: (repo / rel).unlink()


def link(rel: str, target: str) -> Change:
    """A change that makes ``rel`` a symbolic link to ``target``."""
    return lambda repo: (repo / rel).symlink_to(target)
