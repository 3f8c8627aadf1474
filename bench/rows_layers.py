"""Speed-table rows: layered sandboxes of ``promoter run`` (protocol: runs#layered-sandboxes) at any
size.

For generated repositories (``bench.rows_run.make_repo``: 40-byte files, 100 per
directory, one commit, packed) of 10 files and of ``BIG`` files (10 000; 100 000 with
``full``), each with the person's uncommitted work (two tracked files edited, one
untracked file), this measures side by side:

- ``sandbox_ready_<N>``: a sandbox made and its command's first instruction run, over the
  same in the 10-file repository, as ``promoter run`` makes it with a daemon: timed
  in-process, ``sandbox.create`` (layout ``overlay``: the start layer captured from the
  person's worktree where the daemon's watch says it changed, asked of ``promoter
  serve`` in its own process guarding both repositories, through ``start_watch``; the
  base of HEAD already in the cache, as for every run after the first on a commit) plus
  ``confine.run_confined`` of ``true`` (bubblewrap's probe, the namespace, the overlay's
  mount, bubblewrap, the entry, ``true``). In each round the person first edits one of
  their two dirty files again, and an untimed start takes in what the other row's
  promotion wrote (else more than ``start_watch.MAX_CANDIDATES`` paths: the full pass).
  The same start without the watch (the whole worktree read, as before) is timed in the
  same rounds, interleaved: ``sandbox_ready_<N>.unwatched_ratio``. The base's first
  making is a detail (``sandbox_ready_<N>.cold_seconds``), as are each side's seconds
  and CPU (this process and its children; the daemon's sync is left out).
- ``sandbox_disk_<N>``: the KiB a sandbox holds of its own (its run directory, the
  shared base left out) once made, before its command writes anything.
- ``run_vs_worktree_<N>``: ``promoter run --repo bench --yes -- sh -c …`` (the 10-file
  edit of ``bench.rows_run.Change``, confined, against ``promoter serve`` in its own
  process) over the same edit the bare way: ``git worktree add --detach``, the command
  in it, ``git add -A`` and ``git diff --binary --cached HEAD | git apply`` into the
  worktree, ``git worktree remove --force``. Between rounds the bench puts the worktree
  back with plain file operations (``Change.undo``). ``promoter run`` leaves its
  sandbox's removal to a process of its own; the bench waits for none. One untimed run
  first makes the base of the daemon's state directory and warms the daemon.

What this does not do: gate anything. Run alone: ``python -m bench.rows_layers [--rounds
N] [--files N]``; the speed table runs these rows every time (``BIG`` = 100 000 with
``--full``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench import harness, rows_run
from bench.variables import stop_on_unknown
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import rfc3339, utcnow
from promoter.executor import confine, layered, start_watch
from promoter.executor import sandbox as sandboxes
from promoter.executor.start_watch import Watched

SMALL = 10
BIG = 10_000
FULL = 100_000
_ALLOW = [{"pattern": "**", "operations": ["create", "modify", "delete"]}]


def _names(files: int) -> dict[str, str]:
    size = f"{files // 1000}k"
    return {
        "ready": f"sandbox_ready_{size}",
        "disk": f"sandbox_disk_{size}",
        "run": f"run_vs_worktree_{size}",
    }


GOALS: dict[str, tuple[float, str]] = {}
LABELS: dict[str, str] = {}
for _files in (BIG, FULL):
    _n = _names(_files)
    GOALS[_n["ready"]] = (1.2, "x")
    GOALS[_n["disk"]] = (1024.0, "KiB")
    GOALS[_n["run"]] = (0.25, "x")
    LABELS[_n["ready"]] = f"sandbox ready, {_files:,} files vs 10"
    LABELS[_n["disk"]] = f"a sandbox's own disk before its command, {_files:,} files"
    LABELS[_n["run"]] = f"promoter run --yes, 10-file edit, {_files:,} files, vs worktree loop"


class Recorder(Protocol):
    def add(self, row: str, value: float) -> None: ...

    def note(self, key: str, value: float) -> None: ...


def _dirty(repo: Path) -> None:
    """The person's uncommitted work: two tracked files edited, one untracked file."""
    for path in (rows_run._path(1), rows_run._path(3)):  # none the 10-file edit rewrites
        (repo / path).write_bytes(b"the person's uncommitted edit\n")
    (repo / "notes.txt").write_bytes(b"the person's untracked notes\n")


