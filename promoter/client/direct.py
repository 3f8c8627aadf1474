"""The synchronous client's pool: ``http.client`` to a loopback daemon, httpx elsewhere.

``DirectClient`` is the pool ``promoter.client.transport`` opens when no transport is
given and the environment names no proxies. A plain ``http`` request to this machine's
loopback address (the daemon ``promoter serve`` records by default, or the one a 421
sends the request to) is sent here, the one place that speaks ``http.client``: HTTP/1.1;
an address literal connected to without the resolver (``_Connection``); one idle
connection kept for the next request, dropped when the daemon closed it or the answer
was not read to its end, or replaced by one to another origin; the connect, write
and read timeouts of each request. A command line that only talks to its daemon never
imports httpx (some 35 ms of its CPU), nor httpcore and h11. What the httpx client did
above the wire it does the same way: the base URL and query parameters, the bearer and
httpx's default headers (but ``Accept-Encoding: identity``, as the daemon never
compresses), a JSON body encoded as httpx encodes it, a streamed body sent chunked unless
its length is given, and the whole answer read. ``Answer`` is the part of
``httpx.Response`` the client reads.

Errors are httpx's, as its own transport raises them for each phase (httpx is imported
then, and only then), so the retries and ``unreachable`` read them alike. Any other
origin (``https``, a host not on loopback) goes to an ``httpx.Client`` with the options
the pool would have had, over httpx's own transport, made on first use. Not here: the
endpoints, the retries, proxies (the environment naming one gets httpx's pool), HTTP/2.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import json
import select
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from promoter import __version__

if TYPE_CHECKING:
    import httpx

_HEADERS = {
    "Accept": "*/*",
    "Accept-Encoding": "identity",
    "Connection": "keep-alive",
    "User-Agent": f"promoter/{__version__}",
}


class _Connection(http.client.HTTPConnection):
    """``http.client``'s connection; to an address literal (every loopback origin but
    ``localhost``) the socket is connected to it directly: ``socket.create_connection``
    would hand it to the resolver, which encodes it with the ``idna`` codec, imported on
    first use (about a millisecond of each command line)."""

    def __init__(self, host: str, port: int, *, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            return  # a name: resolved as http.client resolves it
        family = socket.AF_INET6 if literal.version == 6 else socket.AF_INET
        self._create_connection = functools.partial(_connect_literal, family)


def _connect_literal(
    family: int, address: tuple[str, int], timeout: float, source: Any = None
) -> socket.socket:
    """``socket.create_connection`` to an address literal of ``family``, not resolved."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if source:
            sock.bind(source)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def loopback(url: str) -> bool:
    """Whether ``url`` is plain ``http`` to this machine's loopback address."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class _Url:
    path: str


@dataclass(frozen=True)
class _Request:
    method: str
    url: _Url


class Answer:
    """A whole answer: what the client reads of ``httpx.Response``."""

    def __init__(
        self,
        request: _Request,
        status: int,
        reason: str,
        headers: http.client.HTTPMessage,
        body: bytes,
    ) -> None:
        self.request = request
        self.status_code = status
        self.reason_phrase = reason
        self.headers = headers  # read by name whatever its case, as httpx's
        self.content = body

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        charset = self.headers.get_content_charset()
        return self.content.decode(charset or "utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@contextmanager
def _phase(timeout: str, error: str) -> Iterator[None]:
    """``socket`` and ``http.client`` failures raised as httpx raises them in one phase:
    its ``timeout`` error, ``RemoteProtocolError`` for an answer cut short or malformed,
    else its ``error`` (httpx is imported for the error only)."""
    try:
        yield
    except (OSError, http.client.HTTPException) as exc:
        import httpx

        if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
            raise getattr(httpx, timeout)(str(exc) or "timed out") from exc
        if isinstance(exc, http.client.HTTPException):
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
        raise getattr(httpx, error)(str(exc)) from exc


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


class DirectClient:
    """``http.client`` to a loopback daemon; an httpx client for any other origin."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        other: Callable[[], httpx.Client],
    ) -> None:
        """``other`` makes the httpx client for another origin (on first use)."""
        self._base = base_url.rstrip("/")
        self._headers = {**_HEADERS, **headers}
        self._timeout = timeout
        self._make_other = other
        self._other: httpx.Client | None = None
        self._idle: http.client.HTTPConnection | None = None
        self._key: tuple[str, int] | None = None

    def get(self, url: str, *, timeout: float | None = None) -> Any:
        return self.request("GET", url, timeout=timeout)

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """The whole answer to one request (an ``Answer``, or httpx's for another origin)."""
        absolute = url if "://" in url else self._base + url
        if not loopback(absolute):
            if self._other is None:
                self._other = self._make_other()
            return self._other.request(
                method, url, json=json, content=content, params=params, headers=headers,
                timeout=timeout if timeout is not None else self._timeout,
            )  # fmt: skip
        parts = urlsplit(absolute)
        query = urlencode(params) if params else parts.query  # httpx's: params replace it
        target = parts.path + (f"?{query}" if query else "")
        limit = timeout if timeout is not None else self._timeout
        sent = {**self._headers, "Host": parts.netloc}
        body: bytes | Iterable[bytes] = b""
        if json is not None:
            body = _json_body(json)
            sent["Content-Type"] = "application/json"
        elif content is not None:
            body = content
        given = {name.lower() for name in (headers or {})}
        if isinstance(body, bytes):
            if body or method in ("POST", "PUT", "PATCH"):
                sent["Content-Length"] = str(len(body))
        elif "content-length" not in given:
            sent["Transfer-Encoding"] = "chunked"
        sent.update(headers or {})
        key = (parts.hostname or "", parts.port or 80)
        connection = self._connection(key, limit)
        try:
            return self._exchange(connection, method, target, sent, body, limit, absolute)
        except BaseException:
            connection.close()
            raise

    def _connection(self, key: tuple[str, int], limit: float) -> http.client.HTTPConnection:
        idle, self._idle = self._idle, None
        if idle is not None and self._key == key and not _stale(idle):
            return idle
        if idle is not None:
            idle.close()
        self._key = key
        connection = _Connection(key[0], key[1], timeout=limit)
        with _phase("ConnectTimeout", "ConnectError"):
            connection.connect()
        return connection

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | Iterable[bytes],
        limit: float,
        url: str,
    ) -> Answer:
        assert connection.sock is not None
        try:
            with _phase("WriteTimeout", "WriteError"):
                connection.sock.settimeout(limit)
                connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers.items():
                    connection.putheader(name, value)
                connection.endheaders()
                chunked = headers.get("Transfer-Encoding") == "chunked"
                for chunk in [body] if isinstance(body, bytes) else body:
                    if chunk:
                        connection.send(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                if chunked:
                    connection.send(b"0\r\n\r\n")
        except Exception as exc:  # as httpx: a daemon that refused early may still answer
            if not _write_error(exc):
                raise
        with _phase("ReadTimeout", "ReadError"):
            if connection.sock is not None:
                connection.sock.settimeout(limit)
            answer = connection.getresponse()
            data = answer.read()
        if answer.will_close:
            connection.close()
        else:
            self._idle = connection
        request = _Request(method, _Url(urlsplit(url).path))
        return Answer(request, answer.status, answer.reason, answer.msg, data)

    def close(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.close()
        other, self._other = self._other, None
        if other is not None:
            other.close()


def _write_error(exc: BaseException) -> bool:
    """Whether ``exc`` is httpx's ``WriteError`` (httpx is loaded when it is one)."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.WriteError)


def _json_body(document: Any) -> bytes:
    """A JSON body as httpx encodes one."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")
