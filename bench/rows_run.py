"""Figures for the sandbox of ``promoter run``: what making its repository costs.

For a generated repository of N tracked files (100 per directory, 40-byte files, one
commit written with ``git fast-import`` and checked out), this times, each several times
and reports the median in seconds:

- ``clone_local``: ``git clone --local`` (objects hardlinked to the source: shared);
- ``clone_copy``: ``git clone --local --no-hardlinks --dissociate`` (what ``promoter run``
  does: objects copied, no ``objects/info/alternates``);
- ``worktree_add``: ``git worktree add --detach`` (shares the whole ``.git``);
- ``objects_bytes``: the size of the source's ``objects`` directory.

It measures set-up only (no daemon, no command); each sandbox is deleted untimed.
Not part of the default speed table. Run: ``python -m bench.rows_run [--files N ...]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

_GIT = ["git", "-c", "protocol.file.allow=always", "-c", "gc.auto=0"]


def _git(args: list[str], cwd: Path | None = None, data: bytes | None = None) -> None:
    subprocess.run([*_GIT, *args], cwd=cwd, input=data, check=True, capture_output=True)


def make_repo(root: Path, files: int) -> Path:
    """A repository of ``files`` tracked 40-byte files, committed and checked out."""
    repo = root / f"src{files}"
    _git(["init", "--quiet", "-b", "main", str(repo)])
    stream = bytearray(b"commit refs/heads/main\ncommitter b <b@x> 0 +0000\ndata 1\nx\n")
    for n in range(files):
        body = f"file {n:07d} of the generated repository\n".encode()[:40].ljust(40, b".")
        stream += f"M 100644 inline g{n // 100:05d}/f{n:07d}.txt\ndata {len(body)}\n".encode()
        stream += body + b"\n"
    _git(["fast-import", "--quiet"], cwd=repo, data=bytes(stream))
    _git(["checkout", "--quiet", "-f", "main"], cwd=repo)
    return repo


def _timed(args: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    _git(args, cwd=cwd)
    return time.perf_counter() - start


def measure(repo: Path, root: Path, rounds: int) -> dict[str, float]:
    copy = ["--local", "--no-hardlinks", "--dissociate"]
    ways: dict[str, tuple[list[str], Path | None]] = {
        "clone_local": (["clone", "--quiet", "--local", str(repo)], None),
        "clone_copy": (["clone", "--quiet", *copy, str(repo)], None),
        "worktree_add": (["worktree", "add", "--quiet", "--detach"], repo),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for n in range(rounds):
        for name, (args, cwd) in ways.items():
            target = root / f"{name}{n}"
            times[name].append(_timed([*args, str(target)], cwd))
            shutil.rmtree(target)
            if name == "worktree_add":
                _git(["worktree", "prune"], cwd=repo)
    result = {name: statistics.median(values) for name, values in times.items()}
    objects = repo / ".git" / "objects"
    result["objects_bytes"] = float(
        sum(p.stat().st_size for p in objects.rglob("*") if p.is_file())
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-run-") as temp:
        root = Path(temp)
        for files in options.files:
            repo = make_repo(root, files)
            _git(["gc", "--quiet"], cwd=repo)  # one pack, as a cloned repository has
            figures = measure(repo, root, options.rounds)
            print(
                f"{files} files: "
                + ", ".join(
                    f"{k} {v:.0f} B" if k == "objects_bytes" else f"{k} {v:.3f} s"
                    for k, v in figures.items()
                ),
                flush=True,
            )
            shutil.rmtree(repo)
    os.sync()


if __name__ == "__main__":
    main()
