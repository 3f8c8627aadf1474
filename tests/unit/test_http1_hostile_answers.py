"""The loopback pool's own HTTP/1.1 reads a hostile or broken answer as an error, never as
an answer, and frames what it sends so that nothing can split a request.

A tiny server on a loopback socket reads each request (its head, and its body by
``Content-Length`` or chunked) and writes a canned answer byte for byte: over-long status
and header lines, too many headers, a head past its bound, malformed status lines, header
lines that would smuggle another header, bodies cut short, bad chunk sizes, a chunk not
ended by CRLF, conflicting lengths, an unsupported transfer coding, a 101 and endless 1xx
answers. Each is ``httpx.RemoteProtocolError`` through ``DirectClient`` (the error the
retries and the command line read) and the connection is not kept. Beside that the good
shapes: chunked answers with trailers, interim 1xx answers, a body ended by closing, an
HTTP/1.0 answer, keep-alive reuse, and an idle connection with bytes nobody asked for
replaced. A request whose header would carry a line break is refused before a byte is
sent; a streamed body that breaks its own ``Content-Length`` is ``LocalProtocolError``.
A body larger than the client's bound (declared, chunked or read to the end) is
``payload_too_large`` naming the bound, its connection dropped, never asked for again; a
body of exactly the bound is read.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from promoter.client.direct import DirectClient
from promoter.client.http1 import MAX_BODY, MAX_HEAD, MAX_HEADERS, MAX_INTERIM, MAX_LINE
from promoter.client.sync import PromoterClient
from promoter.config import Settings
from promoter.engine.review.diff import MAX_LIMIT
from promoter.errors import PayloadTooLarge


class Canned:
    """A loopback server answering each request with the next canned bytes (closing the
    connection after one marked so); it records each request's head and body."""

    def __init__(self, answers: list[tuple[bytes, bool]], *, drip: bool = False) -> None:
        self.answers = list(answers)
        self.drip = drip  # each answer sent a few bytes at a time
        self.requests: list[tuple[bytes, bytes]] = []
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a drip stays one
            with conn:
                reader = conn.makefile("rb")
                while self.answers:
                    request = _read_request(reader)
                    if request is None:
                        break
                    self.requests.append(request)
                    data, close = self.answers.pop(0)
                    try:
                        for start in range(0, len(data), 3 if self.drip else len(data) or 1):
                            conn.sendall(data[start : start + (3 if self.drip else len(data))])
                    except OSError:
                        break
                    if close:
                        break
                reader.close()

    def close(self) -> None:
        self.answers.clear()
        with contextlib.suppress(OSError):  # wakes a waiting ``accept`` (a close does not)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the canned server never stopped"


def _read_request(reader: object) -> tuple[bytes, bytes] | None:
    assert hasattr(reader, "readline") and hasattr(reader, "read")
    head = b""
    while True:
        line = reader.readline(100_000)
        if not line:
            return None
        head += line
        if line == b"\r\n":
            break
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        body = b""
        while True:
            size = int(reader.readline().strip(), 16)
            body += reader.read(size)
            reader.readline()
            if size == 0:
                return head, body
    length = 0
    for line in lowered.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, reader.read(length)


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    made: list[Canned] = []
    yield made
    for server in made:
        server.close()


def _serve(made: list[Canned], *answers: bytes | tuple[bytes, bool], drip: bool = False) -> Canned:
    server = Canned([a if isinstance(a, tuple) else (a, True) for a in answers], drip=drip)
    made.append(server)
    return server


def _client(server: Canned) -> DirectClient:
    def other() -> httpx.Client:
        raise AssertionError("a loopback request went to httpx's client")

    return DirectClient(server.url, {}, 5.0, other)


