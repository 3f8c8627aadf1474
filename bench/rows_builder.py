"""Bench rows of the executor's bundle builder (``promoter bundle build``).

- ``build_1_in_100k``: ``build_bundle`` on a checked-out 100 000-file repository with one
  modified file, over ``git status --porcelain`` on the same worktree. The repository is
  written once with ``git fast-import`` and checked out; ``git status`` runs once before
  the rounds so its index is refreshed, as it is in a worktree someone works in. A round
  times ``PAIRS_PER_ROUND`` pairs back to back; its figure is their median ratio.
- ``build_1gib``: ``build_bundle`` on 1 GiB of new content (16 untracked files of 64 MiB
  in a small repository) over ``sha256sum`` of the same files.

Both time the builder in-process (the command's start-up is the ``cli_help`` row), the
two variants of a pair back to back in an order that rotates with the pair. What this
does not do: gate anything, or keep its repositories (they live under ``work``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from bench.variables import stop_on_unknown
from promoter.domain.canonical import rfc3339, utcnow
from promoter.domain.documents import sealed_grant
from promoter.domain.models import GrantV1
from promoter.executor.builder import build_bundle

__all__ = ["BUILDER_GOALS", "BUILDER_LABELS", "build_1_in_100k", "build_1gib", "prepare"]

BUILDER_GOALS: dict[str, tuple[float, str]] = {
    "build_1_in_100k": (1.5, "x"),
    "build_1gib": (2.0, "x"),
}
BUILDER_LABELS = {
    "build_1_in_100k": "bundle build, 1 change in 100k files, vs git status",
    "build_1gib": "bundle build, 1 GiB of new content, vs sha256sum",
}

_IDENTITY = "repo_" + "b" * 32
# pairs of ``build_1_in_100k`` a round times: one pair of 0.2 s runs is mostly noise (on
# one idle machine, nine single pairs gave 0.84-1.32x, median 1.14x)
PAIRS_PER_ROUND = 3
_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


class Recorder(Protocol):
    def add(self, row: str, value: float) -> None: ...

    def note(self, key: str, value: float) -> None: ...


def _git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=_ENV, input=input, capture_output=True, check=True
    ).stdout


def _fast_import_stream(files: int) -> bytes:
    parts = [b"commit refs/heads/main\n", b"committer bench <bench@example.invalid> 0 +0000\n"]
    parts.append(b"data 5\nbase\n")
    for i in range(files):
        data = b"file %d\n" % i + b"x" * (i % 200) + b"\n"
        path = b"d%03d/e%02d/f%05d.txt" % (i // 1000, (i // 50) % 20, i)
        parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path, len(data), data))
    return b"".join(parts)


def _grant(repo: Path) -> GrantV1:
    commit = _git(repo, "rev-parse", "HEAD").decode().strip()
    tree = _git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    now = utcnow()
    grant = {
        "schema": "GrantV1",
        "grant_id": "grt_bench_builder",
        "repository_identity": _IDENTITY,
        "branch": "refs/heads/main",
        "base_commit": commit,
        "base_tree": tree,
        "executor_run_id": "run_bench_builder",
        "workflow_id": "wf_bench",
        "stage": "implement",
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": 1,
        "not_before": rfc3339(now - timedelta(minutes=5)),
        "expires_at": rfc3339(now + timedelta(hours=4)),
        "write_allowlist": [{"pattern": "**", "operations": ["create", "modify", "delete"]}],
        "target_preconditions": [],
        "limits": {"max_changes": 1000, "max_total_bytes": 1 << 31},
    }
    return sealed_grant(GrantV1.model_validate(grant))


def make_large_repository(path: Path, files: int = 100_000) -> Path:
    """A checked-out repository of ``files`` small files, written by ``git fast-import``."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "fast-import", "--quiet", input=_fast_import_stream(files))
    _git(path, "checkout", "-q", "-f", "main")
    _git(path, "status", "--porcelain")  # refresh the index the way a user's status does
    return path


