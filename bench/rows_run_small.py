"""Speed-table rows: ``promoter run --yes`` of a 10-file edit on a small repository, whole,
against the worktree loop other tools use.

The repository is generated (no network) in the shape of a small Python project such as
pallets/click: 166 Python files of 1–40 KB in a few directories (``src/clicklike``,
``tests``, ``docs``, ``examples/*``), one commit written with ``git fast-import``, checked
out and packed. The edit is an agent's: 8 tracked files appended to, 2 new files.

- ``run_small_wall``: the person's wait for ``promoter run --repo bench --yes -- sh -c …``
  (confined, against ``promoter serve`` in its own process: the process's start to its
  exit) over the worktree loop's: ``git worktree add --detach``, the command in it,
  ``git add -A`` and ``git diff --binary --cached HEAD | git apply`` into the worktree,
  ``git worktree remove --force``.
- ``run_small_cpu``: user plus system CPU of everything promoter runs for that flow (the
  command line and its waited children, bubblewrap and the command included; the
  detached removal of the sandbox, which this process adopts as the children's
  subreaper and waits for; the daemon's own CPU over the run, from ``/proc``) over the
  loop's (every git and ``sh`` it starts).

Pairs interleaved (the order alternates with the round), the median of the ratios. One
untimed run first makes the base and warms the daemon. Between rounds the worktree is
put back with plain file operations. What this does not do: gate anything.
Run alone: ``python -m bench.rows_run_small [--rounds N] [--before TREE]`` (``--before``:
the run of another tree of promoter, first on ``PYTHONPATH``, timed beside in each round).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
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

from bench import rows_run
from bench.variables import stop_on_unknown

FILES = 166
EDITED = 8
CREATED = 2
GOALS: dict[str, tuple[float, str]] = {"run_small_wall": (2.0, "x"), "run_small_cpu": (4.0, "x")}
LABELS = {
    "run_small_wall": f"promoter run --yes, 10-file edit, {FILES} files, wall vs worktree loop",
    "run_small_cpu": f"the same, CPU of everything promoter runs vs the loop's, {FILES} files",
}
_WRITTEN = "bench: written"
_DIRS = ["src/clicklike", "tests", "docs", *(f"examples/ex{n}" for n in range(5))]
_PR_SET_CHILD_SUBREAPER = 36


class Recorder(Protocol):
    def add(self, row: str, value: float) -> None: ...

    def note(self, key: str, value: float) -> None: ...


def _source(n: int) -> bytes:
    """A Python file of 1–40 KB, its text determined by ``n``."""
    size = 1024 + (n * 7919) % (39 * 1024)
    lines = [f'"""Module {n} of the generated project."""\n', "import os\n"]
    k = 0
    while sum(map(len, lines)) < size:
        lines.append(f"\n\ndef f_{n}_{k}(value: int) -> int:\n    return value * {k} + {n}\n")
        k += 1
    return "".join(lines).encode()


def _path(n: int) -> str:
    return f"{_DIRS[n % len(_DIRS)]}/module_{n:03d}.py"


def make_repo(root: Path) -> Path:
    """The generated small project, committed, checked out and packed."""
    repo = root / "small-project"
    rows_run._git(["init", "--quiet", "-b", "main", str(repo)])
    stream = bytearray(b"commit refs/heads/main\ncommitter b <b@x> 0 +0000\ndata 1\nx\n")
    for n in range(FILES):
        body = _source(n)
        stream += f"M 100644 inline {_path(n)}\ndata {len(body)}\n".encode() + body + b"\n"
    rows_run._git(["fast-import", "--quiet"], cwd=repo, data=bytes(stream))
    rows_run._git(["checkout", "--quiet", "-f", "main"], cwd=repo)
    rows_run._git(["gc", "--quiet"], cwd=repo)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=repo, check=False)
    return repo


class Edit:
    """The agent's 10-file edit and how the bench takes it back out of the worktree."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.edited = [_path(n * (FILES // EDITED)) for n in range(EDITED)]
        self.created = [f"src/clicklike/new_{n}.py" for n in range(CREATED)]
        self.old = {path: (repo / path).read_bytes() for path in self.edited}
        writes = [f"printf '\\n# edited by the agent\\n' >> {p}" for p in self.edited]
        writes += [f"printf 'VALUE = {n}\\n' > {p}" for n, p in enumerate(self.created)]
        self.script = " && ".join([*writes, f"echo {_WRITTEN}"])

    def check_applied(self) -> None:
        for path, old in self.old.items():
            if (self.repo / path).read_bytes() != old + b"\n# edited by the agent\n":
                raise RuntimeError(f"{path} was not promoted")
        for n, path in enumerate(self.created):
            if (self.repo / path).read_bytes() != f"VALUE = {n}\n".encode():
                raise RuntimeError(f"{path} was not promoted")

    def undo(self) -> None:
        for path, data in self.old.items():
            (self.repo / path).write_bytes(data)
        for path in self.created:
            (self.repo / path).unlink()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User, system and waited-children CPU of a live process, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _adopted_removals() -> list[int]:
    """This process's children that are a sandbox's detached removal: adopted orphans
    that lead a session of their own (the daemons this process started do not)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and int(fields[3]) == int(entry):
            found.append(int(entry))
    return found


def _wait_removals() -> None:
    for pid in _adopted_removals():
        os.waitpid(pid, 0)


def become_subreaper() -> None:
    """Orphaned descendants (the detached removal) become this process's children."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def promoter_run(
    url: str, state: Path, edit: Edit, daemon_pid: int, before: Path | None = None
) -> tuple[float, float]:
    """One ``promoter run --yes``: the person's wait, and the CPU of everything it ran
    (``before``: another tree of promoter first on ``PYTHONPATH``, for a before/after)."""
    env = rows_run._env()
    if before is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(before), env.get("PYTHONPATH", "")])
    argv = [*rows_run._CLI, "run", "--repo", "bench", "--yes", "--state-dir", str(state)]
    argv += ["--url", url, "--", "sh", "-c", edit.script]
    _wait_removals()
    cpu, daemon_cpu = _children_cpu(), _process_cpu(daemon_pid)
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=state.parent, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0 or _WRITTEN.encode() not in done.stdout:
        raise RuntimeError(f"promoter run exited {done.returncode}: {done.stdout[-800:]!r}")
    _wait_removals()
    cpu = _children_cpu() - cpu + _process_cpu(daemon_pid) - daemon_cpu
    edit.check_applied()
    edit.undo()
    return wall, cpu