def _ok(body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%b\r\n%b" % (len(body), extra, body)


HOSTILE = {
    "status_line_too_long": b"HTTP/1.1 200 " + b"x" * MAX_LINE + b"\r\n\r\n",
    "header_line_too_long": b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_LINE + b"\r\n\r\n",
    "too_many_headers": b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"X-%d: v\r\n" % n for n in range(MAX_HEADERS + 1))
    + b"Content-Length: 0\r\n\r\n",
    "head_too_long": b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"X-%d: %b\r\n" % (n, b"z" * (MAX_HEAD // 50)) for n in range(60))
    + b"\r\n",
    "not_http": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "http2_status_line": b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
    "status_not_digits": b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    "status_four_digits": b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    "status_below_100": b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
    "header_without_colon": b"HTTP/1.1 200 OK\r\nBroken header\r\nContent-Length: 0\r\n\r\n",
    "header_name_with_space": b"HTTP/1.1 200 OK\r\nX Y: v\r\nContent-Length: 0\r\n\r\n",
    "folded_header": b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
    "cr_inside_a_value": b"HTTP/1.1 200 OK\r\nX: a\rLocation: /evil\r\nContent-Length: 0\r\n\r\n",
    "nul_inside_a_value": b"HTTP/1.1 200 OK\r\nX: a\0b\r\nContent-Length: 0\r\n\r\n",
    "closed_before_answering": b"",
    "closed_within_the_status_line": b"HTTP/1.1 20",
    "closed_within_the_headers": b"HTTP/1.1 200 OK\r\nContent-Len",
    "body_cut_short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
    "conflicting_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "listed_conflicting_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}",
    "negative_length": b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}",
    "length_not_digits": b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\n{}",
    "length_too_long": b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 19 + b"\r\n\r\n{}",
    "unsupported_coding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}",
    "chunk_size_not_hex": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "chunk_size_negative": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n",
    "chunk_size_empty": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n{}\r\n0\r\n\r\n",
    "chunk_size_huge": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"f" * 17
    + b"\r\n{}\r\n0\r\n\r\n",
    "chunk_size_line_too_long": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;"
    + b"e" * 5000
    + b"\r\n{}\r\n0\r\n\r\n",
    "chunk_not_ended_by_crlf": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    "chunk_cut_short": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}",
    "no_last_chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",
    "too_many_trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
    + b"".join(b"T-%d: v\r\n" % n for n in range(MAX_HEADERS + 2))
    + b"\r\n",
    "switching_protocols": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
    "endless_interim_answers": b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM + 2),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_answer_is_a_protocol_error_and_its_connection_is_dropped(
    canned: list[Canned], name: str
) -> None:
    server = _serve(canned, HOSTILE[name], _ok(b'{"after": true}'))
    client = _client(server)
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/v1/repositories")
    assert client._idle is None
    assert client.get("/again").json() == {"after": True}  # on a new connection
    assert server.accepted == 2
    client.close()


def test_good_shapes_are_read_and_keep_alive_reuses_the_connection(
    canned: list[Canned],
) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
        b'\r\n5;name=value\r\n{"a":\r\n3\r\n 1}\r\n0\r\nTrailer-One: t\r\n\r\n'
    )
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    server = _serve(
        canned,
        (chunked, False),
        (interim + _ok(b'{"b": 2}'), False),
        (_ok(b"[]", b"X-Twice: one\r\nx-twice: two\r\n"), False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False),
        (b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"to": "end"}', True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", False),
        (_ok(b"{}"), False),
    )
    client = _client(server)
    assert client.get("/1").json() == {"a": 1}
    assert client.get("/2").json() == {"b": 2}
    twice = client.get("/3")
    assert twice.headers.get("x-twice") == "one, two"  # joined, as httpx's headers
    assert client.get("/4").status_code == 204
    assert server.accepted == 1  # four requests on one connection
    assert client.get("/5").json() == {"to": "end"}  # read to the end: not kept
    assert client._idle is None
    assert client.get("/6").content == b"{}"  # HTTP/1.0 without keep-alive: not kept
    assert client._idle is None
    assert client.get("/7").content == b"{}"
    assert server.accepted == 3
    client.close()


def test_an_idle_connection_with_bytes_nobody_asked_for_is_replaced(
    canned: list[Canned],
) -> None:
    smuggled = _ok(b"{}") + b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"smuggle"'
    server = _serve(canned, (smuggled, False), _ok(b'{"fresh": 1}'))
    client = _client(server)
    assert client.get("/1").content == b"{}"
    assert client.get("/2").json() == {"fresh": 1}  # never the bytes sent ahead
    assert server.accepted == 2
    client.close()


def test_a_header_that_would_split_the_request_is_refused_before_sending(
    canned: list[Canned],
) -> None:
    server = _serve(canned, _ok())
    client = _client(server)
    for headers in ({"X": "a\r\nInjected: 1"}, {"X\r\nY": "1"}, {"X": "a\nb"}, {"X": "\0"}):
        with pytest.raises(ValueError):
            client.request("GET", "/x", headers=headers)
    with pytest.raises(ValueError):
        client.request("GET", "/a b")
    with pytest.raises(ValueError):
        client.request("GE T", "/x")
    assert client.get("/x").content == b"{}"
    assert [head.split(b"\r\n")[0] for head, _ in server.requests] == [b"GET /x HTTP/1.1"]
    client.close()


def test_a_streamed_body_that_breaks_its_content_length_is_a_local_protocol_error(
    canned: list[Canned],
) -> None:
    server = _serve(canned, _ok(), _ok(), _ok())  # one answer used up by each connection
    client = _client(server)
    for chunks in ([b"abc", b"def"], [b"ab"]):
        with pytest.raises(httpx.LocalProtocolError):
            client.request("PUT", "/b", content=iter(chunks), headers={"Content-Length": "4"})
        assert client._idle is None
    whole = iter([b"ab", b"cd"])
    assert client.request("PUT", "/b", content=whole, headers={"Content-Length": "4"}).is_success
    assert server.requests[-1][1] == b"abcd"
    client.close()


