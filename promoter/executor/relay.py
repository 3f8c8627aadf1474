"""The sandbox's one way out: a Unix socket whose connections are forwarded to the daemon.

``Relay(url)`` listens on ``<private dir>/daemon.sock`` (bound into a confined sandbox at
``/run/promoter/daemon.sock``) and forwards each connection to the daemon's TCP address.
It is bounded like the sandbox itself (TESTS E5): one thread serves every connection
through a selector (no thread per connection), at most ``MAX_CONNECTIONS`` are open at
once and another is closed as soon as it is accepted, at most as many more may still be
draining (their client done, the daemon's answer on its way), a connection on which no
byte has come from the daemon for ``IDLE_SECONDS`` (since it opened, or since the daemon's
last bytes) is closed whatever the client sends, and each direction buffers at most ``CHUNK`` bytes
(a side that does not read stops the other from being read). The idle clock is the
daemon's side only, a deadline on each answer: a client that drips its request a byte every
few minutes, or reads its answer a byte at a time (the relay reads the daemon only as fast
as the client takes), holds its slot ``IDLE_SECONDS`` at most. Whatever the command does
with the socket, the host-side process keeps one thread for it and the daemon sees at
most ``2 * MAX_CONNECTIONS`` connections from it.

The client's end of input is forwarded as a half-close (the daemon's answer still
comes back); a connection ends once the daemon has ended it and all it sent was
delivered, on an error, or when the daemon's side has been idle. Within one
wake-up the relay serves its open connections before it accepts new ones, so the slots
of connections the command closed are free before its next connection is looked at.

Deliberately not here: any reading of what crosses (the daemon authorises every request
with the run's executor token), and the forwarder inside the sandbox
(``sandbox_entry.py``: the command's own process, within its limits).
"""

from __future__ import annotations

import contextlib
import errno
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from promoter.errors import PathUnsafe
from promoter.fs.own_entry import Made
from promoter.lazy_log import LazyLogger

__all__ = ["CHUNK", "IDLE_SECONDS", "MAX_CONNECTIONS", "Relay"]

log = LazyLogger("promoter.run")

MAX_CONNECTIONS = 32  # open at once per run; more are closed when accepted
# without a byte from the daemon: above its longest silent answer (a promotion's wait: 600 s)
IDLE_SECONDS = 900.0
CHUNK = 1 << 16  # bytes read at once, and buffered at most, per direction
_ACCEPTS_PER_WAKE = 256  # a flood of connections cannot keep the others waiting
_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE


class _Pair:
    """One connection from the sandbox and its connection to the daemon."""

    def __init__(self, client: socket.socket, upstream: socket.socket, now: float) -> None:
        self.client = client
        self.upstream = upstream
        self.connecting = True
        self.to_upstream = b""
        self.to_client = b""
        self.client_done = False  # no more bytes from the client
        self.upstream_done = False  # no more bytes from the daemon
        self.heard = now  # when the daemon's side last moved bytes (or the pair opened)

    @property
    def draining(self) -> bool:
        return self.client_done


