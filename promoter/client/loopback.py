"""The synchronous client's HTTP transport: the standard library to a loopback daemon.

``LoopbackTransport`` is the httpx transport ``promoter.client.transport`` gives its pool
when the caller gives none. A plain ``http`` request to a loopback address (the daemon
``promoter serve`` records by default) is sent with ``http.client``, which httpx has
loaded already, so the command line does not import httpcore and h11 (some 15–20 ms of
a command's CPU). Every other request (``https``, another host, as a 421 followed to
the owning host may be) goes to the transport httpx would have made itself
(``httpx.HTTPTransport`` with the same TLS context), made on first use. httpx's client
still does everything above the wire: the base URL, headers, timeouts given per request,
the body's framing headers, content decoding, and proxies from the environment.

What it keeps of httpx's own transport: HTTP/1.1; one idle connection per origin kept
for the next request, dropped when the daemon closed it (a readable idle socket) or the
answer was not read to its end; the connect, write and read timeouts of each request;
and its errors as httpx raises them (``ConnectError``, ``ConnectTimeout``,
``WriteError``, ``WriteTimeout``, ``ReadError``, ``ReadTimeout``,
``RemoteProtocolError``), so retries and ``unreachable`` read them alike.
Not here: HTTP/2, Unix sockets, or anything the async client does.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import select
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

_CHUNKED = b"chunked"


def _loopback(url: httpx.URL) -> bool:
    """Whether ``url`` is plain ``http`` to this machine's loopback address."""
    if url.scheme != "http":
        return False
    if url.host == "localhost":
        return True
    try:
        return ipaddress.ip_address(url.host).is_loopback
    except ValueError:
        return False


@contextmanager
def _mapped(
    timeout: type[httpx.TimeoutException], error: type[httpx.TransportError]
) -> Iterator[None]:
    """``socket`` and ``http.client`` failures raised as the httpx errors of one phase."""
    try:
        yield
    except TimeoutError as exc:  # socket.timeout is TimeoutError
        raise timeout(str(exc) or "timed out") from exc
    except (http.client.RemoteDisconnected, http.client.IncompleteRead) as exc:
        raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
    except http.client.HTTPException as exc:
        raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
    except OSError as exc:
        raise error(str(exc)) from exc


def _stale(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection cannot be reused: closed, or closed by the daemon (its
    socket readable with nothing asked: the end of the stream or unexpected bytes)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _Body(httpx.SyncByteStream):
    """An answer's body read from its connection, which goes back to the idle slot once
    the body was read to its end and the daemon keeps the connection open."""

    def __init__(
        self,
        owner: LoopbackTransport,
        key: tuple[str, int],
        connection: http.client.HTTPConnection,
        answer: http.client.HTTPResponse,
    ) -> None:
        self._owner = owner
        self._key = key
        self._connection: http.client.HTTPConnection | None = connection
        self._answer = answer

    def __iter__(self) -> Iterator[bytes]:
        while self._connection is not None and not self._complete():
            with _mapped(httpx.ReadTimeout, httpx.ReadError):
                chunk = self._answer.read1(65536)
            if not chunk:
                return
            yield chunk

    def _complete(self) -> bool:
        """Whether the body was read to its end (its length, or the last chunk, read)."""
        return self._answer.isclosed() or (not self._answer.chunked and self._answer.length == 0)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        reusable = self._complete() and not self._answer.will_close
        self._answer.close()  # the answer only: the connection keeps its socket
        if reusable:
            self._owner.release(self._key, connection)
        else:
            connection.close()


class LoopbackTransport(httpx.BaseTransport):
    """``http.client`` to a loopback daemon, httpx's own transport for any other origin."""

    def __init__(self, verify: ssl.SSLContext) -> None:
        self._verify = verify
        self._other: httpx.HTTPTransport | None = None
        self._idle: dict[tuple[str, int], http.client.HTTPConnection] = {}
        self._lock = threading.Lock()

    def _elsewhere(self) -> httpx.HTTPTransport:
        with self._lock:
            if self._other is None:
                self._other = httpx.HTTPTransport(verify=self._verify)
            return self._other

    def release(self, key: tuple[str, int], connection: http.client.HTTPConnection) -> None:
        """Keep ``connection`` as the idle one of its origin (closing the one it replaces)."""
        with self._lock:
            previous, self._idle[key] = self._idle.get(key), connection
        if previous is not None:
            previous.close()

    def _connection(
        self, key: tuple[str, int], connect: float | None
    ) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.pop(key, None)
        if idle is not None and not _stale(idle):
            return idle
        if idle is not None:
            idle.close()
        connection = http.client.HTTPConnection(key[0], key[1], timeout=connect)
        with _mapped(httpx.ConnectTimeout, httpx.ConnectError):
            connection.connect()
        return connection

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not _loopback(request.url):
            return self._elsewhere().handle_request(request)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        port = request.url.port or 80
        key = (request.url.host, port)
        connection = self._connection(key, timeouts.get("connect"))
        try:
            return self._exchange(key, connection, request, timeouts)
        except BaseException:
            connection.close()
            raise

    def _exchange(
        self,
        key: tuple[str, int],
        connection: http.client.HTTPConnection,
        request: httpx.Request,
        timeouts: dict[str, Any],
    ) -> httpx.Response:
        # as httpx's transport: a daemon that refused early may still have answered
        with contextlib.suppress(httpx.WriteError):
            self._send(connection, request, timeouts.get("write"))
        with _mapped(httpx.ReadTimeout, httpx.ReadError):
            if connection.sock is not None:
                connection.sock.settimeout(timeouts.get("read"))
            answer = connection.getresponse()
        headers = [
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.getheaders()
        ]
        return httpx.Response(
            status_code=answer.status,
            headers=headers,
            stream=_Body(self, key, connection, answer),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": answer.reason.encode("latin-1"),
            },
        )

    @staticmethod
    def _send(
        connection: http.client.HTTPConnection, request: httpx.Request, write: float | None
    ) -> None:
        """The request line, the headers httpx made and the body, framed as they say."""
        assert connection.sock is not None
        assert isinstance(request.stream, httpx.SyncByteStream)
        chunked = False
        with _mapped(httpx.WriteTimeout, httpx.WriteError):
            connection.sock.settimeout(write)
            target = request.url.raw_path.decode("ascii")
            connection.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in request.headers.raw:
                connection.putheader(name, value)
                if name.lower() == b"transfer-encoding" and _CHUNKED in value.lower():
                    chunked = True
            connection.endheaders()
            for chunk in request.stream:
                if chunk:
                    connection.send(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                connection.send(b"0\r\n\r\n")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
            other, self._other = self._other, None
        for connection in idle:
            connection.close()
        if other is not None:
            other.close()
