"""The synchronous client's pool: HTTP/1.1 of its own to a loopback daemon, httpx elsewhere.

``DirectClient`` is the pool ``promoter.client.transport`` opens when no transport is
given and the environment names no proxies. A plain ``http`` request to this machine's
loopback address (the daemon ``promoter serve`` records by default, or the one a 421
sends the request to) is sent here over ``promoter.client.http1`` (a socket, no
``http.client``: its ``email`` parser and ``ssl`` cost about 18 ms of every command's
start): one idle connection kept for the next request, dropped when the daemon closed it
or said it would, when its last request was sent ``REUSE_SECONDS`` ago or more, or replaced
by one to another origin; the connect, write and read
timeouts of each request. A command line that only talks to its daemon never imports
httpx (some 35 ms of its CPU), nor httpcore and h11. What the httpx client did above the
wire it does the same way: the base URL and query parameters, the bearer and httpx's
default headers (but ``Accept-Encoding: identity``, as the daemon never compresses), a
JSON body encoded as httpx encodes it, a streamed body sent chunked unless its length is
given, and the whole answer read, its body at most ``max_body`` bytes (``http1.MAX_BODY``
unless the caller gives a bound; past it ``payload_too_large``, the connection dropped).
``Answer`` is the part of ``httpx.Response`` the client reads.

Why the age: the daemon closes a connection idle for its keep-alive timeout
(``promoter.api.server.KEEP_ALIVE_SECONDS``). A request written while it closes one (the
daemon has stopped reading, its close not yet seen here) is reset unanswered, and a
``POST`` is not sent again: the connection is reused only while the daemon's idle time,
counted here from before the last request was written (never less than the daemon's
own), is well under that timeout. That narrows the race to a client stalled for seconds
between its clock and its write; a request the caller will not send again
(``reuse=False``: not idempotent, or its body streamed) closes it: it is never written on
an idle connection, but on a new one, which no keep-alive timeout can be closing (a
loopback connect costs tens of microseconds). An idempotent request met by the close
is sent again by the caller's retries.

Errors are httpx's, as its own transport raises them for each phase (httpx is imported
then, and only then), so the retries and ``unreachable`` read them alike. Any other
origin (``https``, a host not on loopback) goes to an ``httpx.Client`` with the options
the pool would have had, over httpx's own transport, made on first use. Not here: the
endpoints, the retries, proxies (the environment naming one gets httpx's pool), HTTP/2.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from promoter import __version__
from promoter.client.http1 import MAX_BODY, BodyTooLarge, Connection, Headers, ProtocolError
from promoter.errors import PayloadTooLarge

if TYPE_CHECKING:
    import httpx

# seconds after its last request was sent that an idle connection is still reused: well
# under the daemon's keep-alive timeout (``promoter.api.server.KEEP_ALIVE_SECONDS``)
REUSE_SECONDS = 2.0
_HEADERS = {
    "Accept": "*/*",
    "Accept-Encoding": "identity",
    "Connection": "keep-alive",
    "User-Agent": f"promoter/{__version__}",
}


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


class _Url:
    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


class _Request:
    __slots__ = ("method", "url")

    def __init__(self, method: str, url: _Url) -> None:
        self.method = method
        self.url = url


class Answer:
    """A whole answer: what the client reads of ``httpx.Response``."""

    def __init__(
        self,
        request: _Request,
        status: int,
        reason: str,
        headers: Headers,
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
        return self.content.decode(_charset(self.headers) or "utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _charset(headers: Headers) -> str | None:
    """The ``charset`` parameter of the answer's ``Content-Type``, when it names a codec."""
    for parameter in headers.get("content-type", "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
            try:
                "".encode(charset)
            except LookupError:
                return None
            return charset
    return None


@contextmanager
def _phase(timeout: str, error: str) -> Iterator[None]:
    """``socket`` and answer failures raised as httpx raises them in one phase: its
    ``timeout`` error, ``RemoteProtocolError`` for an answer cut short or malformed
    (``LocalProtocolError`` for a body that broke its own framing), else its ``error``
    (httpx is imported for the error only)."""
    try:
        yield
    except BodyTooLarge:
        raise  # not the transport's failure: the caller's bound (``_exchange``)
    except (OSError, ProtocolError) as exc:
        import httpx

        if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
            raise getattr(httpx, timeout)(str(exc) or "timed out") from exc
        if isinstance(exc, ProtocolError):
            kind = httpx.LocalProtocolError if exc.local else httpx.RemoteProtocolError
            raise kind(str(exc)) from exc
        raise getattr(httpx, error)(str(exc)) from exc


class DirectClient:
    """HTTP/1.1 of its own to a loopback daemon; an httpx client for any other origin."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        other: Callable[[], httpx.Client],
        *,
        max_body: int = MAX_BODY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``other`` makes the httpx client for another origin (on first use);
        ``max_body``: the bytes of an answer's body read at most, unless a request gives
        its own; ``clock``: the seconds an idle connection's age is read in."""
        self._base = base_url.rstrip("/")
        self._max_body = max_body
        self._headers = {**_HEADERS, **headers}
        self._timeout = timeout
        self._make_other = other
        self._other: httpx.Client | None = None
        self._idle: Connection | None = None
        self._idle_sent = 0.0  # ``clock`` before the idle connection's last request
        self._key: tuple[str, int] | None = None
        self._clock = clock

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
        max_body: int | None = None,
        reuse: bool = True,
    ) -> Any:
        """The whole answer to one request (an ``Answer``, or httpx's for another origin);
        a loopback answer's body at most ``max_body`` bytes (the client's bound unless
        given); ``reuse=False`` for a request that will not be sent again: a loopback one
        then goes on a new connection (httpx's pool has no such choice)."""
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
        started = self._clock()  # before the request is written: the daemon's idle time is less
        connection = self._connection(key, limit, started, reuse)
        bound = self._max_body if max_body is None else max_body
        try:
            answer = self._exchange(connection, method, target, sent, body, limit, absolute, bound)
        except BaseException:
            connection.close()
            raise
        self._idle_sent = started
        return answer

    def _connection(
        self, key: tuple[str, int], limit: float, now: float, reuse: bool
    ) -> Connection:
        idle, self._idle = self._idle, None
        fresh = reuse and now - self._idle_sent < REUSE_SECONDS
        if idle is not None and self._key == key and fresh and not idle.stale():
            return idle
        if idle is not None:
            idle.close()
        self._key = key
        with _phase("ConnectTimeout", "ConnectError"):
            return Connection(key[0], key[1], limit)

    def _exchange(
        self,
        connection: Connection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | Iterable[bytes],
        limit: float,
        url: str,
        max_body: int,
    ) -> Answer:
        broken = False
        try:
            with _phase("WriteTimeout", "WriteError"):
                connection.settimeout(limit)
                connection.send(method, target, headers, body)
        except Exception as exc:  # as httpx: a daemon that refused early may still answer
            if not _write_error(exc):
                raise
            broken = True  # the request was not sent whole: the connection is not kept
        try:
            with _phase("ReadTimeout", "ReadError"):
                connection.settimeout(limit)
                answer = connection.answer(method, max_body)
        except BodyTooLarge as exc:  # final: the same request would answer as much again
            raise PayloadTooLarge(
                f"the answer to {method} {urlsplit(url).path} is larger than {exc.limit} "
                "bytes, the most this client reads of an answer",
                limit=exc.limit,
            ) from exc
        if answer.will_close or broken:
            connection.close()
        else:
            self._idle = connection
        request = _Request(method, _Url(urlsplit(url).path))
        return Answer(request, answer.status, answer.reason, answer.headers, answer.body)

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