def make_big_content(path: Path, files: int = 16, size: int = 64 << 20) -> list[Path]:
    """A one-file repository plus ``files`` untracked files of ``size`` random-ish bytes."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "README").write_bytes(b"bench\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "base")
    block = os.urandom(1 << 20)
    out: list[Path] = []
    for i in range(files):
        target = path / "big" / f"part{i:02d}.bin"
        target.parent.mkdir(exist_ok=True)
        with open(target, "wb") as handle:
            for j in range(size >> 20):
                handle.write(bytes([i, j & 0xFF]) + block[2:])
        out.append(target)
    return out


def prepare(work: Path, *, big: bool = True) -> dict[str, Any]:
    """The repositories the rows use (made once, kept for every round)."""
    large = make_large_repository(work / "builder-100k")
    edited = large / "d050" / "e00" / "f50000.txt"
    edited.write_bytes(b"edited for the bench\n")
    prepared: dict[str, Any] = {"large": large, "large_grant": _grant(large)}
    if big:
        prepared["big"] = work / "builder-1gib"
        prepared["big_files"] = make_big_content(prepared["big"])
        prepared["big_grant"] = _grant(prepared["big"])
    return prepared


def _alternate(round_no: int, runs: list[tuple[str, Callable[[], object]]]) -> dict[str, float]:
    order = runs[round_no % len(runs) :] + runs[: round_no % len(runs)]
    seconds: dict[str, float] = {}
    for name, call in order:
        started = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - started
    return seconds


def _build(worktree: Path, grant: GrantV1, changes: int) -> Callable[[], None]:
    def run() -> None:
        with build_bundle(worktree, grant) as built:
            if len(built.bundle["changes"]) != changes:
                raise AssertionError(f"expected {changes} changes, got {built.bundle['changes']}")

    return run


def build_1_in_100k(table: Recorder, prepared: dict[str, Any], round_no: int) -> None:
    """``PAIRS_PER_ROUND`` pairs back to back; the round's figure is their median ratio."""
    large: Path = prepared["large"]
    runs: list[tuple[str, Callable[[], object]]] = [
        ("build", _build(large, prepared["large_grant"], 1)),
        ("status", lambda: _git(large, "status", "--porcelain") and None),
    ]
    pairs = [_alternate(round_no * PAIRS_PER_ROUND + k, runs) for k in range(PAIRS_PER_ROUND)]
    table.add("build_1_in_100k", statistics.median(p["build"] / p["status"] for p in pairs))
    table.note("build_1_in_100k.build_s", statistics.median(p["build"] for p in pairs))
    table.note("build_1_in_100k.status_s", statistics.median(p["status"] for p in pairs))


def build_1gib(table: Recorder, prepared: dict[str, Any], round_no: int) -> None:
    big: Path = prepared["big"]
    names = [str(p) for p in prepared["big_files"]]
    seconds = _alternate(
        round_no,
        [
            ("build", _build(big, prepared["big_grant"], len(names))),
            (
                "sha256sum",
                lambda: subprocess.run(["sha256sum", *names], capture_output=True, check=True)
                and None,
            ),
        ],
    )
    table.add("build_1gib", seconds["build"] / seconds["sha256sum"])
    table.note("build_1gib.build_s", seconds["build"])
    table.note("build_1gib.sha256sum_s", seconds["sha256sum"])


def main() -> None:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="The builder's bench rows alone.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-big", action="store_true", help="skip the 1 GiB row")
    args = parser.parse_args()

    class Table:
        def __init__(self) -> None:
            self.rows: dict[str, list[float]] = {}

        def add(self, row: str, value: float) -> None:
            self.rows.setdefault(row, []).append(value)

        def note(self, key: str, value: float) -> None:
            self.rows.setdefault(key, []).append(value)

    table = Table()
    with tempfile.TemporaryDirectory(
        prefix="promoter-bench-builder-", dir=os.environ.get("PROMOTER_BENCH_DIR")
    ) as tmp:
        prepared = prepare(Path(tmp), big=not args.no_big)
        for round_no in range(args.rounds):
            build_1_in_100k(table, prepared, round_no)
            if not args.no_big:
                build_1gib(table, prepared, round_no)
    for key, values in table.rows.items():
        samples = ", ".join(f"{v:.3g}" for v in values)
        print(f"{key:<32} median {statistics.median(values):8.3g}  ({samples})")


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