def test_an_answer_that_comes_a_few_bytes_at_a_time_or_in_large_pieces_is_read_whole(
    canned: list[Canned],
) -> None:
    """The buffer's reads and its compaction: a head and a chunked body dripped three bytes
    at a time, then a body of 3 MiB after many headers, on one kept connection."""
    chunked = (
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"v" * 5000 + b"\r\nTransfer-Encoding: chunked\r\n"
        b'\r\n4\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n'
    )
    dripped = _serve(canned, (chunked, False), _ok(b'{"b": 2}'), drip=True)
    client = _client(dripped)
    first = client.get("/1")
    assert first.json() == {"a": 1} and first.headers.get("x-long") == "v" * 5000
    assert client.get("/2").json() == {"b": 2}
    assert dripped.accepted == 1
    client.close()
    big = b"x" * (3 << 20)
    headers = b"".join(b"X-%d: %b\r\n" % (n, b"h" * 500) for n in range(90))
    whole = _serve(canned, (_ok(big, headers), False), _ok(b"[]"))
    client = _client(whole)
    answer = client.get("/big")
    assert answer.content == big and answer.headers.get("x-89") == "h" * 500
    assert client.get("/after").content == b"[]"
    assert whole.accepted == 1
    client.close()


BOUND = 1024
OVER = b"o" * (BOUND + 1)
EXACT = b"e" * BOUND
OVER_THE_BOUND = {
    "content_length": _ok(OVER),
    "content_length_declared_only": b"HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n{}",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"200\r\n"
    + OVER[:512]
    + b"\r\n"
    + b"201\r\n"
    + OVER[512:]
    + b"\r\n0\r\n\r\n",
    "chunked_one_huge_chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"ffffffffff\r\n{}",
    "to_the_end": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + OVER,
}


def _bounded(server: Canned) -> DirectClient:
    def other() -> httpx.Client:
        raise AssertionError("a loopback request went to httpx's client")

    return DirectClient(server.url, {}, 5.0, other, max_body=BOUND)


@pytest.mark.parametrize("name", sorted(OVER_THE_BOUND))
def test_a_body_larger_than_the_bound_is_refused_and_its_connection_dropped(
    canned: list[Canned], name: str
) -> None:
    """Refused as soon as the bound is passed (a declared length before a byte of the body
    is read), with the bound in the error, never as an answer; the next request goes on a
    new connection."""
    server = _serve(canned, OVER_THE_BOUND[name], _ok(b'{"after": true}'))
    client = _bounded(server)
    with pytest.raises(PayloadTooLarge) as refused:
        client.get("/v1/bundles/b/diff")
    assert str(refused.value) == (
        f"the answer to GET /v1/bundles/b/diff is larger than {BOUND} bytes, the most this "
        "client reads of an answer"
    )
    assert refused.value.context == {"limit": BOUND}
    assert client._idle is None
    assert client.get("/again").json() == {"after": True}
    assert server.accepted == 2
    client.close()


def test_a_body_of_exactly_the_bound_is_read_whole_in_each_framing(canned: list[Canned]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"100\r\n"
        + EXACT[:256]
        + b"\r\n300\r\n"
        + EXACT[256:]
        + b"\r\n0\r\n\r\n"
    )
    closed = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + EXACT
    server = _serve(canned, (_ok(EXACT), False), (chunked, False), (closed, True))
    client = _bounded(server)
    assert [client.get(f"/{n}").content for n in range(3)] == [EXACT] * 3
    assert server.accepted == 1
    client.close()


def test_a_body_over_the_bound_is_not_asked_for_again(canned: list[Canned]) -> None:
    """An idempotent call that retries a dropped connection does not retry a refused
    answer: it would be as large again. The command line names the code and the bound."""
    server = _serve(canned, _ok(OVER), _ok(b"[]"))
    client = PromoterClient(server.url, "token", max_body=BOUND)
    with client, pytest.raises(PayloadTooLarge) as refused:
        client.get_blob("a" * 64)
    assert refused.value.code == "payload_too_large"
    assert server.accepted == 1 and len(server.requests) == 1


def test_the_default_bound_passes_the_largest_answers_of_a_daemon_with_default_limits() -> None:
    """A blob of ``max_blob_bytes``, and a bundle of ``max_document_bytes`` whose first diff
    page (up to 8 MiB of diff, and an entry a file of a few times the file's place in the
    bundle) is bounded by four times the bundle."""
    defaults = Settings.model_fields
    assert 2 * defaults["max_blob_bytes"].default <= MAX_BODY
    assert 8 * defaults["max_document_bytes"].default <= MAX_BODY
    assert MAX_BODY >= 2 * MAX_LIMIT * 6  # a whole page of diff, every byte escaped in JSON
