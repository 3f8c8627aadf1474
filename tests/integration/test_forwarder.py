"""The partition forwarder itself (``tests.support.forwarder``), against an echo server on
loopback: bytes pass while open; a pause holds them until the heal; a reset cut resets the
client and ends the server's side; a black hole swallows what the client sends, ends the
server's side and resets the client at the heal; a healed forwarder passes new
connections. Every wait is on a byte, an end of connection or the forwarder's own
counters; none on time.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.forwarder import Forwarder

_BOUND = 30.0


class Echo:
    """An echo server on loopback; ``ended`` is set for each connection it saw end."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.ended: list[threading.Event] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            ended = threading.Event()
            self.ended.append(ended)
            threading.Thread(target=self._echo, args=(connection, ended), daemon=True).start()

    @staticmethod
    def _echo(connection: socket.socket, ended: threading.Event) -> None:
        with connection:
            while True:
                try:
                    data = connection.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    ended.set()
                    return
                connection.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    try:
        yield server
    finally:
        server.close()


def _connect(forwarder: Forwarder) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", forwarder.port))
    client.settimeout(_BOUND)  # a bound on a broken test, never a synchronization
    return client


def _nothing_waiting(client: socket.socket) -> bool:
    client.setblocking(False)
    try:
        client.recv(1)
    except BlockingIOError:
        return True
    finally:
        client.settimeout(_BOUND)
    return False


def test_bytes_pass_and_a_pause_holds_them_until_the_heal(echo: Echo) -> None:
    with Forwarder(echo.port) as forwarder, _connect(forwarder) as client:
        client.sendall(b"first")
        assert client.recv(16) == b"first"
        forwarder.pause()
        client.sendall(b"held")
        assert _nothing_waiting(client)  # nothing passes while paused
        forwarder.heal()
        assert client.recv(16) == b"held"


def test_a_reset_cut_resets_the_client_and_ends_the_server_side(echo: Echo) -> None:
    with Forwarder(echo.port) as forwarder:
        client = _connect(forwarder)
        client.sendall(b"x")
        assert client.recv(1) == b"x"
        forwarder.cut("reset")
        assert echo.ended[0].wait(_BOUND)
        with pytest.raises(ConnectionResetError):
            client.recv(1)
        client.close()
        with _connect(forwarder) as later, pytest.raises(ConnectionResetError):
            later.recv(1)  # accepted, and reset at once
        forwarder.heal()
        with _connect(forwarder) as healed:
            healed.sendall(b"again")
            assert healed.recv(16) == b"again"
        assert forwarder.accepted == 3


def test_a_black_hole_swallows_and_resets_the_client_at_the_heal(echo: Echo) -> None:
    with Forwarder(echo.port) as forwarder:
        client = _connect(forwarder)
        client.sendall(b"x")
        assert client.recv(1) == b"x"
        forwarder.cut("drop")
        assert echo.ended[0].wait(_BOUND)  # the server's side ended at once
        client.sendall(b"lost")  # the client's side is open and silent
        forwarder.until_swallowed(0)
        assert _nothing_waiting(client)
        forwarder.heal()
        with pytest.raises(ConnectionResetError):
            client.recv(1)
        client.close()
        assert len(echo.ended) == 1  # the swallowed bytes never reached the server
        with _connect(forwarder) as healed:
            healed.sendall(b"again")
            assert healed.recv(16) == b"again"
