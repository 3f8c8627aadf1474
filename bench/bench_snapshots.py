"""The snapshot benchmark: is a second capture O(changed files)?

A worktree of ``files`` small files (a few dozen bytes each, about 25 per directory, two
levels deep) committed in its own git repository. Through the engine (repository lock,
shadow repository, database row) it times:

- ``first_capture_s``: the first capture (an empty shadow index: every file is hashed
  and written into the shadow's object store);
- ``second_capture_s``: one file changed, captured again (the persistent shadow index's
  stat cache: one blob hashed, every other entry only ``lstat``-ed);
- ``unchanged_capture_s``: nothing changed, captured again;
- ``restore_one_file_s``: restoring the first snapshot (one file back), for scale.

The goal: ``second_capture_s / first_capture_s <= 0.1`` (``ratio``). Run it with
``python -m bench.bench_snapshots`` (or ``python -m bench.run``); it reports, it does
not gate. The user's ``.git`` is checked to be unchanged by the captures.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.variables import stop_on_unknown
from promoter.config import RepositoryConfig, load_settings
from promoter.engine.operation import restore as snapshot_restore
from promoter.engine.services import build_services
from promoter.engine.snapshots import capture as snapshots

GOAL = 0.1
_GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent-promoter-bench-home",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def _git(repo: Path, *args: str) -> None:
    # no automatic gc: a background repack would change .git while it is being compared
    command = ["git", "-C", str(repo), "-c", "gc.auto=0", "-c", "maintenance.auto=false", *args]
    subprocess.run(command, env=_GIT_ENV, check=True, timeout=300, capture_output=True)


def _make_worktree(repo: Path, files: int) -> list[Path]:
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    paths = []
    for n in range(files):
        directory = repo / f"pkg{n // 500:02d}" / f"mod{(n // 25) % 20:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"file{n:05d}.py"
        path.write_bytes(b"# file %d\nVALUE = %d\n" % (n, n))
        paths.append(path)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "bench")
    return paths


def _dot_git(repo: Path) -> str:
    digest = hashlib.sha256()
    for dirpath, _dirs, names in sorted(os.walk(repo / ".git")):
        for name in sorted(names):
            if name == "promoter.lock":
                continue
            full = Path(dirpath) / name
            st = full.stat()
            digest.update(f"{full}:{st.st_mtime_ns}:{st.st_size}\n".encode())
            digest.update(full.read_bytes())
    return digest.hexdigest()


def _timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


def run(files: int = 10_000) -> dict[str, Any]:
    """Build the worktree, time the captures, return the figures."""
    root = Path(tempfile.mkdtemp(prefix="promoter-bench-snapshots-"))
    try:
        repo = root / "work"
        paths = _make_worktree(repo, files)
        settings = load_settings(
            None, state_dir=root / "state", repositories={"work": RepositoryConfig(path=repo)}
        )
        services = build_services(settings)
        try:
            dot_git = _dot_git(repo)
            first_s, first = _timed(lambda: snapshots.capture(services, "work", "first"))
            target = paths[len(paths) // 2]
            target.write_bytes(target.read_bytes() + b"CHANGED = True\n")
            second_s, second = _timed(lambda: snapshots.capture(services, "work", "second"))
            same_s, same = _timed(lambda: snapshots.capture(services, "work", "unchanged"))
            restore_s, restored = _timed(
                lambda: snapshot_restore.restore(services, "work", first["tree"], second["tree"])
            )
            assert first["tree"] != second["tree"] == same["tree"]
            assert restored["status"] == "completed"
            assert _dot_git(repo) == dot_git, "the user's .git changed"
        finally:
            services.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio = second_s / first_s
    return {
        "files": files,
        "first_capture_s": round(first_s, 4),
        "second_capture_s": round(second_s, 4),
        "unchanged_capture_s": round(same_s, 4),
        "restore_one_file_s": round(restore_s, 4),
        "ratio": round(ratio, 4),
        "goal": f"ratio <= {GOAL}",
        "goal_met": ratio <= GOAL,
    }


def format_result(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"snapshot capture of a {result['files']}-file worktree:",
            f"  first capture:            {result['first_capture_s']:.3f} s",
            f"  second (1 file changed):  {result['second_capture_s']:.3f} s",
            f"  unchanged:                {result['unchanged_capture_s']:.3f} s",
            f"  restore of that 1 file:   {result['restore_one_file_s']:.3f} s",
            f"  ratio second/first:       {result['ratio']:.4f} "
            f"({'meets' if result['goal_met'] else 'MISSES'} the goal {result['goal']})",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time shadow snapshot captures.")
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(format_result(run(args.files)))
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
