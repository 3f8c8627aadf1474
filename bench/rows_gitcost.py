"""Speed-table rows: what a 1-file promotion costs in a 100k-file repository.

Each row is the time of one promotion (``request_promotion`` until the operation has
ended, in-process, as ``bench.prepared.promote_once`` times it) in a repository of
100 000 tracked files over the same promotion in a repository of 10 files of the same
shape, measured side by side, the two in an order that alternates. One such promotion
takes 20–60 ms, so a single pair is mostly noise (on one idle machine, nine single pairs
of the flat row gave 0.66–1.34×, median 1.03×): a round times ``PAIRS_PER_ROUND`` pairs
back to back and its figure is the median of their ratios (the row, as every row, the
median of the rounds' figures):

- ``promote_1_in_100k``: the files spread over 1 000 directories, 100 each, two levels
  deep (``src/gNNN/mN/fNNNNNN.txt``); one file in the middle modified.
- ``promote_1_in_100k_cpu``: the same pairs' processor time, big over small (the median of
  the pairs' ratios): user plus system of the daemon's process during the promotion (the
  calling thread requesting it, the runner's threads) and of its git children, those
  waited for and the running ``git cat-file`` (``bench.harness.cpu_since``). Whatever
  other daemons of the same run do meanwhile is counted too (with ``--full``, the
  snapshots row's watch of the shared worktree); ``bench.bench_table --rows`` runs it
  alone. The other rows' processor times are details (``….cpu_ratio``, ``….cpu_ms``).
- ``promote_1_in_100k_snapshots``: the same with ``snapshots = true``, so the promotion
  also records its pre and post snapshots. One untimed promotion per side comes first,
  as in a daemon that has run for a while: its pre snapshot is the shadow's first full
  capture (which adds every file) and starts the worktree's watch, so the timed ones
  are watched captures (``promoter.git.shadow_watch``).
- ``promote_1_in_100k_flat``: the 100 000 files in one directory (``flat/fNNNNNN.txt``).

The repositories are built once per run with ``git fast-import`` in a temp directory and
checked out; every round promotes the target from its base content to a new one (a new
grant, lease and verified bundle each round, prepared untimed) and then writes the base
content back (untimed), so the worktrees are never copied and the rows share them.
What this does not do: gate anything, or measure anything but the promotion itself
(upload, verification and set-up are outside the timing).

Run alone: ``python -m bench.rows_gitcost [--rounds N] [--files N]``; the speed table
runs these rows with ``--full``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench import documents as bd
from bench import prepared as pp
from bench import workload as wl
from bench.harness import cpu_mark, cpu_since
from bench.variables import stop_on_unknown
from promoter.config import RepositoryConfig, load_settings
from promoter.domain.canonical import sha256_hex
from promoter.engine.intake import grants
from promoter.engine.intake.bundles import submit_bundle
from promoter.engine.operation import runner, views
from promoter.engine.services import Services, build_services

__all__ = ["GOALS", "LABELS", "ROWS", "rows"]

BIG = 100_000
SMALL = 10
PAIRS_PER_ROUND = 5  # pairs a round times; its figure is the median of their ratios
GOALS: dict[str, tuple[float, str]] = {
    "promote_1_in_100k": (1.2, "x"),
    "promote_1_in_100k_cpu": (1.2, "x"),
    "promote_1_in_100k_snapshots": (1.5, "x"),
    "promote_1_in_100k_flat": (1.2, "x"),
}
LABELS = {
    "promote_1_in_100k": "1-file promotion, 100k files vs 10",
    "promote_1_in_100k_cpu": "the same, daemon processor time (git included)",
    "promote_1_in_100k_snapshots": "the same with snapshots on",
    "promote_1_in_100k_flat": "the same, 100k files in one directory",
}
ROWS = tuple(GOALS)


class Recorder(Protocol):
    def add(self, row: str, value: float) -> None: ...

    def note(self, key: str, value: float) -> None: ...


# --- the repositories --------------------------------------------------------------------------


def path_of(i: int, flat: bool) -> str:
    return f"flat/f{i:06d}.txt" if flat else f"src/g{i // 100:03d}/m{i // 10 % 10}/f{i:06d}.txt"


def content(i: int, version: int = 0) -> bytes:
    return f"file {i} version {version}\n".encode() * 4


def build_repo(path: Path, files: int, *, flat: bool) -> None:
    """``files`` tracked files committed with ``git fast-import``, then checked out."""
    path.mkdir(parents=True)
    wl.git(path, "init", "-q", "-b", "main")
    with tempfile.TemporaryFile() as stream:
        for i in range(files):
            data = content(i)
            stream.write(b"blob\nmark :%d\ndata %d\n%s\n" % (i + 1, len(data), data))
        message = b"base\n"
        stream.write(b"commit refs/heads/main\n")
        stream.write(b"committer Bench <bench@example.invalid> 1767225600 +0000\n")
        stream.write(b"data %d\n%s" % (len(message), message))
        for i in range(files):
            stream.write(b"M 100644 :%d %s\n" % (i + 1, path_of(i, flat).encode()))
        stream.write(b"\n")
        stream.seek(0)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(path), **wl.GIT_ENV}
        subprocess.run(
            ["git", "fast-import", "--quiet"],
            cwd=path,
            env=env,
            stdin=stream,
            check=True,
            timeout=1800,
        )
    wl.git(path, "reset", "-q", "--hard", "main")


# --- one side of a row: a repository, its daemon services, its target ---------------------------


@dataclass
class Side:
    name: str
    repo: Path
    services: Services
    index: int
    base_commit: str
    base_tree: str
    version: int = 0

    @property
    def target(self) -> str:
        return path_of(self.index, self.repo.name.startswith("flat"))

    def prepare(self, label: str) -> pp.Prepared:
        """A grant, a lease and a verified bundle from the target's content to the next."""
        services = self.services
        identity = services.registry.by_name(bd.REPO_NAME).identity
        old, new = content(self.index), content(self.index, self.version + 1)
        workflow = f"wf_gitcost_{label}"
        document = bd.grant_document(
            identity,
            self.base_commit,
            self.base_tree,
            max_changes=10,
            max_total_bytes=1 << 30,
            operations=["modify"],
            grant_id=f"grt_gitcost_{label}",
            workflow=workflow,
        )
        grant, _ = grants.register_grant(services, document)
        grants.set_lease(services, workflow, bd.STAGE, bd.lease_document())
        for data in (old, new):
            if not services.blobs.has(sha256_hex(data)):
                services.blobs.put(sha256_hex(data), data)
        assert grant.grant_sha256 is not None
        change = {
            "path": self.target,
            "operation": "modify",
            "old": bd.state_of(old),
            "new": bd.state_of(new),
        }
        bundle = bd.bundle_document(document, grant.grant_sha256, [change])
        submitted = submit_bundle(services, bundle, run_id=None)
        return pp.Prepared(
            services, submitted.bundle.bundle_id, submitted.receipt.receipt_sha256, 0.0
        )

    def promoted(self, operation_id: str) -> None:
        view = views.operation_view(self.services.db, operation_id)
        if view.status != "completed":
            raise AssertionError(f"{self.name}: {operation_id} ended {view.status} ({view.code})")
        self.version += 1
        target = self.repo / self.target
        if target.read_bytes() != content(self.index, self.version):
            raise AssertionError(f"{self.name}: the target does not hold the new content")
        target.write_bytes(content(self.index))  # back to the base (old = the base tree's)


