"""What changed between two snapshot trees, and a git command's output read up to a cap.

``SnapshotDiff`` holds the raw entries and a unified diff cut at a byte limit, and its
wire form; ``bounded_stdout`` runs a read-only git command and keeps at most
``limit + 1`` bytes of its output (then kills it), so a huge diff costs no more memory
than the cap. Deliberately not here: which trees are compared and the repository they
are read from (``shadow.py``).
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from typing import TypedDict

from promoter.domain.paths import wire_path
from promoter.errors import GitError
from promoter.git.records import DiffEntry
from promoter.git.runner import git_argv, popen_git, stderr_tail
from promoter.git.worktree_tree import NO_CONVERSION

__all__ = ["DIFF_FLAGS", "DIFF_LIMIT", "SnapshotDiff", "bounded_stdout"]

DIFF_LIMIT = 1 << 20
DIFF_FLAGS = ("-r", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color")


class TreeDiffWire(TypedDict):
    """``SnapshotDiff.wire``."""

    added: list[str]
    modified: list[str]
    deleted: list[str]
    unified_diff: str
    truncated: bool


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed from one tree to another; ``unified_diff`` is cut at ``limit`` bytes."""

    entries: tuple[DiffEntry, ...]
    unified_diff: str
    truncated: bool

    def wire(self) -> TreeDiffWire:
        """``{added, modified, deleted, unified_diff, truncated}`` (T counts as modified).

        Path bytes that are not UTF-8 are shown as ``\\xNN`` (``wire_path``); the unified
        diff shows them as U+FFFD.
        """

        def paths(*statuses: str) -> list[str]:
            return [wire_path(e.path) for e in self.entries if e.status in statuses]

        return {
            "added": paths("A"),
            "modified": paths("M", "T"),
            "deleted": paths("D"),
            "unified_diff": self.unified_diff,
            "truncated": self.truncated,
        }


def bounded_stdout(
    args: list[str], *, cwd: str, env: dict[str, str], timeout: float, limit: int
) -> tuple[bytes, bool]:
    """stdout of a read-only command, at most ``limit + 1`` bytes kept (then killed)."""
    argv = git_argv([*NO_CONVERSION, *args])
    with tempfile.TemporaryFile() as err:
        try:
            proc = popen_git([*NO_CONVERSION, *args], cwd=cwd, env=env, stderr=err)
        except OSError as exc:
            raise GitError(f"git could not be started: {exc.strerror or exc}") from exc
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            data = proc.stdout.read(limit + 1)
            truncated = len(data) > limit
            if truncated:
                proc.kill()
            proc.stdout.close()
            returncode = proc.wait()
        finally:
            timer.cancel()
        if not truncated and returncode != 0:
            err.seek(0)
            raise GitError(
                "git diff-tree failed",
                argv=argv,
                returncode=returncode,
                stderr=stderr_tail(err.read()),
            )
    return data, truncated
