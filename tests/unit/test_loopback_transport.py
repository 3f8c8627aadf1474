"""The loopback pool answers as httpx's client does, over a real socket.

Each exchange runs twice against the same real HTTP/1.1 server on a loopback port, once
through ``promoter.client.direct.DirectClient`` (``promoter.client.http1``, no httpx) and once
through an ``httpx.Client`` over httpx's own transport; the request the server reads
(method, target, body, framing), the status, body, headers and errors must be the same,
and so must a 421 followed to a second loopback daemon of the cluster. Beside that: one
connection serves consecutive requests, one the server closed is replaced, a streamed
body is sent chunked, an address literal is connected to without the resolver, any
other origin goes to httpx's client, and the client keeps httpx's own pool when the
environment names proxies.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from promoter.client.direct import DirectClient
from promoter.client.sync import PromoterClient
from promoter.client.transport import proxied

RELEASE = threading.Event()  # a slow answer waits for this (set when the test ends)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                data += self.rfile.read(size)
                self.rfile.readline()
                if size == 0:
                    return data
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _answer(self) -> None:
        body = self._body()
        self.server.connections.add(self.client_address)
        if self.path == "/slow":
            RELEASE.wait(30)
        document = {
            "method": self.command,
            "path": self.path,
            "body": body.decode(),
            "chunked": self.headers.get("Transfer-Encoding") == "chunked",
        }
        status = 421 if self.path == "/elsewhere" else 200
        if self.path == "/v1/hosts":
            document = {"hosts": [{"address": address} for address in self.server.cluster]}
        elif self.path.startswith("/owned") and self.server.peer is not None:
            status, document = 421, {"code": "owned_by_other_host", "status": 421}
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if status == 421 and self.server.peer is not None:
            self.send_header("Location", self.server.peer + self.path)
        self.send_header("X-Latin", "caf\xe9")
        if self.path == "/close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer  # noqa: N815 (http.server names them)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.connections: set[tuple[str, int]] = set()
        self.cluster: list[str] = []  # the addresses its GET /v1/hosts lists
        self.peer: str | None = None  # where a 421 sends /owned (none: it answers it)


def _serving() -> Iterator[Server]:
    RELEASE.clear()
    served = Server()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        RELEASE.set()
        served.shutdown()
        served.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _serving()


@pytest.fixture
def owner() -> Iterator[Server]:
    """A second loopback daemon of the cluster, the one ``server`` sends /owned to."""
    yield from _serving()


def _url(server: Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _httpx(server: Server) -> httpx.Client:
    """The httpx client over httpx's own transport: what the loopback pool answers as."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return httpx.Client(base_url=_url(server), transport=httpx.HTTPTransport(verify=context))


def _direct(server: Server) -> DirectClient:
    return DirectClient(_url(server), {}, 5.0, lambda: _httpx(server))


def test_the_loopback_pool_without_httpx_answers_as_the_httpx_client(server: Server) -> None:
    """``DirectClient`` against the httpx client over httpx's transport: the same request
    reaches the server (method, target, body, framing), the same answer comes back, and a
    failure is the same httpx error."""
    mine, theirs = _direct(server), _httpx(server)
    exchanges: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/operations?status=awaiting_approval", {}),
        ("GET", "/v1/events", {"params": {"after": "evt 1/2", "wait": "30"}}),
        ("GET", "/v1/trace?x=1", {"params": {"y": "caf\u00e9"}}),
        ("POST", "/v1/grants", {"json": {"a": 1, "b": "caf\u00e9", "c": [1.5, None]}}),
        ("POST", "/v1/operations/op_1/merge", {}),
        ("PUT", "/v1/blobs/x", {"content": b"bytes" * 1000}),
        ("PUT", "/v1/blobs/y", {"content": iter([b"one", b"", b"two" * 5000])}),
        (
            "PUT",
            "/v1/blobs/z",
            {"content": iter([b"ab", b"cd"]), "headers": {"Content-Length": "4"}},
        ),
        ("GET", "/elsewhere", {}),
        ("GET", "/close", {}),
        ("GET", "/after-close", {}),
        ("GET", "/slow", {"timeout": 0.3}),
    ]
    for method, path, kwargs in exchanges:
        again = dict(kwargs)
        if isinstance(kwargs.get("content"), Iterator):  # a stream is read once: one each
            chunks = list(kwargs["content"])
            kwargs, again = {**kwargs, "content": iter(chunks)}, {**again, "content": iter(chunks)}
        assert _answered(mine, method, path, **kwargs) == _answered(
            theirs, method, path, **again
        ), path
    assert _answered(mine, "GET", "/slow", timeout=0.3) == "ReadTimeout"
    answer = mine.request("PUT", "/v1/blobs/z", content=iter([b"a", b"b"]))
    assert answer.json()["chunked"] is True and answer.json()["body"] == "ab"
    mine.close()
    theirs.close()