class Relay:
    """A Unix socket whose every connection is forwarded to the daemon's TCP address."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        try:  # asked as ASCII bytes: a str host loads the idna codec
            name: str | bytes = host.encode("ascii")
        except UnicodeEncodeError:
            name = host
        self.targets = [
            (info[0], info[4]) for info in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        ]
        self.max_connections = max_connections
        self.idle_seconds = idle_seconds
        self._clock = clock
        # a short private directory: a socket's path has at most 107 bytes
        self._made_directory = Made.mkdtemp("promoter-relay-")
        self.directory = Path(self._made_directory.path)
        self.path = self.directory / "daemon.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._made_socket = Made.record(self.path)
        self._server.listen(max_connections)
        self._server.setblocking(False)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, _READ)
        self._selector.register(self._wake_read, _READ)
        self._pairs: dict[socket.socket, _Pair] = {}  # both sockets of each pair
        self._stop = False
        self._closed = False
        self.refused = 0  # connections closed at once: over the bound
        self._thread = threading.Thread(target=self._serve, name="promoter-relay", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._pairs) // 2  # two sockets a connection; read from any thread

    def wake(self) -> None:
        """Make the relay look at its connections now (idle ones are closed)."""
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\0")

    def _serve(self) -> None:
        try:
            while not self._stop:
                accept = self._handle(self._selector.select(self._timeout()))
                self._close_idle()
                if accept and not self._stop:  # after the others: freed slots count
                    self._accept()
        except Exception:  # the relay ends; the sandbox's requests fail, the host does not
            log.exception("the relay to the daemon stopped")
        finally:
            for pair in set(self._pairs.values()):
                self._drop(pair)
            self._selector.close()

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> bool:
        """Serve the ready connections; whether the listener has one waiting."""
        accept = False
        for key, mask in events:
            sock = key.fileobj
            if sock is self._server:
                accept = True
            elif sock is self._wake_read:
                with contextlib.suppress(OSError):
                    self._wake_read.recv(4096)
            else:
                assert isinstance(sock, socket.socket)
                pair = self._pairs.get(sock)
                if pair is not None:
                    self._step(pair, sock, mask)
        return accept

    def _full(self) -> bool:
        pairs = set(self._pairs.values())
        draining = sum(1 for pair in pairs if pair.draining)
        return len(pairs) - draining >= self.max_connections or draining >= self.max_connections

    def _timeout(self) -> float | None:
        if not self._pairs:
            return None
        oldest = min(pair.heard for pair in self._pairs.values())
        return max(0.0, oldest + self.idle_seconds - self._clock())

    def _close_idle(self) -> None:
        now = self._clock()
        for pair in set(self._pairs.values()):
            if now - pair.heard >= self.idle_seconds:
                self._drop(pair)

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                client, _ = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                if client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    client.close()  # closed by the command before it was accepted
                    continue
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                client.close()
                continue
            if self._full():
                self._handle(self._selector.select(0))  # what ended before this one came
                self._drop_hung_up()
            if self._full():
                self.refused += 1
                client.close()  # over the bound: closed at once, nothing queued
                continue
            self._open(client)

    def _drop_hung_up(self) -> None:
        """At the bound, end the pairs whose client closed its socket whole (not only its
        sending side): nothing the daemon says could reach it, so its slot is better given
        to a live connection than held until the daemon's side closes too."""
        for pair in set(self._pairs.values()):
            poller = select.poll()
            poller.register(pair.client, select.POLLHUP)
            if any(events & select.POLLHUP for _, events in poller.poll(0)):
                self._drop(pair)

    def _open(self, client: socket.socket) -> None:
        client.setblocking(False)
        upstream = self._connect_upstream()
        if upstream is None:
            client.close()
            return
        pair = _Pair(client, upstream, self._clock())
        self._pairs[client] = pair
        self._pairs[upstream] = pair
        self._selector.register(client, _READ)
        self._selector.register(upstream, _WRITE)

    def _connect_upstream(self) -> socket.socket | None:
        for family, address in self.targets:
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.setblocking(False)
            code = upstream.connect_ex(address)
            if code in (0, errno.EINPROGRESS):
                return upstream
            upstream.close()
        return None

    def _step(self, pair: _Pair, sock: socket.socket, mask: int) -> None:
        """Move what ``sock`` is ready for; the pair's interests updated or it ends.

        Only bytes from the daemon put off the pair's idle end: the client's own bytes do
        not, so one dripped every few minutes cannot hold its slot for ever.
        """
        try:
            if sock is pair.upstream and pair.connecting:
                if pair.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise ConnectionRefusedError
                pair.connecting = False
            if mask & _READ:
                if sock is pair.client:
                    pair.to_upstream, pair.client_done = _read(sock)
                else:
                    pair.to_client, pair.upstream_done = _read(sock)
                    if pair.to_client:
                        pair.heard = self._clock()
            if not pair.connecting:
                pair.to_upstream = _write(pair.upstream, pair.to_upstream)
            pair.to_client = _write(pair.client, pair.to_client)
            if pair.client_done and not pair.to_upstream and not pair.connecting:
                with contextlib.suppress(OSError):
                    pair.upstream.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(pair)
            return
        if pair.upstream_done and not pair.to_client:
            self._drop(pair)  # the daemon ended it and all it said was delivered
            return
        self._interest(pair)

    def _interest(self, pair: _Pair) -> None:
        """Read a side only while nothing of it waits to be written to the other."""
        client = (0 if pair.client_done or pair.to_upstream else _READ) | (
            _WRITE if pair.to_client else 0
        )
        if pair.connecting:
            upstream = _WRITE
        else:
            upstream = (0 if pair.upstream_done or pair.to_client else _READ) | (
                _WRITE if pair.to_upstream else 0
            )
        for sock, events in ((pair.client, client), (pair.upstream, upstream)):
            key = self._selector.get_map().get(sock)
            if events and key is None:
                self._selector.register(sock, events)
            elif events and key is not None and key.events != events:
                self._selector.modify(sock, events)
            elif not events and key is not None:
                self._selector.unregister(sock)

    def _drop(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.upstream):
            self._pairs.pop(sock, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()

    def close(self) -> None:
        """Stop serving, end every connection, remove the socket and its directory."""
        if self._closed:
            return
        self._closed = True
        self._stop = True
        self.wake()
        self._thread.join()
        self._server.close()
        self._wake_read.close()
        self._wake_write.close()
        # both made by this relay: removed only while they are still what it made
        try:
            self._made_socket.remove()
            with contextlib.suppress(OSError):  # not empty: it stays
                self._made_directory.remove()
        except PathUnsafe as exc:
            log.warning("%s", exc.detail)


def _read(sock: socket.socket) -> tuple[bytes, bool]:
    """Up to ``CHUNK`` bytes and whether the peer has ended (nothing buffered before)."""
    try:
        data = sock.recv(CHUNK)
    except (BlockingIOError, InterruptedError):
        return b"", False
    return data, not data


def _write(sock: socket.socket, data: bytes) -> bytes:
    """What of ``data`` ``sock`` did not take now."""
    if not data:
        return data
    try:
        sent = sock.send(data)
    except (BlockingIOError, InterruptedError):
        return data
    return data[sent:]
