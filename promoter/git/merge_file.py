"""Three-way merge of one file's bytes with ``git merge-file -p``, in a scratch directory.

``merge_bytes(scratch, old, current, new)`` writes the three inputs as files of a fresh
directory below ``scratch`` (promoter's own state directory, never a worktree), runs
``git merge-file -p`` on them through the hermetic runner and answers the merged bytes
and the number of conflicts (0: clean). The labels of the conflict markers name the sides
for the person: ``yours`` (the current bytes), ``base`` and ``agent``. The directory and
its three files are removed afterwards: they are this call's own, made with
``os.mkdir`` (mode 0700) under a fresh name that names this process
(``promoter.store.state_temps.scratch_name``), never shared. A writer killed
mid-merge leaves the directory; the next start sweeps it (``state_temps.sweep``).

Fault point: ``merge_scratch_written`` (the three inputs are in the scratch directory,
git has not run).

git is told not to look for a repository above the scratch directory
(``GIT_CEILING_DIRECTORIES``), so no repository's attributes or merge drivers apply:
the merge is git's text merge of the exact bytes (no line-ending or encoding change).

Deliberately not here: deciding what is mergeable (binary, links, sizes: the caller's,
``promoter.engine.operation.merge``), reading the worktree, and storing anything.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from promoter import faults
from promoter.errors import GitError
from promoter.git.runner import run_git
from promoter.store.state_temps import scratch_name

__all__ = ["LABELS", "Merged", "merge_bytes"]

LABELS = ("yours", "base", "agent")
MERGE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Merged:
    data: bytes  # the merged bytes; with conflict markers when ``conflicts`` > 0
    conflicts: int

    @property
    def clean(self) -> bool:
        return self.conflicts == 0


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def merge_bytes(scratch: Path, old: bytes, current: bytes, new: bytes) -> Merged:
    """git's three-way merge of ``current`` and ``new`` over their base ``old``.

    Raises ``GitError`` when git fails (a negative status, or it cannot start).
    """
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    place = scratch / scratch_name()
    os.mkdir(place, 0o700)
    try:
        names = {"yours": current, "base": old, "agent": new}
        for name, data in names.items():
            _write(place / name, data)
        faults.point("merge_scratch_written")
        labels = [arg for label in LABELS for arg in ("-L", label)]
        result = run_git(
            ["merge-file", "-p", *labels, "yours", "base", "agent"],
            cwd=place,
            env={"GIT_CEILING_DIRECTORIES": str(place.parent)},
            timeout=MERGE_TIMEOUT,
            check=False,
        )
    finally:
        shutil.rmtree(place, ignore_errors=True)
    if result.returncode < 0 or result.returncode > 127:
        raise GitError(
            f"git merge-file failed with exit status {result.returncode}",
            returncode=result.returncode,
        )
    return Merged(result.stdout, result.returncode)
