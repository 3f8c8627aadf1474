"""Figures for the sandbox of ``promoter run``: what making its repository costs, and what a
whole run costs beside it.

For a generated repository of N tracked files (100 per directory, 40-byte files, one
commit written with ``git fast-import``, checked out and packed), this times, each several
times and reports the median in seconds:

- ``clone_local``: ``git clone --local`` (objects hardlinked to the source: shared);
- ``clone_copy``: ``git clone --local --no-hardlinks --dissociate`` (what ``promoter run``
  does: objects copied, no ``objects/info/alternates``);
- ``worktree_add``: ``git worktree add --detach`` (shares the whole ``.git``);
- ``objects_bytes``: the size of the source's ``objects`` directory;
- ``command``: the bare command of the runs below, ``sh -c`` writing 10 files (5 tracked
  files rewritten, 5 new ones in a new directory) and printing one line, in the
  repository itself;
- ``cli_start``: ``promoter run --help`` (the interpreter and the CLI's imports);
- ``run``: ``promoter run --repo bench --yes -- sh -c …`` (the same command, confined by
  bubblewrap) as a whole process, against a real daemon (``promoter serve`` in its own
  process, a temporary state directory, guarding the generated repository): sandbox,
  grant, command, bundle, preflight, promotion, sandbox removal;
- ``run_unconfined``: the same with ``--unconfined``.

Each run's split comes from when its output lines arrive (the output is unbuffered):
``sandbox`` (process start to the ``sandbox RUN: …`` line: interpreter, imports, the
repository query, ``sandbox.create``), ``grant`` (to the ``running …`` line: grant,
lease, executor token), ``cmd`` (to the command's own last line: its start, bubblewrap's
included, and its writes), ``promote`` (to the ``promoted:`` line: the command's exit,
bundle build and upload, diff, preflight, promotion) and ``finish`` (to exit: the
sandbox's removal). ``run / clone_local`` is the ratio of the medians.

Between rounds the bench puts the repository's worktree back with plain file operations
(the old bytes written back, the created files and their directory deleted: the bench
owns that scratch repository), never ``git checkout`` or ``reset``, so each round promotes
the same change. Each sandbox is deleted untimed (a clone) or by ``run`` itself.
Not part of the default speed table. Run:
``python -m bench.rows_run [--files N ...] [--rounds R] [--clones-only]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.variables import stop_on_unknown

_GIT = ["git", "-c", "protocol.file.allow=always", "-c", "gc.auto=0"]
_CLI = [sys.executable, "-m", "promoter.cli.main"]
_CHANGED = 5  # tracked files the command rewrites
_CREATED = 5  # new files it writes, in the new directory ``_NEW_DIR``
_NEW_DIR = "bench_new"
_PHASES = ("sandbox", "grant", "cmd", "promote", "finish")
_WRITTEN = "bench: written"  # the command's last output: its files are written


def _git(args: list[str], cwd: Path | None = None, data: bytes | None = None) -> None:
    subprocess.run([*_GIT, *args], cwd=cwd, input=data, check=True, capture_output=True)


def _path(n: int) -> str:
    return f"g{n // 100:05d}/f{n:07d}.txt"


def make_repo(root: Path, files: int) -> Path:
    """A repository of ``files`` tracked 40-byte files, committed and checked out."""
    repo = root / f"src{files}"
    _git(["init", "--quiet", "-b", "main", str(repo)])
    stream = bytearray(b"commit refs/heads/main\ncommitter b <b@x> 0 +0000\ndata 1\nx\n")
    for n in range(files):
        body = f"file {n:07d} of the generated repository\n".encode()[:40].ljust(40, b".")
        stream += f"M 100644 inline {_path(n)}\ndata {len(body)}\n".encode()
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


class Change:
    """The 10-file change every round makes, and how the bench takes it back out."""

    def __init__(self, repo: Path, files: int) -> None:
        self.repo = repo
        step = max(files // _CHANGED, 1)
        self.changed = [_path(min(n * step, files - 1)) for n in range(_CHANGED)]
        self.created = [f"{_NEW_DIR}/n{n}.txt" for n in range(_CREATED)]
        self.old = {path: (repo / path).read_bytes() for path in self.changed}
        writes = [f"printf 'changed by the bench\\n' > {p}" for p in self.changed]
        writes += [f"printf 'created by the bench\\n' > {p}" for p in self.created]
        self.script = " && ".join([f"mkdir -p {_NEW_DIR}", *writes, f"echo {_WRITTEN}"])

    def check_applied(self) -> None:
        for path in self.changed:
            if (self.repo / path).read_bytes() != b"changed by the bench\n":
                raise RuntimeError(f"{path} was not promoted")
        for path in self.created:
            if (self.repo / path).read_bytes() != b"created by the bench\n":
                raise RuntimeError(f"{path} was not promoted")

    def undo(self) -> None:
        """Plain file operations: the old bytes back, the created files and directory gone."""
        for path, data in self.old.items():
            (self.repo / path).write_bytes(data)
        for path in self.created:
            (self.repo / path).unlink()
        (self.repo / _NEW_DIR).rmdir()


def _command(change: Change) -> float:
    start = time.perf_counter()
    subprocess.run(["sh", "-c", change.script], cwd=change.repo, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    change.check_applied()
    change.undo()
    return seconds


def _cli_start() -> float:
    start = time.perf_counter()
    subprocess.run([*_CLI, "run", "--help"], check=True, capture_output=True)
    return time.perf_counter() - start


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    return {**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "500", "NO_COLOR": "1"}


def _run(url: str, state: Path, change: Change, *, unconfined: bool) -> dict[str, float]:
    """One ``promoter run`` as a whole process: its total and the split (see the docstring)."""
    argv = [*_CLI, "run", "--repo", "bench", "--yes", "--state-dir", str(state), "--url", url]
    argv += ["--unconfined"] if unconfined else []
    argv += ["--", "sh", "-c", change.script]
    lines: list[tuple[float, str]] = []
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=state.parent,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        lines.append((time.perf_counter(), raw.decode(errors="replace").rstrip()))
    code = proc.wait()
    end = time.perf_counter()
    if code != 0:
        raise RuntimeError(f"promoter run exited {code}:\n" + "\n".join(t for _, t in lines))
    change.check_applied()
    change.undo()
    marks = [start]
    for prefix in ("sandbox run_", "running "):
        marks.append(next(t for t, text in lines if text.startswith(prefix)))
    marks.append(next(t for t, text in lines if text == _WRITTEN))
    marks.append(next(t for t, text in lines if text.startswith("promoted: ")))
    marks.append(end)
    split = {
        name: later - earlier
        for name, earlier, later in zip(_PHASES, marks[:-1], marks[1:], strict=True)
    }
    return {"total": end - start, **split}


@contextmanager
def _daemon(state: Path, repo: Path) -> Iterator[str]:
    """``promoter serve`` in its own process guarding ``repo`` as ``bench``: its URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [*_CLI, "serve", "--state-dir", str(state), "--host", "127.0.0.1", "--port", "0"]
    argv += ["--workers", "1"]  # one serving process: its pid is the one measured
    proc = subprocess.Popen(
        [*argv, "--repo", f"bench={repo}"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        log: list[str] = []
        url = ""
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            log.append(line)
            if line.startswith("promoter: ready on "):
                url = line.removeprefix("promoter: ready on ")
                break
        if not url:
            raise RuntimeError("the daemon exited before it was ready:\n" + "\n".join(log))
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # the pipe never fills
        yield url
        proc.terminate()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)


def measure_run(repo: Path, root: Path, files: int, rounds: int) -> dict[str, float]:
    """The medians of the bare command, the CLI's start and both kinds of run."""
    change = Change(repo, files)
    state = root / f"state{files}"
    times: dict[str, list[float]] = {"command": [], "cli_start": []}
    with _daemon(state, repo) as url:
        for _ in range(rounds):
            times["command"].append(_command(change))
            times["cli_start"].append(_cli_start())
            for kind in ("run", "run_unconfined"):
                figures = _run(url, state, change, unconfined=kind == "run_unconfined")
                for part, seconds in figures.items():
                    key = kind if part == "total" else f"{kind}.{part}"
                    times.setdefault(key, []).append(seconds)
    shutil.rmtree(state)
    return {name: statistics.median(values) for name, values in times.items()}


def _table(files: int, figures: dict[str, float]) -> str:
    rows = [f"{files} files (median seconds)"]
    for name, value in figures.items():
        if name == "objects_bytes":
            rows.append(f"  {name:<28} {value:>12.0f} B")
        else:
            rows.append(f"  {name:<28} {value:>12.3f}")
    if "run" in figures and "clone_local" in figures:
        for kind in ("run", "run_unconfined"):
            ratio = figures[kind] / figures["clone_local"]
            rows.append(f"  {kind + ' / clone_local':<28} {ratio:>12.1f} x")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--clones-only", action="store_true", help="only the clone rows: no daemon, no run"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-run-") as temp:
        root = Path(temp)
        for files in options.files:
            repo = make_repo(root, files)
            _git(["gc", "--quiet"], cwd=repo)  # one pack, as a cloned repository has
            figures = measure(repo, root, options.rounds)
            if not options.clones_only:
                figures.update(measure_run(repo, root, files, options.rounds))
            print(_table(files, figures), flush=True)
            shutil.rmtree(repo)
    os.sync()


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