def _head(repo: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _disk(home: Path) -> int:
    """Bytes allocated under ``home`` (links not followed, each inode once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(top, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _cpu() -> float:
    """User plus system seconds of this process and its waited-for children so far."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass
class Side:
    repo: Path
    state: Path
    head: str
    watched: Watched | None = None
    cpu: float = 0.0  # of the last ``ready``

    def ready(self, *, watch: bool = True) -> tuple[float, int]:
        """Seconds from nothing to ``true`` run in a new sandbox; the sandbox's own bytes."""
        cpu = _cpu()
        started = time.perf_counter()
        record = sandboxes.create(
            self.state, repository="bench", worktree=str(self.repo), branch="refs/heads/main",
            head=self.head, created_at=rfc3339(utcnow()), allow=_ALLOW, layout="overlay",
            watched=self.watched if watch else None,
        )  # fmt: skip
        made = time.perf_counter()
        home = Path(record.clone).parent
        disk = _disk(home)
        paused = time.perf_counter() - made
        box = confine.Sandbox(
            clone=Path(record.clone), home=home / "home", hide=[self.state.resolve()],
            network=True, overlay=layered.overlay_of(record),
        )  # fmt: skip
        env = confine.sandbox_env(dict(os.environ), {}, home / "home", ())
        outcome = confine.run_confined(
            ["true"], box, env, "http://127.0.0.1:9", 60.0, record.run_id
        )
        seconds = time.perf_counter() - started - paused
        self.cpu = _cpu() - cpu
        if outcome.returncode != 0:
            raise RuntimeError(f"true exited {outcome.returncode} in the sandbox")
        sandboxes.remove(self.state, record.run_id)
        return seconds, disk


def _worktree_loop(change: rows_run.Change, work: Path) -> float:
    """The bare way: a worktree, the command, its diff applied, the worktree removed."""
    target = work / "wt"
    started = time.perf_counter()
    git = ["git", "-c", "gc.auto=0"]
    subprocess.run([*git, "worktree", "add", "--quiet", "--detach", str(target)],
                   cwd=change.repo, check=True, capture_output=True)  # fmt: skip
    subprocess.run(["sh", "-c", change.script], cwd=target, check=True, capture_output=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True, capture_output=True)
    diff = subprocess.run([*git, "diff", "--binary", "--cached", "HEAD"], cwd=target,
                          check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run([*git, "apply"], cwd=change.repo, input=diff, check=True, capture_output=True)
    subprocess.run([*git, "worktree", "remove", "--force", str(target)],
                   cwd=change.repo, check=True, capture_output=True)  # fmt: skip
    seconds = time.perf_counter() - started
    change.check_applied()
    change.undo()
    return seconds


def rows(
    table: Recorder, work: Path, stack: ExitStack, *, full: bool = False
) -> list[Callable[[int], None]]:
    """Build the repositories under ``work`` once; one callable per row, per round."""
    big_files = FULL if full else BIG
    names = _names(big_files)
    sides: dict[int, Side] = {}
    for files in (big_files, SMALL):
        root = work / f"layers-{files}"
        root.mkdir(parents=True)
        repo = rows_run.make_repo(root, files)
        subprocess.run(["git", "gc", "--quiet"], cwd=repo, check=True, capture_output=True)
        _dirty(repo)
        # the index refreshed, as the person's own git status leaves it
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=repo, check=False)
        sides[files] = Side(repo, root / "state", _head(repo))
        sides[files].state.mkdir()
        cold, _ = sides[files].ready()  # the base's first making, untimed in the rows
        table.note(f"{names['ready']}.{'cold' if files != SMALL else 'small_cold'}_seconds", cold)
    big, small = sides[big_files], sides[SMALL]
    watch_state = work / "watch-state"
    url = stack.enter_context(harness.served(watch_state, {"big": big.repo, "small": small.repo}))
    token = (watch_state / "credentials" / "orchestrator.token").read_text().strip()
    for name, side in (("big", big), ("small", small)):
        side.watched = Watched(side.state, _asker(url, token, name))
        side.ready()  # untimed: the watch starts, the first baseline is kept

    def ready(round_no: int) -> None:
        for side in (big, small):
            _touch(side.repo, round_no)  # the person edits again between two runs
            side.ready()  # untimed: takes in what the other row's promotion wrote
            _touch(side.repo, round_no + 1000)
        order = [big, small] if round_no % 2 == 0 else [small, big]
        watched, unwatched, cpu = {}, {}, {}
        counted = _Narrowed()
        start_watch._planned = counted  # the same plan, counted
        try:
            for side in order:
                watched[id(side)] = side.ready()
                cpu[id(side)] = side.cpu
        finally:
            start_watch._planned = counted._plan
        table.note(f"{names['ready']}.narrowed_share", counted.narrowed / counted.planned)
        for side in reversed(order):
            unwatched[id(side)] = side.ready(watch=False)
            cpu[-id(side)] = side.cpu
        (big_s, big_disk), (small_s, _) = watched[id(big)], watched[id(small)]
        table.add(names["ready"], big_s / small_s)
        table.note(f"{names['ready']}.seconds", big_s)
        table.note(f"{names['ready']}.small_seconds", small_s)
        table.note(f"{names['ready']}.cpu_seconds", cpu[id(big)])
        table.note(f"{names['ready']}.small_cpu_seconds", cpu[id(small)])
        table.note(f"{names['ready']}.cpu_ratio", cpu[id(big)] / cpu[id(small)])
        before_big, before_small = unwatched[id(big)][0], unwatched[id(small)][0]
        table.note(f"{names['ready']}.unwatched_ratio", before_big / before_small)
        table.note(f"{names['ready']}.unwatched_seconds", before_big)
        table.note(f"{names['ready']}.unwatched_small_seconds", before_small)
        table.note(f"{names['ready']}.unwatched_cpu_ratio", cpu[-id(big)] / cpu[-id(small)])
        table.add(names["disk"], big_disk / 1024)

    run_state = work / "run-state"
    url = stack.enter_context(rows_run._daemon(run_state, big.repo))
    change = rows_run.Change(big.repo, big_files)
    rows_run._run(url, run_state, change, unconfined=False)  # untimed: the base, a warm daemon

    def run(round_no: int) -> None:
        loop = _worktree_loop(change, work)
        figures = rows_run._run(url, run_state, change, unconfined=False)
        table.add(names["run"], figures["total"] / loop)
        table.note(f"{names['run']}.seconds", figures["total"])
        table.note(f"{names['run']}.loop_seconds", loop)

    return [ready, run]


def _asker(url: str, token: str, name: str) -> Callable[[list[tuple[str, int]]], Mapping[str, Any]]:
    """How ``promoter run`` asks the daemon's watch (``flow.start``), for repository ``name``."""

    def ask(positions: list[tuple[str, int]]) -> Mapping[str, Any]:
        with PromoterClient(url, token, timeout=60) as client:
            return client.worktree_changes(name, positions)

    return ask


class _Narrowed:
    """Counts the watched starts whose status pass read only candidates (changes nothing)."""

    def __init__(self) -> None:
        self.narrowed = self.planned = 0
        self._plan = start_watch._planned  # what ``plan`` and ``Asking.plan`` both end in

    def __call__(self, asked: Any, layout: Any, base_tree: str) -> start_watch.Plan:
        planned = self._plan(asked, layout, base_tree)
        self.planned += 1
        self.narrowed += planned.candidates is not None
        return planned


def _touch(repo: Path, round_no: int) -> None:
    """The person saves one of their dirty files again (its bytes new each time)."""
    (repo / rows_run._path(1)).write_bytes(b"the person's uncommitted edit %d\n" % round_no)


# --- running alone -----------------------------------------------------------------------------


@dataclass
class _Table:
    samples: dict[str, list[float]]
    extra: dict[str, list[float]]

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)

    def note(self, key: str, value: float) -> None:
        self.extra.setdefault(key, []).append(value)


