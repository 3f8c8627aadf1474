"""What the speed table's rows share: the table, daemons, documents, the interleaved timer.

``Table`` collects each row's per-round figures; ``daemon`` serves a repository from
this process (the collector tuned as ``promoter serve`` tunes it), ``daemon_process``
runs ``promoter serve`` in its own; ``upload`` sends blobs;
``alternate`` times several runs in an order that rotates with the round.
Deliberately not here: any row (``bench.bench_table``, ``bench.rows_*``).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from starlette.types import ASGIApp

from bench import documents as bd
from promoter.api import gc_policy
from promoter.api.app import create_app
from promoter.api.server import make_server
from promoter.client.sync import PromoterClient
from promoter.config import RepositoryConfig, load_settings
from promoter.domain.canonical import sha256_hex
from promoter.engine.services import Services, build_services


@dataclass
class Table:
    samples: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, list[float]] = field(default_factory=dict)

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)

    def note(self, key: str, value: float) -> None:
        self.extra.setdefault(key, []).append(value)


# --- a daemon in this process ---------------------------------------------------------------


SERVER_THREAD = "bench-server"  # the server's thread, by name (its clock is read apart)


@contextmanager
def serving(app: ASGIApp) -> Iterator[tuple[str, threading.Thread]]:
    """``app`` served in this process as ``promoter serve`` serves it (``make_server``,
    the collector tuned the same way), in a thread of its own: ``(url, thread)``."""
    server = make_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, name=SERVER_THREAD, daemon=True)
    previous = gc_policy.tune_for_serving()  # as ``promoter serve`` does
    thread.start()
    try:
        if not server.ready.wait(60):
            raise RuntimeError("the benchmark server did not start")
        yield f"http://127.0.0.1:{server.port}", thread
    finally:
        server.should_exit = True
        thread.join(60)
        gc_policy.restore(previous)


@contextmanager
def daemon(state_dir: Path, repo: Path) -> Iterator[tuple[str, Services]]:
    settings = load_settings(
        None, state_dir=state_dir, repositories={bd.REPO_NAME: RepositoryConfig(path=repo)}
    )
    services = build_services(settings)
    try:
        with serving(create_app(settings, services)) as (url, _):
            yield url, services
    finally:
        services.close()


def upload(executor: PromoterClient, blobs: list[bytes]) -> None:
    """Every blob the host lacks: batched when the client can, else one PUT each."""
    batch = getattr(executor, "put_blobs", None)
    if callable(batch):
        batch([(sha256_hex(b), len(b), b) for b in blobs])
        return
    for data in blobs:
        executor.put_blob(sha256_hex(data), data)


def alternate(
    round_no: int,
    runs: list[tuple[str, Callable[[], object]]],
    cpu: dict[str, tuple[float, float]] | None = None,
) -> dict[str, float]:
    """Time each run (after ``sync``), in an order that rotates with ``round_no``.

    With ``cpu``, each run's processor time is also put there by name: (user, system)
    seconds of this process (all its threads) and of the children it waited for meanwhile.
    """
    order = runs[round_no % len(runs) :] + runs[: round_no % len(runs)]
    seconds: dict[str, float] = {}
    for name, call in order:
        os.sync()
        before = _cpu_times()
        started = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - started
        if cpu is not None:
            after = _cpu_times()
            cpu[name] = (after[0] - before[0], after[1] - before[1])
    return seconds


def _cpu_times() -> tuple[float, float]:
    """(user, system) seconds of this process and its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + children.ru_utime, own.ru_stime + children.ru_stime


def _live_children_ns() -> dict[int, int]:
    """Processor nanoseconds so far of each live child process (all its threads), from
    ``/proc``: a running ``git cat-file --batch``, which ``getrusage`` counts only once it
    has been waited for."""
    found: dict[int, int] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as handle:
                pids = [int(pid) for pid in handle.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                total = 0
                for thread in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{thread}/schedstat", encoding="ascii") as s:
                        total += int(s.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            found[pid] = total
    return found


@dataclass(frozen=True)
class CpuMark:
    """A point of ``cpu_mark``: user plus system seconds of this process and its waited-for
    children, and each live child's nanoseconds."""

    seconds: float
    live: dict[int, int]


def cpu_mark() -> CpuMark:
    return CpuMark(sum(_cpu_times()), _live_children_ns())


def cpu_since(mark: CpuMark) -> float:
    """Processor seconds since ``mark`` of this process (all its threads) and of its child
    processes, those waited for meanwhile and those still running (a child alive at
    ``mark`` and waited for since is counted from ``mark`` on)."""
    now = cpu_mark()
    live = sum(ns - mark.live.get(pid, 0) for pid, ns in now.live.items())
    gone = sum(ns for pid, ns in mark.live.items() if pid not in now.live)
    return now.seconds - mark.seconds + (live - gone) / 1e9


@contextmanager
def served(state_dir: Path, repos: dict[str, Path], workers: int = 1) -> Iterator[str]:
    """``promoter serve --workers workers`` of ``repos`` in its own process: its URL
    (``served_process`` for its process id too)."""
    with served_process(state_dir, repos, workers) as (url, _):
        yield url


def tree_cpu_seconds(pid: int) -> float:
    """User plus system seconds of process ``pid`` and every live descendant so far
    (``/proc``; a descendant that ended is counted only once its parent waited for it)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            # after the name: state is field 3; utime, stime, cutime, cstime are 14-17
            total += sum(int(v) for v in fields[11:15]) / ticks
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", "rb") as children:
                    pending += [int(c) for c in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def ready_url(proc: subprocess.Popen[bytes]) -> str:
    """The address a ``promoter serve --port 0`` started by ``proc`` prints on its stderr
    once it serves."""
    assert proc.stderr is not None
    for raw in proc.stderr:
        line = raw.decode(errors="replace").rstrip()
        if line.startswith("promoter: ready on "):
            return line.removeprefix("promoter: ready on ")
    raise RuntimeError("the benchmark daemon exited before it was ready")


@contextmanager
def served_process(
    state_dir: Path, repos: dict[str, Path], workers: int = 1
) -> Iterator[tuple[str, int]]:
    """``promoter serve --workers workers`` of ``repos`` in its own process: its URL and
    process id (its workers are its children).

    How a deployed daemon runs: its own interpreter, so the client's work (hashing,
    framing, JSON) does not share its lock. Ready when it prints its URL on stderr.
    Of the caller's ``PROMOTER_*`` variables only ``PROMOTER_GROUP_SYNC`` is passed on
    (so that a run can compare the daemon with and without group syncs).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PROMOTER_") or k == "PROMOTER_GROUP_SYNC"
    }
    argv = [sys.executable, "-m", "promoter.cli.main", "serve", "--state-dir", str(state_dir)]
    argv += ["--port", "0", "--workers", str(workers)]
    for name, path in repos.items():
        argv += ["--repo", f"{name}={path}"]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        url = ready_url(proc)
        assert proc.stderr is not None
        drain = threading.Thread(target=proc.stderr.read, daemon=True)  # the pipe never fills
        drain.start()
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(120)


@contextmanager
def daemon_process(state_dir: Path, repo: Path) -> Iterator[tuple[str, str, str]]:
    """``served`` with one serving process (the figures are one process's), of one
    repository: ``(url, orchestrator token, identity)``."""
    with served(state_dir, {bd.REPO_NAME: repo}) as url:
        token = (state_dir / "credentials" / "orchestrator.token").read_text().strip()
        with PromoterClient(url, token, timeout=60) as orch:
            identity = str(orch.repositories()[0]["repository_identity"])
        yield url, token, identity
