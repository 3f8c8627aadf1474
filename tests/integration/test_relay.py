"""The sandbox's relay to the daemon is bounded (TESTS E5), against a real daemon.

A connection over ``max_connections`` is closed as soon as it is accepted; a slot the
client closed is free for its next connection; a connection silent past the idle
timeout is closed, and so is one whose client drips its request a byte at a time (the
idle clock is the daemon's side); a test clock moved forward, no waiting; a response larger than the
relay's buffer crosses byte for byte; thousands of held connections leave one relay
thread and a bounded number of connections at the daemon; and clients that never read
their answers stall neither the others nor the relay's close.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.executor.relay import CHUNK, Relay
from tests.support.daemon import Daemon

BOUND = 30.0  # for a broken test only: a relay that keeps what it should close fails, not hangs


@pytest.fixture
def relay(daemon: Daemon) -> Iterator[Relay]:
    made = Relay(daemon.url, max_connections=4)
    try:
        yield made
    finally:
        made.close()


def _connect(relay: Relay) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(relay.path))
    sock.settimeout(BOUND)  # after the connect: a blocking one waits for the relay's accept
    return sock


def _get(sock: socket.socket, path: str) -> bytes:
    """One HTTP/1.0 request: the daemon closes after its answer, read to the end."""
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    answer = b""
    while chunk := sock.recv(1 << 20):
        answer += chunk
    return answer


def _body(answer: bytes) -> bytes:
    return answer.split(b"\r\n\r\n", 1)[1]


def test_a_connection_over_the_bound_is_closed_at_once(relay: Relay) -> None:
    held = [_connect(relay) for _ in range(4)]
    extra = _connect(relay)
    assert extra.recv(1) == b""  # closed by the relay, not queued
    assert relay.refused == 1
    assert _get(held[0], "/healthz").startswith(b"HTTP/1.1 200")
    for sock in (*held, extra):
        sock.close()


def test_slots_the_client_closed_are_free_for_its_next_connection(relay: Relay) -> None:
    for _ in range(3):  # each round fills every slot, then closes them all
        held = [_connect(relay) for _ in range(4)]
        for sock in held:
            sock.close()
        with _connect(relay) as sock:
            assert _get(sock, "/healthz").startswith(b"HTTP/1.1 200")
    assert relay.refused == 0


def test_a_client_that_hung_up_mid_request_frees_its_slot_at_once(relay: Relay) -> None:
    """Each slot holds half a request the daemon still waits for (so the daemon keeps its
    side open); the client then closes its socket whole: nothing could reach it, so the
    next connection is served, not refused as over the bound."""
    held = [_connect(relay) for _ in range(4)]
    for sock in held:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n")  # no end of headers: the daemon waits
    for sock in held:
        sock.close()
    with _connect(relay) as sock:
        assert _get(sock, "/healthz").startswith(b"HTTP/1.1 200")
    assert relay.refused == 0


def test_a_silent_connection_is_closed_after_the_idle_timeout(daemon: Daemon) -> None:
    now = [1000.0]
    relay = Relay(daemon.url, max_connections=4, idle_seconds=60.0, clock=lambda: now[0])
    try:
        silent = _connect(relay)
        busy = _connect(relay)
        assert _get(busy, "/healthz").startswith(b"HTTP/1.1 200")
        now[0] += 61.0
        relay.wake()
        assert silent.recv(1) == b""  # closed by the relay: it was idle
        with _connect(relay) as sock:
            assert _get(sock, "/healthz").startswith(b"HTTP/1.1 200")
        silent.close()
        busy.close()
    finally:
        relay.close()


def test_a_client_dripping_its_request_is_closed_after_the_idle_timeout(
    daemon: Daemon,
) -> None:
    """A client that sends one byte of its request every so often is never silent, yet
    the daemon has nothing to answer: its slot is freed once the daemon's side has said
    nothing for the idle timeout, whatever the client sent in between (a test clock
    moved forward, no waiting: the outcome is the same whenever the relay reads a byte)."""
    now = [1000.0]
    relay = Relay(daemon.url, max_connections=2, idle_seconds=60.0, clock=lambda: now[0])
    try:
        dripping = _connect(relay)
        with _connect(relay) as busy:  # answered: the one before it was accepted at 1000
            assert _get(busy, "/healthz").startswith(b"HTTP/1.1 200")
        request = b"GET /healthz HTTP/1.0\r\n"  # no end of headers: the daemon waits
        for byte in request:
            now[0] += 2.5
            dripping.sendall(bytes([byte]))
        assert now[0] == 1057.5  # one byte every 2.5 s for 57.5 s
        now[0] = 1060.0  # 60 s since it opened, 2.5 s since its last byte
        relay.wake()
        # closed by the relay, the daemon having said nothing (a reset when the relay
        # closed it with the last byte still unread)
        with contextlib.suppress(ConnectionResetError):
            assert dripping.recv(1) == b""
        held = [_connect(relay) for _ in range(2)]  # both its slots are free again
        assert _get(held[1], "/healthz").startswith(b"HTTP/1.1 200")
        assert relay.refused == 0
        for sock in (*held, dripping):
            sock.close()
    finally:
        relay.close()


def test_an_answer_larger_than_the_buffer_crosses_byte_for_byte(
    relay: Relay, daemon: Daemon
) -> None:
    with daemon.client() as direct:
        expected = direct.get("/openapi.json").content
    assert len(expected) > 3 * CHUNK
    with _connect(relay) as sock:
        assert _body(_get(sock, "/openapi.json")) == expected


def _daemon_connections(daemon: Daemon) -> int:
    """Established TCP connections whose local end is the daemon's port."""
    port = int(daemon.url.rsplit(":", 1)[1].split("/")[0])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