def run(rounds: int = 3, *, full: bool = False) -> dict[str, Any]:
    """These rows alone: ``rounds`` interleaved rounds, medians and samples."""
    table = _Table({}, {})
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-layers-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        with ExitStack() as stack:
            steps = rows(table, work, stack, full=full)
            for round_no in range(rounds):
                for step in steps[round_no % len(steps) :] + steps[: round_no % len(steps)]:
                    step(round_no)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "load": os.getloadavg(),
        "rows": {
            row: {"median": statistics.median(values), "samples": values}
            for row, values in table.samples.items()
        },
        "details": {key: statistics.median(values) for key, values in table.extra.items()},
    }


def _lines(result: dict[str, Any]) -> Iterator[str]:
    yield f"layered sandboxes: median of {result['rounds']} rounds, load {result['load']}"
    for row, figure in result["rows"].items():
        goal, unit = GOALS[row]
        samples = ", ".join(f"{s:.3g}" for s in figure["samples"])
        verdict = "met" if figure["median"] <= goal else "MISSED"
        shown = f"{figure['median']:8.3g}{unit} (goal {goal}{unit}, {verdict})"
        yield f"  {LABELS[row]:<66} {shown} {samples}"
    for key, value in sorted(result["details"].items()):
        yield f"    {key}: {value:.4g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--full", action="store_true", help=f"{FULL:,} files, not {BIG:,}")
    args = parser.parse_args(argv)
    print("\n".join(_lines(run(max(1, args.rounds), full=args.full))), flush=True)
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
