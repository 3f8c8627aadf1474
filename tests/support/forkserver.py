"""Daemon processes forked from one that has imported promoter already (a fork server).

A daemon the suite starts as a process (``tests.support.process.DaemonProcess``) is a real
process: killed with SIGKILL, its exit status read, its stderr read line by line. Started
as ``python -m promoter.cli.main serve``, each one first imports the whole server (FastAPI,
SQLAlchemy, the models: about 1.5 s of processor time), and the crash tests start two or
three of them a test. Here one process per test process imports all of that once
(``PRELOAD``) and then forks a child per request, which runs the module as ``__main__``
(``runpy``, as ``-m`` does) with the argv, environment, working directory, open-file limit
and standard streams the test asked for. The test sees a ``Forked``: a ``Popen``-like handle
(``pid``, ``poll``, ``wait``, ``send_signal``, ``stderr``, ``returncode`` — negative for a
signal, as ``Popen`` has it).

The server forks only while it has one thread (it checks), resets its signal handlers in
the child, closes every descriptor but the three streams, and reaps its children, writing
each one's exit status back on the connection that asked for it. It exits, killing the
children still running, when the test process that started it goes away.

Deliberately not here: what a daemon is started with (``DaemonProcess`` decides), and any
command that is not a ``-m`` module run (those keep ``subprocess``). ``PROMOTER_TEST_FORK=0``
turns it off: every daemon is then a fresh interpreter, as before.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import importlib
import json
import os
import resource
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.support import sqlite_template

ENV = "PROMOTER_TEST_FORK"
# what ``promoter serve`` imports before it answers; the child imports anything else itself
PRELOAD = (
    "promoter.cli.main",
    "promoter.cli.app",  # the Typer app and ``serve``: main imports it for ``serve``
    "promoter.api.app",
    "promoter.adapters.webhooks",
    "promoter.engine.services",
    "promoter.store.db",
    "uvicorn",
    "uvicorn.main",
    "httpx",
)
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


# --- the server --------------------------------------------------------------------------


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(_HEADER.size, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    (length,) = _HEADER.unpack(data)
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise EOFError("the request ended early")
        body += chunk
    return json.loads(body), list(fds)


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the requested ``python -m`` run; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, default)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("nofile"):
            resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
        argv: list[str] = request["argv"]
        sys.argv = [argv[0], *argv[3:]]  # runpy puts the module's file first, as -m does
        # runpy's note that the module was imported before it ran as ``__main__``: here
        # that is the point (the fork server imported it), not a mistake
        warnings.filterwarnings("ignore", r".*found in sys\.modules", RuntimeWarning)
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(path: str, parent_fd: int) -> None:
    """Listen at ``path``; fork a child per request; stop when ``parent_fd`` closes."""
    for name in PRELOAD:
        importlib.import_module(name)
    # a child's new ``promoter.db`` starts as a copy of a migrated file, as an in-process
    # daemon's does (``tests.support.sqlite_template``); the copy is the child's own
    with contextlib.ExitStack() as stack:
        stack.enter_context(sqlite_template.install())
        _serve(path, parent_fd)


def _serve(path: str, parent_fd: int) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener.fileno(), wake_r, parent_fd], [], [])
            if parent_fd in ready:
                return
            if wake_r in ready:
                os.read(wake_r, 4096)
                _reap(children)
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                try:
                    request, fds = _recv_request(conn)
                except (OSError, EOFError, ValueError):
                    conn.close()
                    continue
                if threading.active_count() != 1:
                    raise RuntimeError("the fork server has threads; it cannot fork safely")
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                children[pid] = conn
                _reap(children)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        conn.close()


# --- the test side -----------------------------------------------------------------------


class Forked:
    """A child of the fork server, as ``subprocess.Popen`` shows a child."""

    def __init__(self, conn: socket.socket, pid: int, stderr: IO[bytes] | None) -> None:
        self._conn = conn
        self._lines = conn.makefile("rb")
        self.pid = pid
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout or 0)
            self._read_exit()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read_exit(self) -> None:
        line = self._lines.readline()
        if not line:
            raise RuntimeError(f"the fork server went away before pid {self.pid} exited")
        self.returncode = int(json.loads(line)["exit"])
        self._lines.close()
        self._conn.close()


class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="promoter-forkserver-")
        self.path = os.path.join(self.dir, "socket")
        read_end, self._keep = os.pipe()  # the server exits when this process closes it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver", self.path, str(read_end)],
            pass_fds=(read_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
            env={k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")},
        )
        os.close(read_end)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError("the fork server did not start")
        atexit.register(self.close)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._keep)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


_server: _Server | None = None
_server_pid = 0
_lock = threading.Lock()


def _the_server() -> _Server:
    global _server, _server_pid
    with _lock:
        if _server is None or _server_pid != os.getpid() or _server.proc.poll() is not None:
            _server, _server_pid = _Server(), os.getpid()
        return _server


def _start(
    argv: list[str],
    env: dict[str, str],
    streams: tuple[int, int, int],
    *,
    cwd: str | None = None,
    nofile: tuple[int, int] | None = None,
) -> tuple[socket.socket, int]:
    """Ask the server for a child running ``argv`` with ``streams`` as its 0, 1 and 2:
    the connection its exit status will come back on, and its pid."""
    if len(argv) < 3 or argv[1] != "-m":
        raise ValueError("the fork server runs `python -m module` commands only")
    server = _the_server()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server.path)
        body = json.dumps(
            {
                "argv": list(argv),
                "env": env,
                "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                "nofile": list(nofile) if nofile else None,
            }
        ).encode()
        conn.sendmsg(
            [_HEADER.pack(len(body)), body],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", streams).tobytes())],
        )
        return conn, int(json.loads(_readline(conn))["pid"])
    except BaseException:
        conn.close()
        raise


def spawn(
    argv: list[str],
    env: dict[str, str],
    *,
    nofile: tuple[int, int] | None = None,
) -> Forked:
    """Run ``argv`` (``[python, "-m", module, *args]``) as a child of the fork server, with
    stdin from /dev/null, stdout to /dev/null and stderr to a pipe (``Forked.stderr``)."""
    devnull_in = os.open(os.devnull, os.O_RDONLY)
    devnull_out = os.open(os.devnull, os.O_WRONLY)
    read_end, write_end = os.pipe()
    try:
        conn, pid = _start(argv, env, (devnull_in, devnull_out, write_end), nofile=nofile)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        for fd in (devnull_in, devnull_out, write_end):
            os.close(fd)
    return Forked(conn, pid, os.fdopen(read_end, "rb"))


def run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(argv, capture_output=True)`` for a ``python -m`` command, run by the
    fork server (``PROMOTER_TEST_FORK=0``: by ``subprocess`` itself)."""
    if not enabled():
        return subprocess.run(
            argv, env=env, cwd=cwd, input=input, capture_output=True, timeout=timeout, check=False
        )
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        stdin.write(input or b"")
        stdin.seek(0)
        conn, pid = _start(
            argv,
            dict(os.environ) if env is None else env,
            (stdin.fileno(), stdout.fileno(), stderr.fileno()),
            cwd=os.fspath(cwd) if cwd is not None else None,
        )
        child = Forked(conn, pid, None)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        stdout.seek(0)
        stderr.seek(0)
        return subprocess.CompletedProcess(argv, code, stdout.read(), stderr.read())


def run_text(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``run`` with the output decoded, as ``subprocess.run(..., text=True)`` gives it."""
    done = run(argv, env=env, cwd=cwd, timeout=timeout)
    return subprocess.CompletedProcess(
        argv, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def _readline(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise RuntimeError("the fork server closed the connection")
        line += chunk
    return line


def _main(args: Iterator[str]) -> None:
    path, parent_fd = next(args), int(next(args))
    serve(path, parent_fd)


if __name__ == "__main__":
    _main(iter(sys.argv[1:]))