def worktree_loop(edit: Edit, work: Path) -> tuple[float, float]:
    """The bare way, as ``bench.rows_layers`` times it: its wall and its children's CPU."""
    cpu = _children_cpu()
    started = time.perf_counter()
    target = work / "small-wt"
    git = ["git", "-c", "gc.auto=0"]
    subprocess.run([*git, "worktree", "add", "--quiet", "--detach", str(target)],
                   cwd=edit.repo, check=True, capture_output=True)  # fmt: skip
    subprocess.run(["sh", "-c", edit.script], cwd=target, check=True, capture_output=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True, capture_output=True)
    diff = subprocess.run([*git, "diff", "--binary", "--cached", "HEAD"], cwd=target,
                          check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run([*git, "apply"], cwd=edit.repo, input=diff, check=True, capture_output=True)
    subprocess.run([*git, "worktree", "remove", "--force", str(target)],
                   cwd=edit.repo, check=True, capture_output=True)  # fmt: skip
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu
    edit.check_applied()
    edit.undo()
    return wall, cpu


@dataclass
class _Daemon:
    url: str
    pid: int


def _daemon_pid(state: Path) -> int:
    """The pid of the ``promoter serve`` guarding ``state`` (this process's child)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"serve" in cmdline and str(state).encode() in cmdline:
            return int(entry)
    raise RuntimeError("the daemon's process was not found")


def rows(
    table: Recorder, work: Path, stack: ExitStack, before: Path | None = None
) -> list[Callable[[int], None]]:
    """Build the repository under ``work`` once; one callable per round. With ``before``
    (a tree of promoter), its run is timed in each round too (``run_small_*_before``)."""
    become_subreaper()
    root = work / "run-small"
    root.mkdir(parents=True)
    repo = make_repo(root)
    edit = Edit(repo)
    state = root / "state"
    served = _Daemon(stack.enter_context(rows_run._daemon(state, repo)), 0)
    served.pid = _daemon_pid(state)
    promoter_run(served.url, state, edit, served.pid)  # untimed: the base, a warm daemon

    def row(round_no: int) -> None:
        sides: dict[str, Callable[[], tuple[float, float]]] = {
            "run": lambda: promoter_run(served.url, state, edit, served.pid),
            "loop": lambda: worktree_loop(edit, root),
        }
        if before is not None:
            sides["before"] = lambda: promoter_run(served.url, state, edit, served.pid, before)
        names = list(sides)
        turn = round_no % len(names)
        figures = {name: sides[name]() for name in names[turn:] + names[:turn]}
        loop_wall, loop_cpu = figures.pop("loop")
        for name, (wall, cpu) in figures.items():
            suffix = "" if name == "run" else "_before"
            table.add(f"run_small_wall{suffix}", wall / loop_wall)
            table.add(f"run_small_cpu{suffix}", cpu / loop_cpu)
            table.note(f"run_small_wall{suffix}.seconds", wall)
            table.note(f"run_small_cpu{suffix}.seconds", cpu)
        table.note("run_small_wall.loop_seconds", loop_wall)
        table.note("run_small_cpu.loop_seconds", loop_cpu)

    return [row]


# --- running alone -----------------------------------------------------------------------------


@dataclass
class _Table:
    samples: dict[str, list[float]]
    extra: dict[str, list[float]]

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)

    def note(self, key: str, value: float) -> None:
        self.extra.setdefault(key, []).append(value)


def run(rounds: int = 5, before: Path | None = None) -> dict[str, Any]:
    """These rows alone: ``rounds`` rounds (at least 5), medians and samples."""
    table = _Table({}, {})
    load_before = os.getloadavg()
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-small-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        with ExitStack() as stack:
            (step,) = rows(table, work, stack, before)
            for round_no in range(max(rounds, 5)):
                step(round_no)
    finally:
        _wait_removals()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": max(rounds, 5),
        "load": (load_before, os.getloadavg()),
        "rows": {
            row: {"median": statistics.median(values), "samples": values}
            for row, values in table.samples.items()
        },
        "details": {key: statistics.median(values) for key, values in table.extra.items()},
    }


def _lines(result: dict[str, Any]) -> Iterator[str]:
    before, after = (f"{load[0]:.2f}" for load in result["load"])
    yield (
        f"promoter run, small repository: median of {result['rounds']} rounds, "
        f"load {before} before, {after} after"
    )
    for row, figure in result["rows"].items():
        goal, unit = GOALS[row.removesuffix("_before")]
        samples = ", ".join(f"{s:.3g}" for s in figure["samples"])
        verdict = "met" if figure["median"] <= goal else "MISSED"
        shown = f"{figure['median']:8.3g}{unit} (goal {goal}{unit}, {verdict})"
        label = LABELS[row.removesuffix("_before")] + (" (before)" if "_before" in row else "")
        yield f"  {label:<81} {shown} {samples}"
    for key, value in sorted(result["details"].items()):
        yield f"    {key}: {value:.4g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--before", type=Path, help="a tree of promoter whose run is timed beside (PYTHONPATH)"
    )
    args = parser.parse_args(argv)
    print("\n".join(_lines(run(args.rounds, args.before))), flush=True)
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
