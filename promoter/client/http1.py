"""One HTTP/1.1 connection over ``socket``: a request written, its answer read within bounds.

``Connection`` opens one TCP connection (each address the resolver gives tried in turn,
the host handed to it as ASCII bytes, so that no ``idna`` codec is loaded; Nagle's delay
off), writes one request (its method, target and headers refused with ``ValueError`` when
they would split the request; a body of bytes sent with the head, an iterable of bytes sent
as it comes, chunked unless its ``Content-Length`` is given, and then exactly that many
bytes) and reads the whole answer: the status line and the headers within ``MAX_LINE``
bytes a line, ``MAX_HEADERS`` headers and ``MAX_HEAD`` bytes in all; interim ``1xx``
answers skipped; the body by ``Content-Length``, chunked (sizes of at most 16 hex digits,
each chunk ended by CRLF, bounded trailers) or to the end of the stream, at most
``max_body`` bytes (the caller's bound, ``MAX_BODY`` unless given); and whether the
connection may carry the next request. An answer that is malformed, over a bound or cut
short raises ``ProtocolError`` (``BodyTooLarge`` for a body past ``max_body``, raised
once a declared length or the bytes read pass it); the socket's own errors
(``TimeoutError`` among them) come as they are. It is what ``http.client`` did for
``promoter.client.direct`` without ``http.client``'s imports (``email``'s parser and
``ssl``, about 18 ms of every command).

Not here: TLS, proxies, redirects, compression, HTTP/2, 101 upgrades (all answered by
httpx's client, ``promoter.client.direct`` sends such origins there), keeping idle
connections and mapping errors to httpx's (``promoter.client.direct``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Mapping
from typing import overload

MAX_LINE = 65_536  # bytes of the status line, of a header line, of a trailer line
MAX_HEADERS = 100  # headers of one answer (and trailers of a chunked body)
MAX_HEAD = 262_144  # bytes of the status line and the headers together
MAX_INTERIM = 16  # 1xx answers before the final one
# bytes of an answer's body unless the caller gives its bound: twice the largest answer a
# daemon with its default limits gives (a blob of max_blob_bytes, 256 MiB; a first diff
# page of a bundle of max_document_bytes, 64 MiB: 8 MiB of diff at most and an entry a file,
# a few times the bundle); a caller of a daemon with raised limits gives its own
MAX_BODY = 512 << 20
_MAX_CHUNK_LINE = 4096  # a chunk's size line with its extensions
_RECEIVE = 262_144
_TOKEN = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_HEX = b"0123456789abcdefABCDEF"


class ProtocolError(Exception):
    """An answer this client does not read as HTTP/1.1 (malformed, over a bound, cut
    short); ``local``: the request's own body broke its framing."""

    def __init__(self, message: str, *, local: bool = False) -> None:
        super().__init__(message)
        self.local = local


class BodyTooLarge(ProtocolError):
    """An answer's body longer than the caller's bound (``limit`` bytes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer's body is larger than {limit} bytes")
        self.limit = limit


class Headers:
    """An answer's headers in their order, read by name whatever its case; a repeated
    one is its values joined by ``", "`` (as httpx's ``Headers.get`` answers)."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items

    @overload
    def get(self, name: str) -> str | None: ...

    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self.get_list(name)
        return ", ".join(values) if values else default

    def get_list(self, name: str) -> list[str]:
        key = name.lower()
        return [value for own, value in self._items if own.lower() == key]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.get_list(name))

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, _ in self._items])

    def __len__(self) -> int:
        return len(self._items)


