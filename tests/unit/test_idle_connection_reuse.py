"""The loopback pool reuses an idle connection only well inside the daemon's keep-alive.

The daemon closes a connection idle for ``KEEP_ALIVE_SECONDS``. A request written as it
closes one (it has stopped reading; its close not yet seen by the client) is met with the
close, unanswered, and a ``POST`` is not sent again: the command fails with "cannot reach
the promoter server". A server here plays that daemon exactly: it answers the first
request of each connection and meets a second one on it with its close. The client's
clock is the test's, so the connection's age is set, not waited for. Within the age, a call
that will not be sent again goes on a new connection, and an idempotent one met by the
close is sent again.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from promoter.api.server import KEEP_ALIVE_SECONDS, make_server
from promoter.client.direct import REUSE_SECONDS, DirectClient
from promoter.client.sync import REPLAYED_BYTES, PromoterClient
from promoter.client.transport import Transport
from promoter.client.wire import Backoff, pool_options
from promoter.domain.blob_frames import BATCH_BLOB_MAX
from tests.unit.test_http1_hostile_answers import _ok, _read_request


class ClosesWhenReused:
    """Answers the first request of each connection and keeps it; a second request on it is
    read and met with the connection's close, unanswered."""

    def __init__(self) -> None:
        self.accepted = 0
        self.unanswered = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._held: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            reader = conn.makefile("rb")
            if _read_request(reader) is None:
                reader.close()
                conn.close()
                continue
            conn.sendall(_ok(b'{"connection": %d}' % self.accepted))
            held = threading.Thread(target=self._idle, args=(conn, reader), daemon=True)
            held.start()
            self._held.append(held)

    def _idle(self, conn: socket.socket, reader: io.BufferedReader) -> None:
        with conn, reader:  # both: the file holds the socket open too
            if _read_request(reader) is not None:
                self.unanswered += 1  # the keep-alive ended as it came

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the waiting ``accept``
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(10)
        for held in self._held:
            held.join(10)


def _other() -> httpx.Client:
    raise AssertionError("a loopback request went to httpx's client")


def test_a_connection_whose_last_request_is_reuse_seconds_old_is_replaced() -> None:
    server = ClosesWhenReused()
    now = [100.0]
    client = DirectClient(server.url, {}, 5.0, _other, clock=lambda: now[0])
    try:
        assert client.request("POST", "/first", json={}).json() == {"connection": 1}
        now[0] += REUSE_SECONDS  # that long since the first request was sent
        assert client.request("POST", "/second", json={}).json() == {"connection": 2}
    finally:
        client.close()
        server.close()
    assert (server.accepted, server.unanswered) == (2, 0)


def test_a_connection_reused_at_once_carries_the_next_request() -> None:
    server = ClosesWhenReused()
    now = [100.0]
    client = DirectClient(server.url, {}, 5.0, _other, clock=lambda: now[0])
    try:
        assert client.request("GET", "/first").json() == {"connection": 1}
        now[0] += REUSE_SECONDS / 2
        with contextlib.suppress(httpx.HTTPError):  # this server never answers a reuse
            client.request("GET", "/second")
    finally:
        client.close()
        server.close()
    assert (server.accepted, server.unanswered) == (1, 1)  # reused: one connection


async def _app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never served")


def test_the_reuse_bound_leaves_room_under_the_daemons_keep_alive() -> None:
    server = make_server(_app, "127.0.0.1", 0)
    assert server.config.timeout_keep_alive == KEEP_ALIVE_SECONDS
    assert 2 * REUSE_SECONDS < KEEP_ALIVE_SECONDS


def test_httpx_pools_keep_an_idle_connection_as_long_as_the_loopback_pool() -> None:
    limits = pool_options("https://promoter.example", None, 5.0, None)["limits"]
    assert limits.keepalive_expiry == REUSE_SECONDS
    assert (limits.max_connections, limits.max_keepalive_connections) == (100, 20)  # httpx's


def _transport(server: ClosesWhenReused, slept: list[float]) -> Transport:
    return Transport(server.url, None, timeout=5.0, backoff=Backoff(sleep=slept.append))


def _chunks() -> Iterator[bytes]:
    yield b"{}"


@pytest.mark.parametrize(
    ("method", "content", "idempotent"),
    [
        ("POST", b"{}", None),  # not idempotent: a second mint, a second run
        ("POST", _chunks, True),  # idempotent, but its body streamed once
        ("PUT", _chunks, None),
    ],
    ids=["post", "streamed-post", "streamed-put"],
)
def test_a_call_never_sent_again_is_not_written_on_an_idle_connection(
    method: str, content: bytes | Callable[[], Iterator[bytes]], idempotent: bool | None
) -> None:
    server = ClosesWhenReused()
    slept: list[float] = []
    transport = _transport(server, slept)
    body = content if isinstance(content, bytes) else content()
    try:
        assert transport._json("GET", "/first") == {"connection": 1}
        # at once, well inside the reuse bound: the idle connection would carry it
        answer = transport._json(method, "/second", content=body, idempotent=idempotent)
        assert answer == {"connection": 2}
    finally:
        transport.close()
        server.close()
    assert (server.accepted, server.unanswered, slept) == (2, 0, [])


def test_an_idempotent_call_met_by_the_close_is_sent_again_on_a_new_connection() -> None:
    server = ClosesWhenReused()
    slept: list[float] = []
    transport = _transport(server, slept)
    try:
        assert transport._json("GET", "/first") == {"connection": 1}
        assert transport._json("GET", "/second") == {"connection": 2}
    finally:
        transport.close()
        server.close()
    assert (server.accepted, server.unanswered, slept) == (2, 1, [Backoff().first])


def test_a_small_one_request_met_by_the_close_is_sent_again_whole() -> None:
    """The one request (blobs, bundle, promotion) answers the same operation however often
    it is asked: a small body is held whole, goes on the idle connection, and, met by its
    close, is sent again on a new one; a body past ``REPLAYED_BYTES`` goes on a new one."""
    server = ClosesWhenReused()
    slept: list[float] = []
    client = PromoterClient(server.url, None, timeout=5.0, backoff=Backoff(sleep=slept.append))
    small = [("ab" * 32, 3, b"one")]
    piece = BATCH_BLOB_MAX  # the largest blob the request itself carries
    large = [(f"{n:064x}", piece, b"x" * piece) for n in range(REPLAYED_BYTES // piece)]
    try:
        assert client._json("GET", "/first") == {"connection": 1}
        sent = client.promote_with_evidence({"bundle": 1}, small, 1, executor_token="t")
        assert sent == {"connection": 2}  # the idle one met the close: sent again, whole
        sent = client.promote_with_evidence({"bundle": 2}, large, 1, executor_token="t")
        assert sent == {"connection": 3}  # streamed: never on the idle one
    finally:
        client.close()
        server.close()
    assert (server.accepted, server.unanswered, slept) == (3, 1, [Backoff().first])
