"""The Python client against the real daemon: typed answers, the feed, retries, problems.

``AsyncPromoterClient`` runs the whole orchestrator flow (grant, lease, an executor's
bundle, promotion, the watch feed until completed, the receipt); ``PromoterClient.watch``
iterates the feed. Retries are driven by a ``Backoff`` whose sleeps are recorded, not
slept, against a loopback port nothing listens on and a loopback server that answers
503 before it answers 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from promoter.client.sync import AsyncPromoterClient, Backoff, PromoterClient, tls_context
from promoter.domain.views import FeedEvent, OperationAccepted, OperationView
from promoter.errors import (
    ConfigError,
    DatabaseBusy,
    Forbidden,
    OperationUnknown,
    Unauthenticated,
)
from tests.support.daemon import Daemon
from tests.support.flows import make_bundle, make_grant, sha, ts
from tests.support.promotion import promote, submit

OLD, NEW = b"print('v1')\n", b"print('v2')\n"
T = TypeVar("T")


def _lease(grant: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": grant["executor_run_id"],
        "attempt": grant["attempt"],
        "generation": grant["generation"],
        "resume_epoch": grant["resume_epoch"],
        "fence": grant["fence"],
        "expires_at": ts(timedelta(hours=1)),
    }


async def _orchestrate(daemon: Daemon, repo: Path, identity: str) -> tuple[str, bytes, list[Any]]:
    grant = make_grant(repo, identity)
    async with AsyncPromoterClient(daemon.url, daemon.orchestrator_token) as orch:
        start = (await orch.events()).cursor
        registered = await orch.register_grant(grant)
        assert registered.grant_id == grant["grant_id"]
        lease = await orch.set_lease(grant["workflow_id"], grant["stage"], _lease(grant))
        assert lease.fence == 7
        token = (await orch.mint_executor_token(grant["executor_run_id"])).token

        async def executor() -> tuple[str, str]:
            async with AsyncPromoterClient(daemon.url, token) as ex:
                for digest in await ex.blobs_missing([sha(OLD), sha(NEW)]):
                    data = {sha(OLD): OLD, sha(NEW): NEW}[digest]
                    assert (await ex.put_blob(digest, data)).sha256 == digest
                bundle = make_bundle(grant, [("src/app.py", OLD, NEW)])
                submitted = await ex.submit_bundle(bundle)
                return submitted.bundle_id, submitted.verification_receipt.receipt_sha256

        bundle_id, receipt_sha256 = await asyncio.create_task(executor())  # the bundle
        accepted = await orch.promote(bundle_id, receipt_sha256, 7)
        assert isinstance(accepted, OperationAccepted)
        seen = []
        async for entry in orch.watch(start, repository="work"):
            seen.append(entry)
            if entry.operation_id == accepted.operation_id and entry.status == "completed":
                break
        view = await orch.operation(accepted.operation_id)
        assert isinstance(view, OperationView) and view.status == "completed"
        return accepted.operation_id, await orch.receipt(accepted.operation_id), seen


def test_the_async_client_runs_the_whole_orchestrator_flow(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    flow = _orchestrate(daemon, repo, identity)
    op_id, receipt, seen = asyncio.run(asyncio.wait_for(flow, 120))  # bound: a broken feed fails
    assert json.loads(receipt)["operation_id"] == op_id
    assert (repo / "src" / "app.py").read_bytes() == NEW
    with daemon.orchestrator() as orch:
        ledger = [e["event_id"] for e in orch.get(f"/v1/operations/{op_id}").json()["events"]]
        assert orch.get(f"/v1/operations/{op_id}/receipt").content == receipt
    assert [e.event_id for e in seen if e.event_id] == ledger


def _until_completed(client: PromoterClient) -> list[FeedEvent]:
    entries = []
    for entry in client.watch():
        entries.append(entry)
        if entry.status == "completed":
            break
    return entries


def _within(seconds: float, work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread; a test failure if it has not returned in ``seconds``
    (the sync watch loop cannot be interrupted: a feed that never says 'completed' would
    hang the suite)."""
    done: list[T] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    if not done:
        pytest.fail(f"no answer within {seconds} s (or it raised: see the thread's output)")
    return done[0]