class Answer:
    """One final answer as it came: status, reason, headers, the whole body, and whether
    the connection ends with it."""

    __slots__ = ("body", "headers", "reason", "status", "will_close")

    def __init__(
        self, status: int, reason: str, headers: Headers, body: bytes, will_close: bool
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.will_close = will_close


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket to the first address of ``host`` that accepts it."""
    try:
        name: str | bytes = host.encode("ascii")  # a str host loads the idna codec
    except UnicodeEncodeError:
        name = host
    failed: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(name, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failed = exc
            continue
        return sock
    raise failed or OSError(f"no address found for {host}")


def _is_token(value: bytes) -> bool:
    return bool(value) and not value.translate(None, _TOKEN)


def _head(method: str, target: str, headers: Mapping[str, str]) -> bytes:
    """The request line and headers, refused where a part would split the request."""
    if not _is_token(method.encode("ascii", "replace")):
        raise ValueError(f"method {method!r} is not an HTTP token")
    if not target or any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in target):
        raise ValueError(f"request target {target!r} has a space, control or non-ASCII byte")
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers.items():
        if not _is_token(name.encode("ascii", "replace")):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if "\r" in value or "\n" in value or "\0" in value:
            raise ValueError(f"header {name!r} has a line break or NUL in its value")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Connection:
    """One TCP connection to an HTTP/1.1 server; one request at a time."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock: socket.socket | None = _connect(host, port, timeout)
        self._buffer = bytearray()  # bytes received; those before ``_start`` are read
        self._start = 0

    def settimeout(self, timeout: float) -> None:
        if self.sock is not None:
            self.sock.settimeout(timeout)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self._buffer.clear()
        self._start = 0
        if sock is not None:
            sock.close()

    def stale(self) -> bool:
        """Whether this idle connection cannot carry another request: closed, bytes read
        ahead that no request asked for, or the socket readable with nothing asked (the
        server closed it or sent what was not asked)."""
        if self.sock is None or self._start < len(self._buffer):
            return True
        import select  # loaded with socket already

        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    # --- the request ----------------------------------------------------------------------

    def send(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | Iterable[bytes],
    ) -> None:
        """Write one request: ``body`` chunked when ``headers`` say ``Transfer-Encoding:
        chunked``, else as it is (an iterable of exactly its ``Content-Length`` bytes)."""
        sock = self._open()
        head = _head(method, target, headers)
        if isinstance(body, bytes):
            sock.sendall(head + body if len(body) <= _RECEIVE else head)
            if len(body) > _RECEIVE:
                sock.sendall(body)
            return
        lowered = {name.lower(): value for name, value in headers.items()}
        chunked = lowered.get("transfer-encoding", "").lower() == "chunked"
        declared = None if chunked else lowered.get("content-length")
        sock.sendall(head)
        sent = 0
        for chunk in body:
            if not chunk:
                continue
            sent += len(chunk)
            if declared is not None and sent > int(declared):
                raise ProtocolError("the body is longer than its Content-Length", local=True)
            sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        elif declared is not None and sent != int(declared):
            raise ProtocolError("the body is shorter than its Content-Length", local=True)

    def _open(self) -> socket.socket:
        if self.sock is None:
            raise OSError("the connection is closed")
        return self.sock

    # --- the answer -----------------------------------------------------------------------

    def answer(self, method: str, max_body: int = MAX_BODY) -> Answer:
        """The final answer to the request sent, read whole (interim 1xx ones skipped),
        its body at most ``max_body`` bytes (``BodyTooLarge`` past it)."""
        for _ in range(MAX_INTERIM + 1):
            version, status, reason, headers = self._status_and_headers()
            if status == 101:
                raise ProtocolError("the server switched protocols (101), which is not read here")
            if status >= 200:
                break
        else:
            raise ProtocolError(f"more than {MAX_INTERIM} interim (1xx) answers")
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        will_close = "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
        encoding = headers.get("transfer-encoding")
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif encoding is not None:
            if encoding.strip().lower() != "chunked":
                raise ProtocolError(f"unsupported Transfer-Encoding {encoding[:40]!r}")
            body = self._chunked(max_body)
            will_close = will_close or "content-length" in headers  # both: never reused
        elif "content-length" in headers:
            length = _length(headers.get_list("content-length"))
            if length > max_body:
                raise BodyTooLarge(max_body)  # refused before a byte of it is read
            body = self._exact(length)
        else:
            body, will_close = self._to_end(max_body), True
        return Answer(status, reason, headers, body, will_close)

    def _status_and_headers(self) -> tuple[str, int, str, Headers]:
        line = self._line(MAX_LINE, "status line")
        if not line:
            raise ProtocolError("Server disconnected without sending a response.")
        if not line.endswith(b"\n"):
            raise ProtocolError("the answer ended within its status line")
        version, status, reason = _status_line(line)
        used = len(line)
        items: list[tuple[str, str]] = []
        while True:
            line = self._line(MAX_LINE, "header line")
            used += len(line)
            if used > MAX_HEAD:
                raise ProtocolError(f"the answer's head is longer than {MAX_HEAD} bytes")
            if not line.endswith(b"\n"):
                raise ProtocolError("the answer ended within its headers")
            if line in (b"\r\n", b"\n"):
                return version, status, reason, Headers(items)
            if len(items) >= MAX_HEADERS:
                raise ProtocolError(f"the answer has more than {MAX_HEADERS} headers")
            items.append(_header(line))

    def _chunked(self, max_body: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while True:
            line = self._line(_MAX_CHUNK_LINE, "chunk size line")
            if not line.endswith(b"\n"):
                raise ProtocolError("the answer ended within its chunked body")
            size_text = line.split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 16 or size_text.translate(None, _HEX):
                raise ProtocolError(f"a malformed chunk size {line[:40]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            got += size
            if got > max_body:
                raise BodyTooLarge(max_body)  # before the chunk is read
            parts.append(self._exact(size))
            if self._exact(2) != b"\r\n":
                raise ProtocolError("a chunk is not ended by CRLF")
        for _ in range(MAX_HEADERS + 1):  # trailers, read and left
            line = self._line(MAX_LINE, "trailer line")
            if not line.endswith(b"\n"):
                raise ProtocolError("the answer ended within its trailers")
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
        raise ProtocolError(f"the answer has more than {MAX_HEADERS} trailers")

    def _fill(self) -> bool:
        """More bytes into the buffer (what was read dropped first); False at the end of
        the stream."""
        data = self._open().recv(_RECEIVE)
        if self._start:
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data
        return bool(data)

    def _rest(self) -> bytes:
        """The bytes received and not yet read, taken."""
        rest = bytes(self._buffer[self._start :])
        self._buffer.clear()
        self._start = 0
        return rest

    def _line(self, limit: int, what: str) -> bytes:
        """The next line with its end, at most ``limit`` bytes; shorter and without one
        at the end of the stream (empty: nothing more came)."""
        searched = self._start
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                if end + 1 - self._start > limit:
                    raise ProtocolError(f"the answer's {what} is longer than {limit} bytes")
                line = bytes(self._buffer[self._start : end + 1])
                self._start = end + 1
                return line
            if len(self._buffer) - self._start >= limit:
                raise ProtocolError(f"the answer's {what} is longer than {limit} bytes")
            searched = len(self._buffer) - self._start  # where the search goes on after
            if not self._fill():
                return self._rest()
            searched = self._start + searched

    def _exact(self, size: int) -> bytes:
        """The next ``size`` bytes; ``ProtocolError`` when the stream ends before them."""
        if len(self._buffer) - self._start >= size:
            data = bytes(self._buffer[self._start : self._start + size])
            self._start += size
            return data
        parts = [self._rest()]
        got = len(parts[0])
        sock = self._open()
        while got < size:
            data = sock.recv(min(size - got, _RECEIVE))
            if not data:
                raise ProtocolError(f"the answer's body ended after {got} of {size} bytes")
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def _to_end(self, max_body: int) -> bytes:
        """The rest of the stream (a body the server ends by closing), at most
        ``max_body`` bytes."""
        parts = [self._rest()]
        got = len(parts[0])
        sock = self._open()
        while got <= max_body and (data := sock.recv(_RECEIVE)):
            parts.append(data)
            got += len(data)
        if got > max_body:
            raise BodyTooLarge(max_body)
        return b"".join(parts)


def _status_line(line: bytes) -> tuple[str, int, str]:
    text = line.rstrip(b"\r\n")
    version, _, rest = text.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"a malformed status line {text[:80]!r}")
    status = int(code)
    if status < 100:
        raise ProtocolError(f"a malformed status line {text[:80]!r}")
    return version.decode("ascii"), status, reason.decode("latin-1")


def _header(line: bytes) -> tuple[str, str]:
    """One header line's name and value (its ends' blanks stripped)."""
    content = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    name, colon, value = content.partition(b":")
    if not colon or not _is_token(name):
        raise ProtocolError(f"a malformed header line {content[:80]!r}")
    if b"\r" in value or b"\0" in value:
        raise ProtocolError(f"a header value with CR or NUL in {name[:40]!r}")
    return name.decode("ascii"), value.strip(b" \t").decode("latin-1")


def _length(values: list[str]) -> int:
    """The one ``Content-Length`` its values (repeated or listed) agree on."""
    found = {part.strip() for value in values for part in value.split(",")}
    if len(found) != 1:
        raise ProtocolError(f"conflicting Content-Length values {sorted(found)[:4]!r}")
    (text,) = found
    if not text.isdigit() or not text.isascii() or len(text) > 18:
        raise ProtocolError(f"a malformed Content-Length {text[:40]!r}")
    return int(text)