def _side(
    stack: ExitStack, name: str, repo: Path, state: Path, files: int, *, snapshots_on: bool
) -> Side:
    settings = load_settings(
        state_dir=state,
        repositories={bd.REPO_NAME: RepositoryConfig(path=repo, snapshots=snapshots_on)},
    )
    services = build_services(settings)
    stack.callback(services.close)
    stack.callback(lambda: runner.runner(services).shutdown())
    commit = wl.git(repo, "rev-parse", "HEAD").decode().strip()
    tree = wl.git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    side = Side(name, repo, services, files // 2 + 1, commit, tree)
    if snapshots_on:  # a running daemon's state: the shadow filled, the worktree watched
        side.promoted(pp.promote_once(side.prepare("warm-up")))
    return side


@dataclass(frozen=True)
class Timed:
    """One pair: each side's wall seconds and processor seconds (user plus system)."""

    big: float
    small: float
    big_cpu: float
    small_cpu: float


def _timed_pair(pair_no: int, big: Side, small: Side) -> Timed:
    """Both promotions, in an order that alternates with ``pair_no``: their wall time and
    their processor time, that of this process (the calling thread requesting the
    promotion, the runner's threads doing it) and of its git children, those waited for
    and the running ``git cat-file`` (``bench.harness.cpu_since``)."""
    prepared = {side.name: side.prepare(str(pair_no)) for side in (big, small)}
    order = [big, small] if pair_no % 2 == 0 else [small, big]
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for side in order:
        os.sync()
        mark = cpu_mark()
        started = time.perf_counter()
        operation_id = pp.promote_once(prepared[side.name])
        seconds[side.name] = time.perf_counter() - started
        cpu[side.name] = cpu_since(mark)
        side.promoted(operation_id)
    return Timed(seconds[big.name], seconds[small.name], cpu[big.name], cpu[small.name])


PAIRS = {  # pair -> (flat, snapshots on, the rows it measures)
    "promote_1_in_100k": (False, False, ("promote_1_in_100k", "promote_1_in_100k_cpu")),
    "promote_1_in_100k_snapshots": (False, True, ("promote_1_in_100k_snapshots",)),
    "promote_1_in_100k_flat": (True, False, ("promote_1_in_100k_flat",)),
}


def rows(
    table: Recorder,
    work: Path,
    stack: ExitStack,
    *,
    files: int = BIG,
    wanted: set[str] | None = None,
) -> list[Callable[[int], None]]:
    """Build the repositories under ``work`` once; one callable per pair of sides, per
    round (``promote_1_in_100k``'s measures its ``_cpu`` row too). With ``wanted``, only
    the pairs measuring a row named there, and only their repositories.

    ``stack`` closes the services when the caller is done with every round.
    """
    chosen = [
        name for name, (_, _, measured) in PAIRS.items() if wanted is None or wanted & set(measured)
    ]
    built: dict[tuple[bool, int], Path] = {}
    for flat in sorted({PAIRS[name][0] for name in chosen}):
        for count in (files, SMALL):
            path = work / f"{'flat' if flat else 'tree'}-{count}" / ("flat" if flat else "tree")
            build_repo(path, count, flat=flat)
            built[(flat, count)] = path

    def pair(row: str, flat: bool, snapshots_on: bool) -> Callable[[int], None]:
        sides = []
        for count in (files, SMALL):  # rows share a worktree: each promotion restores it
            name = f"{row}.{count}"
            state = work / "states" / name
            repo = built[(flat, count)]
            sides.append(_side(stack, name, repo, state, count, snapshots_on=snapshots_on))
        big, small = sides

        def measure(round_no: int) -> None:
            pairs = [
                _timed_pair(round_no * PAIRS_PER_ROUND + k, big, small)
                for k in range(PAIRS_PER_ROUND)
            ]
            table.add(row, statistics.median(p.big / p.small for p in pairs))
            table.note(f"{row}.seconds", statistics.median(p.big for p in pairs))
            table.note(f"{row}.small_seconds", statistics.median(p.small for p in pairs))
            cpu_ratio = statistics.median(p.big_cpu / p.small_cpu for p in pairs)
            if f"{row}_cpu" in GOALS:
                table.add(f"{row}_cpu", cpu_ratio)
            else:
                table.note(f"{row}.cpu_ratio", cpu_ratio)
            table.note(f"{row}.cpu_ms", 1000 * statistics.median(p.big_cpu for p in pairs))
            table.note(f"{row}.small_cpu_ms", 1000 * statistics.median(p.small_cpu for p in pairs))

        return measure

    return [pair(name, PAIRS[name][0], PAIRS[name][1]) for name in chosen]


# --- running alone -----------------------------------------------------------------------------


@dataclass
class _Table:
    samples: dict[str, list[float]]
    extra: dict[str, list[float]]

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)

    def note(self, key: str, value: float) -> None:
        self.extra.setdefault(key, []).append(value)