def test_the_sync_client_watches_the_feed_and_waits_on_an_operation(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", OLD, NEW)])
    op_id = promote(daemon, bundle, receipt).json()["operation_id"]
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        entries = _within(120, lambda: _until_completed(client))  # a broken feed fails
        assert {e.operation_id for e in entries} == {op_id}
        assert client.operation(op_id, wait=30, status="in_progress").status == "completed"
        assert client.events(entries[-1].cursor).events == []
        with pytest.raises(OperationUnknown):
            client.operation("op_" + "0" * 32)


def test_an_async_clients_second_client_sends_the_token_it_was_given(daemon: Daemon) -> None:
    """``with_token``, as the sync client's: the same server with another credential; an
    executor's token may ask for missing blobs but not mint tokens, none is refused."""
    unknown = sha(b"a blob no one stored: with_token")

    async def run() -> None:
        async with AsyncPromoterClient(daemon.url, daemon.orchestrator_token) as orch:
            token = (await orch.mint_executor_token("run_with_token")).token
            async with orch.with_token(token) as executor:
                assert executor.url == orch.url
                assert await executor.blobs_missing([unknown]) == [unknown]
                with pytest.raises(Forbidden):
                    await executor.mint_executor_token("run_other")
            async with orch.with_token(None) as anonymous:
                with pytest.raises(Unauthenticated):
                    await anonymous.events()
            with pytest.raises(OperationUnknown):  # the maker still answered as itself
                await orch.operation("op_" + "0" * 32)

    asyncio.run(run())


def test_problems_become_the_matching_promoter_error(daemon: Daemon) -> None:
    async def run() -> None:
        async with AsyncPromoterClient(daemon.url, daemon.orchestrator_token) as orch:
            with pytest.raises(OperationUnknown):
                await orch.operation("op_" + "0" * 32)
        async with AsyncPromoterClient(daemon.url, daemon.operator_token) as op:
            await op.events()
        token = daemon.services.tokens["orchestrator"][:-1] + "x"
        async with AsyncPromoterClient(daemon.url, token) as bad:
            with pytest.raises(Unauthenticated):
                await bad.events()

    asyncio.run(run())
    with daemon.executor("run_x") as ex:
        token = ex.headers["Authorization"].removeprefix("Bearer ")
    with PromoterClient(daemon.url, token) as client, pytest.raises(Forbidden):
        client.events()


@pytest.fixture
def closed_port() -> Iterator[int]:
    # bound and held, never listening: a connection is refused, and no other process (nor
    # a client's own outgoing connection) can take the port while the test runs
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _recording() -> tuple[Backoff, list[float]]:
    slept: list[float] = []

    async def async_sleep(delay: float) -> None:
        slept.append(delay)

    return Backoff(attempts=4, first=0.25, sleep=slept.append, async_sleep=async_sleep), slept


def test_idempotent_calls_retry_connection_errors_with_exponential_backoff(
    closed_port: int,
) -> None:
    backoff, slept = _recording()
    url = f"http://127.0.0.1:{closed_port}"
    with PromoterClient(url, "t", backoff=backoff) as client, pytest.raises(ConfigError):
        client.events()
    assert slept == [0.25, 0.5, 1.0]
    slept.clear()
    with PromoterClient(url, "t", backoff=backoff) as client, pytest.raises(ConfigError):
        client.recover("op_" + "0" * 32, 7)  # not idempotent: one attempt
    assert slept == []

    async def run() -> None:
        async with AsyncPromoterClient(url, "t", backoff=backoff) as client:
            with pytest.raises(ConfigError):
                await client.operation("op_" + "0" * 32)

    asyncio.run(run())
    assert slept == [0.25, 0.5, 1.0]


@contextmanager
def _flaky_server(unavailable: int) -> Iterator[tuple[str, list[str]]]:
    """A loopback server that answers ``unavailable`` 503 problems, then an empty feed."""
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            if len(requests) <= unavailable:
                body = {"type": "about:blank", "title": "busy", "status": 503}
                body["code"] = "database_busy"
                status, media = 503, "application/problem+json"
            else:
                body, status, media = (
                    {"events": [], "cursor": "evc_" + "0" * 16},
                    200,
                    "application/json",
                )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_is_retried_until_the_server_answers() -> None:
    backoff, slept = _recording()
    with _flaky_server(2) as (url, requests), PromoterClient(url, "t", backoff=backoff) as c:
        assert c.events().events == []
    assert (len(requests), slept) == (3, [0.25, 0.5])


def test_a_503_that_stays_is_raised_as_its_problem_after_the_last_attempt() -> None:
    backoff, slept = _recording()
    with _flaky_server(10) as (url, requests):

        async def run() -> None:
            async with AsyncPromoterClient(url, "t", backoff=backoff) as client:
                with pytest.raises(DatabaseBusy):
                    await client.events()

        asyncio.run(run())
    assert (len(requests), slept) == (4, [0.25, 0.5, 1.0])


# --- TLS contexts -----------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=365 * 30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_a_plain_http_client_loads_no_certificate_bundle(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    import certifi

    def refused() -> str:
        raise AssertionError("a plain-http client loaded the CA bundle")

    monkeypatch.setattr(certifi, "where", refused)
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        assert client.healthz()["status"] == "ok"
        with client.with_token(None) as second:
            assert second.healthz()["status"] == "ok"
    asyncio.run(AsyncPromoterClient(daemon.url, None).aclose())


def test_the_plain_http_context_fails_a_tls_handshake_closed(tmp_path: Path) -> None:
    """Were TLS ever spoken with a plain-http client's context (a redirect, a proxy), no
    certificate would be trusted: a self-signed server is refused, not accepted."""
    import ssl

    cert_file, key_file = _self_signed(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    context = tls_context("http://127.0.0.1:8787")
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with conn, contextlib.suppress(ssl.SSLError, OSError):
                server_context.wrap_socket(conn, server_side=True).close()

        thread = threading.Thread(target=serve)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            context.wrap_socket(raw, server_hostname="127.0.0.1")
        thread.join(30)
    # the same server's certificate, once trusted, is accepted: the refusal was the trust
    trusting = tls_context("http://127.0.0.1:8787")
    trusting.load_verify_locations(cert_file)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        accepted: list[bool] = []

        def serve_once() -> None:
            conn, _ = listener.accept()
            with conn, server_context.wrap_socket(conn, server_side=True):
                accepted.append(True)

        thread = threading.Thread(target=serve_once)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            trusting.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            pass
        thread.join(30)
        assert accepted == [True]


def test_https_clients_share_one_verifying_context() -> None:
    import ssl

    first = tls_context("https://promoter.example:8787")
    assert tls_context("HTTPS://other.example") is first
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert tls_context("http://127.0.0.1:8787") is not first
