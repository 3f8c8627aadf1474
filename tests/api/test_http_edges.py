"""The HTTP edges: a rebound name and overflowing cursors, through the real daemon.

DNS rebinding: a foreign page rebinds its own name to the daemon's address; the browser
then sends that name in ``Host``. Every route but ``/healthz`` refuses such a request
with ``421 host_not_allowed`` (raw sockets here, so the test controls the header byte
for byte). A cursor past what a database integer holds is a ``400 bad_request``, never
a 500.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import Daemon, running_daemon


def _raw_get(daemon: Daemon, path: str, host: str | None) -> tuple[int, bytes]:
    """One GET over a plain socket with exactly ``host`` (None: no Host header at all)."""
    url = httpx.URL(daemon.url)
    assert url.port is not None
    lines = [f"GET {path} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += ["Connection: close", "", ""]
    with socket.create_connection((url.host, url.port), timeout=60) as sock:
        sock.sendall("\r\n".join(lines).encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture
def named(tmp_path: Path, repo: Path) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path / "state", {"work": repo}, allowed_hosts=["promoter.internal"]
    ) as running:
        yield running


@pytest.mark.parametrize(
    "path", ["/metrics", "/ui/login", "/v1/keys", "/readyz", "/v1/events", "/openapi.json"]
)
def test_a_rebound_foreign_host_is_refused_on_every_route(named: Daemon, path: str) -> None:
    for host in ("evil.example", "evil.example:80", "localhost.evil.example", "127.0.0.1.nip.io"):
        status, body = _raw_get(named, path, host)
        assert status == 421, (host, body)
        problem = json.loads(body)
        assert problem["code"] == "host_not_allowed"
        assert problem["instance"] == path
        assert b"promoter_" not in body and b"csrf" not in body.lower()


def test_a_request_without_a_host_header_is_refused(named: Daemon) -> None:
    status, body = _raw_get(named, "/metrics", None)
    assert status == 421
    assert json.loads(body)["code"] == "host_not_allowed"


def test_loopback_names_the_bound_address_and_configured_names_are_served(named: Daemon) -> None:
    port = httpx.URL(named.url).port
    for host in (
        f"127.0.0.1:{port}",
        "localhost",
        f"LOCALHOST:{port}",
        "[::1]:1",
        "127.0.0.2",
        "promoter.internal",
        "Promoter.Internal:443",
    ):
        status, body = _raw_get(named, "/metrics", host)
        assert status == 200, (host, body)
        assert b"promoter_" in body


@pytest.mark.parametrize(
    "host",
    [
        "localhost:80.evil",  # a port that is not digits: the rest is another name
        "[::1].evil",  # an IPv6 literal with a name glued after it
        "[::1]evil:80",
        "LOCALHOST.",  # a trailing dot: a name of its own to a browser, refused not trimmed
        "localhost.:80",
        "promoter.internal.",
        "localhost:",  # an empty port
        "localhost:123456",
        "::1",  # an IPv6 literal without brackets
        "[::1",
        "[fe80::1%25lo]",  # a zone
        "127.0.0.1 evil.example",
        "localhost:80:80",
        "local_host..evil",
    ],
)
def test_a_host_header_that_is_not_exactly_host_and_port_is_refused(
    named: Daemon, host: str
) -> None:
    status, body = _raw_get(named, "/metrics", host)
    assert status == 421, (host, body)
    assert json.loads(body)["code"] == "host_not_allowed"
    assert b"promoter_" not in body


def test_healthz_answers_whatever_the_host(named: Daemon) -> None:
    status, body = _raw_get(named, "/healthz", "evil.example")
    assert status == 200
    assert json.loads(body)["status"] == "ok"


@pytest.mark.parametrize(
    "cursor",
    [
        "evc_ffffffffffffffff",  # past a signed 64-bit integer: an OverflowError once
        "evc_8000000000000000",
        "evc_7fffffffffffffff\n",
        "evc_０００００００００００００００1",
        "evc_" + "0" * 15 + "²",
    ],
)
def test_an_overflowing_or_foreign_cursor_is_a_bad_request_not_a_500(
    daemon: Daemon, cursor: str
) -> None:
    with daemon.orchestrator() as orch:
        answer = orch.get("/v1/events", params={"after": cursor})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "bad_request"


def test_the_largest_cursor_a_database_holds_is_an_empty_page(daemon: Daemon) -> None:
    with daemon.orchestrator() as orch:
        answer = orch.get("/v1/events", params={"after": "evc_7fffffffffffffff"})
    assert answer.status_code == 200
    assert answer.json() == {"events": [], "cursor": "evc_7fffffffffffffff"}