def test_three_thousand_held_connections_keep_one_thread_and_few_daemon_connections(
    daemon: Daemon,
) -> None:
    threads = threading.active_count()
    relay = Relay(daemon.url)
    try:
        held = [_connect(relay) for _ in range(3000)]
        for sock in held[relay.max_connections :]:
            assert sock.recv(1) == b""  # each one past the bound: closed at once
        assert relay.refused == 3000 - relay.max_connections
        relays = [t for t in threading.enumerate() if t.name == "promoter-relay"]
        assert len(relays) == 1  # one thread for every connection
        assert threading.active_count() <= threads + 3  # the daemon's own may come and go
        assert _daemon_connections(daemon) <= relay.max_connections
        for sock in held:
            sock.close()
        with _connect(relay) as sock:  # the slots were freed: the next one is served
            assert _get(sock, "/healthz").startswith(b"HTTP/1.1 200")
    finally:
        relay.close()
    assert not [t for t in threading.enumerate() if t.name == "promoter-relay"]


def test_a_client_that_ends_its_input_after_the_request_still_gets_the_answer(
    relay: Relay,
) -> None:
    with _connect(relay) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # a half-close: the answer must still come back
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")


def test_clients_that_never_read_their_answers_stall_neither_the_others_nor_the_close(
    relay: Relay, daemon: Daemon
) -> None:
    """Three of the four slots ask for an answer many times the relay's buffer and never
    read it (their receive buffers shrunk: the relay's writes to them would block): the
    fourth is served at once, and closing the relay, as the run does when its command
    ends, returns at once and ends every held connection (no thread left)."""
    with daemon.client() as direct:
        assert len(direct.get("/openapi.json").content) > 3 * CHUNK
    stuck = [_connect(relay) for _ in range(3)]
    for sock in stuck:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /openapi.json HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    with _connect(relay) as sock:
        assert _get(sock, "/healthz").startswith(b"HTTP/1.1 200")
    closing = threading.Thread(target=relay.close)
    closing.start()
    closing.join(BOUND)
    assert not closing.is_alive()
    for sock in stuck:
        while sock.recv(1 << 16):  # what was in flight, then the end: never a hang
            pass
        sock.close()
    assert not [t for t in threading.enumerate() if t.name == "promoter-relay"]
