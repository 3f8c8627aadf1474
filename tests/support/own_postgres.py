"""A PostgreSQL server a test starts, stops and starts again itself: ``initdb`` and ``pg_ctl``.

The cluster lives in a temporary directory of its own (owned by the ``postgres`` user,
as the server refuses to run as root), listens on a free loopback port (below the
ephemeral range: ``_free_port``) with its socket in that directory, and trusts local
connections. ``stop`` and ``start`` are synchronous (``pg_ctl --wait``): when they return
the server is down or answers;
``start_if_stopped`` serves the next test after one that failed with the server down.
The machine's own server is never touched. ``binaries`` finds ``initdb`` (``None`` when PostgreSQL is not
installed: the test skips). On leaving, the server is stopped and the directory, which
this module made, removed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_USER = "postgres"
_LOWEST = 10_000  # below: the ports well-known services are given


def binaries() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest installed), or ``None``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        return None
    try:
        pwd.getpwnam(_USER)
    except KeyError:
        return None
    return Path(found[-1]).parent


def _free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range where it can be: the
    tests stop the server and start it again, and while it is down a port in that range
    may be given to another process's bind of port 0 or outgoing connection (then the
    start fails). Only a port chosen by name, as this one is, can take it meanwhile."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    first = int(ranges.read_text().split()[0]) if ranges.exists() else 0
    candidates = list(range(_LOWEST, first))
    random.shuffle(candidates)  # two clusters starting at once seldom try the same one
    for port in [*candidates, 0]:  # 0: the kernel's choice, where none below is free
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise RuntimeError("no free loopback port")


class OwnPostgres:
    """One throwaway cluster: its URL, and ``stop``/``start`` that wait until done."""

    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        self._bin, self._root, self.port = bin_dir, root, port
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", _USER, "--", *argv]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1"
        log = str(self._root / "server.log")
        data = str(self._root / "data")
        self._run(str(self._bin / "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        data = str(self._root / "data")
        self._run(str(self._bin / "pg_ctl"), "-D", data, "-m", mode, "-w", "stop")

    def start_if_stopped(self) -> None:
        """Start the server unless it runs (``pg_ctl status`` exits 3 when it does not);
        a test that failed with the server stopped leaves the next one a running server."""
        data = str(self._root / "data")
        command = ["runuser", "-u", _USER, "--", str(self._bin / "pg_ctl"), "-D", data, "status"]
        if subprocess.run(command, capture_output=True, timeout=60).returncode != 0:
            self.start()

    def halt(self) -> None:
        """Stop the server if it runs (on leaving; a stopped one is fine)."""
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop("immediate")


@contextmanager
def own_postgres(bin_dir: Path) -> Iterator[OwnPostgres]:
    """A new cluster, started; stopped and removed on leaving."""
    root = Path(tempfile.mkdtemp(prefix="promoter-pg-"))
    user = pwd.getpwnam(_USER)
    os.chown(root, user.pw_uid, user.pw_gid)
    server = OwnPostgres(bin_dir, root, _free_port())
    try:
        initdb = str(bin_dir / "initdb")
        server._run(initdb, "-D", str(root / "data"), "-A", "trust", "-U", _USER, "--no-sync")
        server.start()
        try:
            yield server
        finally:
            server.halt()
    finally:
        shutil.rmtree(root, ignore_errors=True)  # made by mkdtemp above
