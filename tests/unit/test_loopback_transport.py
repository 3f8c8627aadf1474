"""The loopback transport answers as httpx's own transport does, over a real socket.

Each exchange runs through an ``httpx.Client`` twice, once with
``promoter.client.loopback.LoopbackTransport`` and once with ``httpx.HTTPTransport``,
against the same real HTTP/1.1 server on a loopback port; the status, body, headers and
errors must be the same. Beside that: one connection serves consecutive requests, one
the server closed is replaced, a streamed body is sent chunked, any other origin goes
to httpx's transport, and the client keeps httpx's own transport when the environment
names proxies.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from promoter.client.direct import DirectClient
from promoter.client.loopback import LoopbackTransport
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
        data = json.dumps(document).encode()
        self.send_response(421 if self.path == "/elsewhere" else 200)
        self.send_header("Content-Type", "application/json")
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


@pytest.fixture
def server() -> Iterator[Server]:
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


def _url(server: Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _both(server: Server) -> list[httpx.Client]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return [
        httpx.Client(base_url=_url(server), transport=LoopbackTransport(context)),
        httpx.Client(base_url=_url(server), transport=httpx.HTTPTransport(verify=context)),
    ]


def _seen(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        return type(exc).__name__
    return (
        response.status_code,
        response.json(),
        response.headers["content-type"],
        response.headers.raw[-3:],
        response.reason_phrase,
    )


def test_the_same_answers_as_httpx_transport(server: Server) -> None:
    mine, theirs = _both(server)
    exchanges: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/operations?status=awaiting_approval", {}),
        ("POST", "/v1/grants", {"json": {"a": 1}}),
        ("PUT", "/v1/blobs/x", {"content": b"bytes" * 1000}),
        ("PUT", "/v1/blobs/y", {"content": iter([b"one", b"", b"two" * 5000])}),
        ("GET", "/elsewhere", {}),
        ("GET", "/close", {}),
        ("GET", "/slow", {"timeout": 0.3}),
    ]
    for method, path, kwargs in exchanges:
        kwargs2 = dict(kwargs)
        if isinstance(kwargs.get("content"), Iterator):
            kwargs2["content"] = iter([b"one", b"", b"two" * 5000])
        assert _seen(mine, method, path, **kwargs) == _seen(theirs, method, path, **kwargs2), path
    assert _seen(mine, "GET", "/slow", timeout=0.3) == "ReadTimeout"
    answer = mine.put("/v1/blobs/z", content=iter([b"a", b"b"]))
    assert answer.json()["chunked"] is True and answer.json()["body"] == "ab"
    mine.close()
    theirs.close()


def test_one_connection_serves_consecutive_requests_and_a_closed_one_is_replaced(
    server: Server,
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with httpx.Client(base_url=_url(server), transport=LoopbackTransport(context)) as client:
        for _ in range(3):
            assert client.get("/a").status_code == 200
        assert len(server.connections) == 1
        assert client.get("/close").status_code == 200  # the server closes it after
        assert client.get("/b").json()["path"] == "/b"
        assert len(server.connections) == 2


def test_a_refused_connection_is_the_error_httpx_raises() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    errors = []
    for transport in (LoopbackTransport(context), httpx.HTTPTransport(verify=context)):
        with httpx.Client(base_url=url, transport=transport) as client:
            with pytest.raises(httpx.ConnectError) as caught:
                client.get("/v1/healthz")
            errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_another_origin_goes_to_httpx_transport(server: Server) -> None:
    transport = LoopbackTransport(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    https = f"https://127.0.0.1:{server.server_address[1]}/tls"
    with httpx.Client(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(https)  # TLS to a plain server, by httpx's transport, which fails it
        assert isinstance(transport._other, httpx.HTTPTransport)


def test_the_client_keeps_httpx_transport_when_the_environment_names_proxies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    with PromoterClient("http://127.0.0.1:9", "t") as plain:
        assert isinstance(plain._http, DirectClient)  # a loopback daemon: no httpx at all
    with PromoterClient("http://example.invalid:9", "t") as remote:
        assert isinstance(remote._http, httpx.Client)
        assert isinstance(remote._http._transport, LoopbackTransport)
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


def _direct(server: Server) -> DirectClient:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    def other() -> httpx.Client:
        return httpx.Client(base_url=_url(server), transport=LoopbackTransport(context))

    return DirectClient(_url(server), {}, 5.0, other)


def test_the_loopback_pool_without_httpx_answers_as_the_httpx_client(server: Server) -> None:
    """``DirectClient`` against the httpx client over ``LoopbackTransport``: the same
    request reaches the server (method, target, body, framing), the same answer comes back,
    and a failure is the same httpx error."""
    mine = _direct(server)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    theirs = httpx.Client(base_url=_url(server), transport=LoopbackTransport(context))
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
    mine.close()
    theirs.close()


def _answered(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        return type(exc).__name__
    return (
        response.status_code,
        response.json(),
        response.text,
        response.is_success,
        response.headers.get("content-type"),
        response.headers.get("X-LATIN"),
        response.request.method,
        response.request.url.path,
    )


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
    https = f"https://127.0.0.1:{server.server_address[1]}/tls"
    with pytest.raises(httpx.ConnectError):
        client.get(https)  # TLS to a plain server, by httpx's client, which fails it
    assert isinstance(client._other, httpx.Client)
    client.close()


def test_a_refused_connection_is_the_same_error_without_httpx_loaded_first() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    client = DirectClient(url, {}, 5.0, lambda: httpx.Client(base_url=url))
    with pytest.raises(httpx.ConnectError) as caught:
        client.get("/v1/healthz")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    theirs = httpx.Client(base_url=url, transport=LoopbackTransport(context))
    with theirs, pytest.raises(httpx.ConnectError) as expected:
        theirs.get("/v1/healthz")
    assert str(caught.value) == str(expected.value)