def run(rounds: int = 3, files: int = BIG) -> dict[str, Any]:
    """These rows alone: ``rounds`` interleaved rounds, medians and samples."""
    table = _Table({}, {})
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-gitcost-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        with ExitStack() as stack:
            steps = rows(table, work, stack, files=files)
            for round_no in range(rounds):
                for step in steps[round_no % len(steps) :] + steps[: round_no % len(steps)]:
                    step(round_no)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "files": files,
        "rows": {
            row: {"median": statistics.median(values), "samples": values}
            for row, values in table.samples.items()
        },
        "details": {key: statistics.median(values) for key, values in table.extra.items()},
    }


def _lines(result: dict[str, Any]) -> Iterator[str]:
    yield f"1-file promotion, {result['files']} files vs {SMALL}: median of {result['rounds']}"
    for row, figure in result["rows"].items():
        samples = ", ".join(f"{s:.3g}" for s in figure["samples"])
        goal = GOALS[row][0]
        verdict = "met" if figure["median"] <= goal else "MISSED"
        yield f"  {LABELS[row]:<42} {figure['median']:7.3g}x (goal {goal}x, {verdict}) {samples}"
    for key, value in sorted(result["details"].items()):
        yield f"    {key}: {value:.4g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=BIG)
    args = parser.parse_args(argv)
    print("\n".join(_lines(run(max(1, args.rounds), args.files))))
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
