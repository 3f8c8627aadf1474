"""``promoter serve --workers N``: N serving processes on one socket, one ledger, one state.

One interpreter runs Python on one core at a time, so a daemon that should use every
core runs several processes. The parent (``serve``) binds the socket, migrates the
database, creates the trusted tokens and publishes the signing keyring once, closes its
database and only then starts the workers: each is a fresh interpreter (``python -P -m
promoter.api.fleet``, the parent's package first on its path, never the directory serve
was started from) that inherits the listening socket and a readiness pipe, builds its
own services without migrating, and serves with uvicorn on that socket
(the kernel hands each connection to one of them). The parent announces
``promoter: ready on URL`` once every worker wrote its byte on the pipe.

What may run in every worker and what in one (worker 0, ``primary``):

- every worker: requests, its own owner lease heartbeat and watchdog (each sweeps the
  operations its own process owns; marking and recovering an orphan is a status-checked
  transaction under the repository lock, so two workers cannot both do it), the snapshot
  watch of a repository (each watch sees every worker's writes: inotify watches the
  worktree), the start-up rehearsal;
- worker 0 only: the start-up recovery scan and the webhook dispatcher (a worker's
  commit is seen by it at its next re-check, ``RECHECK_SECONDS``).

The repository lock (a file lock) and the ledger serialize what must be serialized
between workers as between daemons. SQLite in WAL takes one writer at a time; the others
wait in the ledger's write queue (``promoter.store.write_queue``), up to the busy timeout
(``docs/operator/workers.md`` says when to move to PostgreSQL).
Kept in memory, so per worker: the admission of costly reads. Shared through the
ledger: the console's sessions, so a browser is served by whichever worker takes its
connection. Shared through files: the metrics, one set for the daemon. The parent creates
the directory (``promoter.api.metrics_dir``) and starts each worker with
``PROMETHEUS_MULTIPROC_DIR`` naming it, so prometheus_client keeps the worker's counters
there from its first import; a scrape sums every worker's (``promoter.api.metrics``); a
worker that ended is marked dead (its counts stay) and the parent removes the directory
once every worker ended. The default is one worker
per core this process may run on (``default_count``); ``--workers 1`` serves from one
process.

A worker that exits while the daemon was not asked to stop stops the others; the parent
then exits with that worker's status (a signal as 128 + its number), so a service
manager restarts the whole daemon. A stopping signal (SIGTERM, SIGINT, SIGHUP) to the
parent is passed on to every worker as SIGTERM; the workers are in their own process
group, so a terminal's Ctrl-C reaches them once, through the parent. A worker dies with
its parent (``PR_SET_PDEATHSIG``): a killed daemon leaves no worker behind.

Deliberately not here: what a worker serves (``promoter.api.app``) and how it listens
(``promoter.api.server``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client.multiprocess import mark_process_dead

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # where this ``promoter`` is

log = logging.getLogger("promoter.serve")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_PR_SET_PDEATHSIG = 1
_STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class WorkerArgs:
    """What a worker is started with: the ``serve`` flags, its socket and pipe, its index."""

    index: int
    listen_fd: int
    ready_fd: int
    parent: int
    config: str | None
    overrides: dict[str, Any]
    log_format: str
    metrics_dir: str | None = None

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> WorkerArgs:
        return cls(**json.loads(text))


def default_count() -> int:
    """One worker per core this process may run on (its CPU affinity), at least one."""
    return max(1, len(os.sched_getaffinity(0)))


def _exit_status(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Fleet:
    """The parent's side: start the workers, wait until they are ready, supervise them."""

    def __init__(
        self,
        count: int,
        sock: socket.socket,
        *,
        config: Path | None,
        overrides: dict[str, Any],
        log_format: str,
        metrics_dir: Path | None = None,
    ) -> None:
        self.count = count
        self.metrics_dir = metrics_dir
        self.sock = sock
        self.config = None if config is None else str(config)
        self.overrides = overrides
        self.log_format = log_format
        self.pids: dict[int, int] = {}  # pid -> index
        self.stopping = False
        self.status: int | None = None  # the first worker's unasked-for exit

    def _start(self, index: int, ready_fd: int) -> None:
        args = WorkerArgs(
            index=index,
            listen_fd=self.sock.fileno(),
            ready_fd=ready_fd,
            parent=os.getpid(),
            config=self.config,
            overrides=self.overrides,
            log_format=self.log_format,
            metrics_dir=None if self.metrics_dir is None else str(self.metrics_dir),
        )
        env = dict(os.environ)
        if self.metrics_dir is not None:  # read by prometheus_client at its first import
            env[MULTIPROC_ENV] = str(self.metrics_dir)
        # the parent's own package, never one in the directory serve was started from: ``-m``
        # puts that directory first on the path (a ``promoter/`` there ran as the daemon)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_PACKAGE_ROOT, env.get("PYTHONPATH"))))
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", "promoter.api.fleet", args.encode()],
            pass_fds=(self.sock.fileno(), ready_fd),
            stdin=subprocess.DEVNULL,
            env=env,
            process_group=0,  # Ctrl-C reaches the parent only; it passes SIGTERM on once
        )
        self.pids[child.pid] = index

    def _signal_all(self, signum: int) -> None:
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self._signal_all(signal.SIGTERM)

    def _reap(self, block: bool) -> bool:
        """Collect one ended worker (waiting for one when ``block``); whether one ended."""
        if not self.pids:
            return False
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.pids.clear()
            return False
        if pid == 0 or pid not in self.pids:
            return pid != 0
        index = self.pids.pop(pid)
        code = _exit_status(status)
        if self.metrics_dir is not None:  # its counts stay; its live gauges' files go
            mark_process_dead(pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
        if not self.stopping:
            log.error("worker %d (pid %d) ended with status %d: the others stop", index, pid, code)
            self.status = code
            self.stopping = True
            self._signal_all(signal.SIGTERM)
        return True

    def run(self, on_ready: Callable[[], None]) -> int:
        """Start the workers, call ``on_ready`` once all serve, return when all ended:
        0, or the status of the worker whose exit stopped the daemon."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _STOPPING}
        ready_r, ready_w = os.pipe()
        try:
            for index in range(self.count):
                self._start(index, ready_w)
            os.close(ready_w)
            ready_w = -1
            seen = 0
            while seen < self.count and not self.stopping:
                readable, _, _ = select.select([ready_r], [], [], 0.25)
                if readable:
                    got = os.read(ready_r, self.count)
                    if not got:
                        break  # every worker closed its end: each one ended
                    seen += len(got)
                self._reap(block=False)
            if seen >= self.count and not self.stopping:
                on_ready()
            while self.pids:
                self._reap(block=True)
        finally:
            if ready_w >= 0:
                os.close(ready_w)
            os.close(ready_r)
            self._signal_all(signal.SIGKILL)  # none is left behind, whatever happened here
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self.status or 0


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the call: nobody supervises this one
        os._exit(1)


def worker_main(encoded: str) -> None:
    """A worker: serve on the inherited socket until told to stop (the module docstring)."""
    args = WorkerArgs.decode(encoded)
    _die_with_parent(args.parent)
    from promoter.adapters.webhooks import daemon_services
    from promoter.api import logs
    from promoter.api.app import create_app
    from promoter.api.connections import ClientBounds
    from promoter.api.fd_limit import raise_open_files
    from promoter.api.gc_policy import tune_for_serving
    from promoter.api.server import make_server
    from promoter.config import load_settings, parse_repo_flags

    overrides = dict(args.overrides)
    if overrides.get("repositories") is not None:
        overrides["repositories"] = parse_repo_flags(overrides["repositories"])
    config = None if args.config is None else Path(args.config)
    settings = load_settings(config, **overrides)
    logs.configure(args.log_format, settings.log_level)  # type: ignore[arg-type]
    sock = socket.socket(fileno=args.listen_fd)
    services = daemon_services(settings, migrate=False)  # the parent migrated
    shared = None if args.metrics_dir is None else Path(args.metrics_dir)
    app = create_app(settings, services, primary=args.index == 0, shared_metrics=shared)

    def ready(_: str) -> None:
        os.write(args.ready_fd, b"1")
        os.close(args.ready_fd)

    raise_open_files()  # before the server: its connections' cap is half the limit
    server = make_server(
        app,
        settings.host,
        settings.port,
        log_level=settings.log_level,
        on_exit=services.stopping.set,
        on_ready=ready,
        bounds=ClientBounds.of(settings),
    )
    tune_for_serving()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        services.close()


if __name__ == "__main__":
    worker_main(sys.argv[1])