def _answered(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        return type(exc).__name__
    return (
        response.status_code,
        response.reason_phrase,
        response.json(),
        response.text,
        response.is_success,
        response.headers.get("content-type"),
        response.headers.get("X-LATIN"),
        response.headers.get("content-length"),
        response.headers.get("connection"),
        response.request.method,
        response.request.url.path,
    )


def test_a_421_followed_to_a_second_loopback_daemon_is_answered_as_through_httpx(
    server: Server, owner: Server
) -> None:
    """The client follows a 421 from one loopback daemon to another of its cluster once,
    through the same ``promoter.client.http1`` path (no httpx loaded for it), and gets what the
    client over httpx's transport gets: the owner's answer, the host it followed to."""
    server.cluster = owner.cluster = [_url(server), _url(owner)]
    server.peer = _url(owner)
    body = {"bundle": "b" * 64}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    seen = []
    for transport in (None, httpx.HTTPTransport(verify=context)):
        with PromoterClient(_url(server), "t", transport=transport) as client:
            answer = client._json("POST", "/owned/op_1", json_body=body)
            after = client._json("GET", "/v1/operations?limit=1")  # back at the first daemon
            seen.append((answer, client.followed, after, type(client._http).__name__))
    assert seen[0][:3] == seen[1][:3]
    assert seen[0][0] == {
        "method": "POST",
        "path": "/owned/op_1",
        "body": json.dumps(body, separators=(",", ":")),
        "chunked": False,
    }
    assert seen[0][1] == _url(owner)
    assert seen[0][2]["path"] == "/v1/operations?limit=1"
    assert [seen[0][3], seen[1][3]] == ["DirectClient", "Client"]


def test_the_loopback_pool_keeps_one_connection_and_sends_another_origin_to_httpx(
    server: Server,
) -> None:
    client = _direct(server)
    for _ in range(3):
        assert client.get("/a").status_code == 200
    assert len(server.connections) == 1
    assert client.get("/close").status_code == 200  # the server closes it after
    assert client.get("/b").json()["path"] == "/b"
    assert len(server.connections) == 2
    elsewhere = f"http://localhost:{server.server_address[1]}/other"
    assert client.get(elsewhere).json()["path"] == "/other"  # localhost is loopback too
    assert client._other is None  # every request so far went through http1
    https = f"https://127.0.0.1:{server.server_address[1]}/tls"
    with pytest.raises(httpx.ConnectError):
        client.get(https)  # TLS to a plain server, by httpx's client, which fails it
    assert isinstance(client._other, httpx.Client)
    assert isinstance(client._other._transport, httpx.HTTPTransport)
    client.close()


def test_an_address_literal_is_connected_to_without_the_resolver(server: Server) -> None:
    # a new interpreter, as a command line: the resolver would import the idna codec
    code = (
        "import sys\n"
        "from promoter.client.direct import DirectClient\n"
        f"client = DirectClient({_url(server)!r}, {{}}, 5.0, lambda: None)\n"
        "assert client.get('/a').json()['path'] == '/a'\n"
        "print('encodings.idna' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_refused_connection_is_the_same_error_without_httpx_loaded_first() -> None:
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        client = DirectClient(url, {}, 5.0, lambda: httpx.Client(base_url=url))
        with pytest.raises(httpx.ConnectError) as caught:
            client.get("/v1/healthz")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        theirs = httpx.Client(base_url=url, transport=httpx.HTTPTransport(verify=context))
        with theirs, pytest.raises(httpx.ConnectError) as expected:
            theirs.get("/v1/healthz")
    assert str(caught.value) == str(expected.value)


def test_the_client_keeps_httpx_transport_when_the_environment_names_proxies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    with PromoterClient("http://127.0.0.1:9", "t") as plain:
        assert isinstance(plain._http, DirectClient)  # a loopback daemon: no httpx at all
    with PromoterClient("http://example.invalid:9", "t") as remote:
        assert isinstance(remote._http, DirectClient)  # httpx's client for it, made on use
        assert remote._http._other is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with PromoterClient("http://127.0.0.1:9", "t") as proxied:
        assert isinstance(proxied._http, httpx.Client)
        assert isinstance(proxied._http._transport, httpx.HTTPTransport)
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("no_proxy", "localhost")  # urllib counts it as a proxy setting too
    assert proxied_by_urllib() is True
    with PromoterClient("http://127.0.0.1:9", "t") as named:
        assert isinstance(named._http, httpx.Client)


def proxied_by_urllib() -> bool:
    from urllib.request import getproxies

    assert proxied() == bool(getproxies())
    return proxied()
