"""Webhook receivers on loopback ports that attack the sender, for tests.

Each is a threaded TCP server speaking just enough HTTP/1.1 by hand, so the test decides
every byte of the answer and sees how the daemon's connection ended. ``Recorder`` answers
204 and records each request; ``Hose`` answers 200 with a 1 GiB body generated lazily
and records how much it sent before the connection was closed under it; ``Drip`` sends
the answer's headers, then one byte each time the test calls ``drip()``, and never
finishes on its own. Nothing here sleeps to synchronize: the test waits on conditions.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

BOUND = 120.0
GIB = 1024**3


@dataclass
class Request:
    head: str
    headers: dict[str, str]
    body: bytes


def read_request(sock: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    raw_head, _, rest = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return Request(lines[0], headers, rest[:length])


@dataclass
class _Server:
    handle: Callable[[socket.socket, Request], None]
    requests: list[Request] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                request = read_request(sock)
                if request is None:
                    return
                with owner.changed:
                    owner.requests.append(request)
                    owner.changed.notify_all()
                owner.handle(sock, request)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, predicate: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, BOUND), self.requests

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Recorder(_Server):
    def __init__(self) -> None:
        super().__init__(self._answer)

    def _answer(self, sock: socket.socket, _request: Request) -> None:
        sock.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")


class Hose(_Server):
    """200 with ``Content-Length: 1 GiB``, written 64 KiB at a time until the peer leaves."""

    def __init__(self) -> None:
        self.ends: list[tuple[int, bool]] = []  # (body bytes sent, closed under it)
        super().__init__(self._answer)

    def _answer(self, sock: socket.socket, _request: Request) -> None:
        sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n".encode())
        chunk, sent, closed = bytes(64 * 1024), 0, False
        try:
            while sent < GIB:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:  # EPIPE / ECONNRESET: the daemon stopped reading and closed
            closed = True
        with self.changed:
            self.ends.append((sent, closed))
            self.changed.notify_all()


class Drip(_Server):
    """Headers, then one body byte per ``drip()``; never the whole body."""

    def __init__(self) -> None:
        self.drops = threading.Semaphore(0)
        self.done = threading.Event()
        self.hanging = 0  # connections that got their headers and are still open
        self.ended: list[str] = []
        super().__init__(self._answer)

    def drip(self, count: int = 1) -> None:
        for _ in range(count):
            self.drops.release()

    def _answer(self, sock: socket.socket, _request: Request) -> None:
        with self.changed:
            self.hanging += 1
            self.changed.notify_all()
        how = "released"
        try:
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            while not self.done.is_set():
                if self.drops.acquire(timeout=0.05):  # a drop, or a look at ``done``
                    sock.sendall(b"x")
                sock.settimeout(0)
                try:
                    if sock.recv(1) == b"":
                        how = "closed by the sender"
                        break
                except BlockingIOError:
                    pass
                finally:
                    sock.settimeout(None)
        except OSError:
            how = "closed by the sender"
        with self.changed:
            self.hanging -= 1
            self.ended.append(how)
            self.changed.notify_all()
