"""The daemon's processor time for ``rows_run_small``'s ``promoter run --yes``, a daemon
of this tree beside a daemon of another tree.

``bench.rows_run_small`` starts one daemon, of the tree it runs in, for both of its sides:
a change to the daemon shows in it only between runs. This starts two ``promoter serve``
processes (this tree's interpreter and ``--before TREE``'s, each with its own state and
its own copy of the generated project), runs the same 10-file edit through each in turn
(the order alternating with the round; the command line is this tree's for both) and
prints, per daemon, the median of its processor time over a run (``/proc/PID/stat``,
every thread and waited-for git, in clock ticks of 10 ms), its threads' time on the CPU
(``/proc/PID/task/*/schedstat``, nanoseconds: their sum's median, and the busiest
first, means) and, with the daemons' phase timing on
(``PROMOTER_PHASE_TIMING=1``), the one promotion request's milliseconds and processor
milliseconds by phase (``promoter.phases``, medians).

Run: ``python -m bench.daemon_small --rounds 11 --before TREE``. It reports, it gates
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench import harness, rows_run_small
from bench.variables import stop_on_unknown


def _threads(pid: int) -> dict[str, float]:
    """Processor seconds on the CPU by thread id (``schedstat``: nanoseconds, not ticks)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ran = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]
        except OSError:
            continue
        out[tid] = int(ran) / 1e9
    return out


@contextmanager
def _daemon(python: str, state: Path, repo: Path, phases: list[dict[str, float]]) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env["PROMOTER_PHASE_TIMING"] = "1"
    argv = [python, "-m", "promoter.cli.main", "serve", "--state-dir", str(state)]
    argv += ["--host", "127.0.0.1", "--port", "0", "--workers", "1", "--log-format", "json"]
    argv += ["--repo", f"bench={repo}"]
    # started outside any tree: ``-m`` puts the current directory first on the path, so
    # from this tree's root the other interpreter would load this tree's code
    proc = subprocess.Popen(argv, env=env, cwd=state.parent, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        url = harness.ready_url(proc)

        def read(stream: object = proc.stderr) -> None:
            for raw in proc.stderr:  # type: ignore[union-attr]
                text = raw.decode(errors="replace")
                if "promoter.phases" in text and text.lstrip().startswith("{"):
                    record = json.loads(text)
                    phases.append({k: v for k, v in record.items() if k.endswith("_ms")})

        threading.Thread(target=read, daemon=True).start()
        yield url
        proc.terminate()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)


def _pid(state: Path) -> int:
    return rows_run_small._daemon_pid(state)


def run(rounds: int, before: Path) -> dict[str, dict[str, float]]:
    rows_run_small.become_subreaper()
    work = Path(tempfile.mkdtemp(prefix="promoter-bench-daemon-"))
    pythons = {"before": str(before / ".venv/bin/python"), "after": sys.executable}
    cpu: dict[str, list[float]] = {side: [] for side in pythons}
    threads: dict[str, list[list[float]]] = {side: [] for side in pythons}
    threads_cpu: dict[str, list[float]] = {side: [] for side in pythons}
    phases: dict[str, list[dict[str, float]]] = {side: [] for side in pythons}
    try:
        with ExitStack() as stack:
            served = {}
            for side, python in pythons.items():
                root = work / side
                root.mkdir()
                repo = rows_run_small.make_repo(root)
                edit = rows_run_small.Edit(repo)
                state = root / "state"
                url = stack.enter_context(_daemon(python, state, repo, phases[side]))
                pid = _pid(state)
                served[side] = (url, state, edit, pid)
                rows_run_small.promoter_run(url, state, edit, pid)  # the base, a warm daemon
                phases[side].clear()
            names = list(pythons)
            for round_no in range(rounds):
                for side in names[round_no % 2 :] + names[: round_no % 2]:
                    url, state, edit, pid = served[side]
                    at, split = rows_run_small._process_cpu(pid), _threads(pid)
                    rows_run_small.promoter_run(url, state, edit, pid)
                    cpu[side].append(rows_run_small._process_cpu(pid) - at)
                    spent = [s - split.get(t, 0.0) for t, s in _threads(pid).items()]
                    threads_cpu[side].append(sum(spent))
                    threads[side].append(sorted(spent, reverse=True))
    finally:
        rows_run_small._wait_removals()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, dict[str, float]] = {}
    for side in pythons:
        figures = {
            "daemon_cpu_ms (ticks, with git)": 1000 * statistics.median(cpu[side]),
            "threads_cpu_ms (schedstat)": 1000 * statistics.median(threads_cpu[side]),
        }
        ranked = threads[side]
        for n, label in enumerate(("busiest thread", "second thread", "third thread")):
            figures[f"{label} ms"] = 1000 * statistics.mean(
                r[n] if n < len(r) else 0 for r in ranked
            )
        figures["other threads ms"] = 1000 * statistics.mean(sum(r[3:]) for r in ranked)
        figures["threads that ran"] = statistics.median(sum(1 for x in r if x > 0) for r in ranked)
        for key in sorted({k for p in phases[side] for k in p}):
            values = [p[key] for p in phases[side] if key in p]
            figures[f"phase {key}"] = statistics.median(values)
        out[side] = figures
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--before", type=Path, required=True, help="a tree with its .venv")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    result = run(args.rounds, args.before)
    after = os.getloadavg()[0]
    print(f"the daemon's CPU per run, median of {args.rounds}; load {load:.2f} → {after:.2f}")
    for key in result["after"]:
        b = result["before"].get(key, float("nan"))
        print(f"  {key:<34} {b:8.2f} → {result['after'][key]:8.2f}")
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
