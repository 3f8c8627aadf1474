"""Slow clients at the daemon's edge: requests that never end, and more connections than
descriptors (docs/operator/http-edges.md#slow-clients).

A local process could open connections and send a byte of a request's head every few
seconds, each held for ever, until the daemon's descriptors ran out and its own files
could not be opened. Raw sockets against a real daemon on a loopback port: the bounds
are made small in the test's settings, and each test waits for the close with a generous
bound (the drip's pace is the wait for the close, never a synchronization).
"""

from __future__ import annotations

import hashlib
import json
import logging
import resource
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from promoter.api import connections
from promoter.api.connections import connection_cap
from promoter.api.routes import blobs as blobs_routes
from promoter.store.blobs import BlobWriter
from promoter.store.credentials import add_operator
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo, sha
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, upload_blobs
from tests.support.promotion import promote, submit

BOUND = 0.3  # the head's and the body's bound in these tests' daemons
PATIENCE = 60.0  # the longest a test waits for the daemon to close a connection
HEAD = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
CHANGE = [("src/app.py", b"print('v1')\n", b"print('v2')\n")]
DRIP = b"X-Drip: aaaaaaaaaaaaaaaaaaaaaaaa\r\n"  # header lines, a byte at a time, for ever


@pytest.fixture
def daemon(tmp_path: Path, repo: Path) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        request_head_seconds=BOUND,
        request_body_silence_seconds=BOUND,
    ) as running:
        yield running


def _connect(url: str) -> socket.socket:
    address = httpx.URL(url)
    assert address.port is not None
    return socket.create_connection((address.host, address.port), timeout=PATIENCE)


def _closed(sock: socket.socket) -> bytes:
    """What the daemon sent before it closed ``sock`` (read to the end)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, BrokenPipeError):  # a byte of ours crossed the close
        pass
    return data


def _drip_until_closed(sock: socket.socket, drip: bytes) -> tuple[bytes, int]:
    """``drip`` sent a byte at a time, one per 50 ms of silence from the daemon, until the
    daemon closes (at most ``PATIENCE``): what it sent, and how many bytes were dripped."""
    end = time.monotonic() + PATIENCE
    sent = 0
    while time.monotonic() < end:
        readable, _, _ = select.select([sock], [], [], 0.05)
        if readable:
            return _closed(sock), sent
        try:
            sock.send(drip[sent % len(drip) : sent % len(drip) + 1])
        except (ConnectionResetError, BrokenPipeError):
            return _closed(sock), sent
        sent += 1
    raise AssertionError(f"the daemon held a dripping connection {PATIENCE} s ({sent} bytes)")


def test_a_client_dripping_its_headers_is_closed(daemon: Daemon) -> None:
    with _connect(daemon.url) as sock:
        sock.sendall(HEAD)
        answered, dripped = _drip_until_closed(sock, DRIP)
    assert answered == b""  # a plain close: no answer to a request that never came
    assert dripped > 0


def test_a_client_dripping_a_head_after_an_answer_is_closed(daemon: Daemon) -> None:
    """On keep-alive, the next head's bound runs from the previous answer (uvicorn's
    keep-alive timer stops at the first byte of it)."""
    with _connect(daemon.url) as sock:
        sock.sendall(HEAD + b"\r\n")
        first = b""
        while b"\r\n\r\n" not in first or not first.endswith(b"}"):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 OK\r\n"), first
        sock.sendall(HEAD)
        answered, _ = _drip_until_closed(sock, DRIP)
    assert answered == b""


def test_a_client_stalling_its_body_is_closed(daemon: Daemon) -> None:
    body = json.dumps({"executor_run_id": "run_1", "ttl_seconds": 60}).encode()
    with _connect(daemon.url) as sock:
        sock.sendall(
            b"POST /v1/executor-tokens HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {daemon.orchestrator_token}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        readable, _, _ = select.select([sock], [], [], PATIENCE)
        assert readable, f"the daemon held a stalled body {PATIENCE} s"
        assert _closed(sock) == b""  # the route never answered a request it never had
    with daemon.orchestrator() as orch:  # nothing else was held by it
        assert orch.get("/readyz").status_code == 200


def test_a_slow_answer_is_not_cut(daemon: Daemon) -> None:
    """Only the client's turn is timed: a long-poll held ten bounds is answered whole, and
    the connection serves the next request."""
    with _connect(daemon.url) as sock:
        request = (
            b"GET /v1/events?wait=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {daemon.orchestrator_token}\r\n\r\n".encode()
        )
        for _ in range(2):
            sock.sendall(request)
            answer = b""
            while not answer.endswith(b"}"):
                chunk = sock.recv(65536)
                assert chunk, f"the connection was closed inside the answer: {answer!r}"
                answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
            assert json.loads(body)["events"] == []  # answered once the wait ended


def test_the_cap_is_max_connections_and_at_most_half_the_open_file_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(7) == 7
    if soft != resource.RLIM_INFINITY:
        assert connection_cap(soft) == soft // 2


def test_a_request_being_answered_is_never_closed_to_make_room(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a cap of one, a long-poll held in the daemon (at ``long_poll_probe``) keeps its
    connection: the connections that come meanwhile are closed as they are accepted."""
    pause = Pause(tmp_path, "long_poll_probe")
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()
    with running_daemon(
        tmp_path / "state", {"work": repo}, max_connections=1, request_head_seconds=600
    ) as daemon:
        with _connect(daemon.url) as held:
            held.sendall(
                b"GET /v1/events?wait=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Bearer {daemon.orchestrator_token}\r\n\r\n".encode()
            )
            try:
                pause.reached()  # its head is in: the daemon's turn
                for _ in range(8):
                    with _connect(daemon.url) as other:
                        other.sendall(HEAD)
                        assert _closed(other) == b""
            finally:
                pause.release()
            answer = b""
            while not answer.endswith(b"}"):
                chunk = held.recv(65536)
                assert chunk, f"the connection was closed inside the answer: {answer!r}"
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
        assert json.loads(body)["events"] == []


# the cap: a daemon held at 256 open files serves at most 128 connections
OPEN_FILES = 256
CAP = OPEN_FILES // 2
ATTACKERS = 2 * OPEN_FILES


def test_connections_past_the_cap_leave_the_daemon_its_own_files(tmp_path: Path) -> None:
    """More dripping connections than the daemon has descriptors: those past the cap close
    the ones that waited longest, and the daemon's own files and answers go on."""
    daemon = DaemonProcess(
        tmp_path / "state",
        {"work": init_repo(tmp_path / "repo")},
        open_files=(OPEN_FILES, OPEN_FILES),
        extra_env={"PROMOTER_REQUEST_HEAD_SECONDS": "600"},  # the cap alone, not the deadline
    )
    attackers: list[socket.socket] = []
    try:
        for _ in range(ATTACKERS):
            sock = _connect(daemon.url)
            sock.sendall(HEAD)  # a head that never ends
            attackers.append(sock)
        held = set(attackers)
        end = time.monotonic() + PATIENCE
        while len(held) > CAP and time.monotonic() < end:
            readable, _, _ = select.select(list(held), [], [], 1.0)
            for sock in readable:
                assert _closed(sock) == b""
                held.discard(sock)
        assert len(held) <= CAP, f"{len(held)} held past the cap of {CAP}: {daemon.log[-8:]}"
        with daemon.client("operator") as operator:
            try:
                ready = operator.get("/readyz", timeout=PATIENCE)
            except httpx.TransportError as exc:  # the daemon's closes say which and why
                raise AssertionError(f"/readyz: {exc!r}; {daemon.log[-12:]}") from exc
        assert ready.status_code == 200, ready.text
        assert ready.json() == {
            "status": "ready",
            "checks": {"database": True, "state_dir_writable": True, "host_active": True},
            "reason": None,
        }
        with daemon.executor("run_1") as executor:  # a descriptor per blob, and the ledger
            upload_blobs(executor, [b"blob %d\n" % n for n in range(16)])
        stored = {p.name for p in (tmp_path / "state" / "audit" / "blobs").rglob("*")}
        assert {sha(b"blob %d\n" % n) for n in range(16)} <= stored
        assert not any("Too many open files" in line for line in daemon.log), daemon.log[-5:]
    finally:
        for sock in attackers:
            sock.close()
        daemon.kill()


def test_a_flood_accepted_in_one_batch_does_not_close_the_request_behind_it(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio accepts a whole batch before it makes any protocol, and a protocol's
    connection is made a turn of the loop later: a flood filling the cap in one batch left
    no connection in the gate's ``waiting``, and the request accepted next was closed at
    accept, however silent the flood (``/readyz`` reset past the cap). At a cap of two,
    the daemon's loop is held in its gate at its first accept (released by the test)
    while a second connection and an honest request queue behind it, so the three are
    one batch: the first, silent the longest, is closed to make room, and the request is
    answered."""
    reached, release = threading.Event(), threading.Event()
    admit = connections.Gate.admit

    def held_at_first(gate: connections.Gate) -> bool:
        if not reached.is_set():
            reached.set()
            assert release.wait(PATIENCE), "the test never released the gate"
        return admit(gate)

    monkeypatch.setattr(connections.Gate, "admit", held_at_first)
    with (
        running_daemon(
            tmp_path / "state", {"work": repo}, max_connections=2, request_head_seconds=600
        ) as daemon,
        _connect(daemon.url) as first,  # the loop held in the gate as it accepts it
        _connect(daemon.url) as second,
    ):
        try:
            assert reached.wait(PATIENCE), "the daemon never accepted the first connection"
            honest = _connect(daemon.url)
            second.sendall(HEAD)  # a head that never ends
            honest.sendall(HEAD + b"\r\n")
        finally:
            release.set()
        with honest:
            answer = _answer(honest)
            assert _closed(first) == b""  # the silent longest, closed to make room
            assert select.select([second], [], [], 0)[0] == []  # still held
            honest.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            scraped = _closed(honest)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["status"] == "ready"
    assert scraped.startswith(b"HTTP/1.1 200 OK\r\n"), scraped[:200]
    assert _closed_counts(scraped.decode()) == [
        'promoter_connections_closed_total{reason="head"} 0.0',
        'promoter_connections_closed_total{reason="body"} 0.0',
        'promoter_connections_closed_total{reason="make_room"} 1.0',
        'promoter_connections_closed_total{reason="at_accept"} 0.0',
        'promoter_connections_closed_total{reason="drain"} 0.0',
    ]


def _closed_counts(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("promoter_connections_closed")]


def test_connections_cut_by_a_deadline_are_counted_by_what_was_late(daemon: Daemon) -> None:
    with _connect(daemon.url) as sock:
        sock.sendall(HEAD)
        assert _drip_until_closed(sock, DRIP)[0] == b""
    with _connect(daemon.url) as sock:
        sock.sendall(
            b"POST /v1/executor-tokens HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {daemon.orchestrator_token}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{"
        )
        assert _closed(sock) == b""
    scraped = httpx.get(f"{daemon.url}/metrics", timeout=PATIENCE)
    assert scraped.status_code == 200
    assert _closed_counts(scraped.text) == [
        'promoter_connections_closed_total{reason="head"} 1.0',
        'promoter_connections_closed_total{reason="body"} 1.0',
        'promoter_connections_closed_total{reason="make_room"} 0.0',
        'promoter_connections_closed_total{reason="at_accept"} 0.0',
        'promoter_connections_closed_total{reason="drain"} 0.0',
    ]


def test_a_flood_at_the_cap_is_counted_and_logged_in_one_line(
    tmp_path: Path,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At a cap of one: an idle connection closed to make room for a long-poll, then three
    closed at accept while the long-poll is held in the daemon (at ``long_poll_probe``);
    the cap's closes are one warning line, the first at once, the rest within
    ``CAP_EVERY`` left for the next (tests/unit/test_connection_closes.py)."""
    pause = Pause(tmp_path, "long_poll_probe")
    monkeypatch.setenv(faults.ENV, pause.spec)
    monkeypatch.setattr(connections, "CAP_EVERY", 10 * PATIENCE)  # however slow this test
    faults.reset()
    caplog.set_level(logging.INFO, logger="promoter.api.connections")
    with (
        running_daemon(
            tmp_path / "state", {"work": repo}, max_connections=1, request_head_seconds=600
        ) as daemon,
        _connect(daemon.url) as idle,
    ):
        idle.sendall(HEAD + b"\r\n")
        answer = b""
        while not answer.endswith(b"}"):
            answer += idle.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        idle.sendall(HEAD)  # the next request's head, not yet whole: it may make room
        with _connect(daemon.url) as held:  # accepted at the cap: the idle one closed
            held.sendall(
                b"GET /v1/events?wait=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Bearer {daemon.orchestrator_token}\r\n\r\n".encode()
            )
            try:
                pause.reached()
                assert _closed(idle) == b""
                for _ in range(3):  # none waits: each closed as it is accepted
                    with _connect(daemon.url) as other:
                        other.sendall(HEAD)
                        assert _closed(other) == b""
            finally:
                pause.release()
            answer = b""
            while not answer.endswith(b"}"):
                answer += held.recv(65536)
            held.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            scraped = _closed(held)
    assert scraped.startswith(b"HTTP/1.1 200 OK\r\n"), scraped[:200]
    assert _closed_counts(scraped.decode()) == [
        'promoter_connections_closed_total{reason="head"} 0.0',
        'promoter_connections_closed_total{reason="body"} 0.0',
        'promoter_connections_closed_total{reason="make_room"} 1.0',
        'promoter_connections_closed_total{reason="at_accept"} 3.0',
        'promoter_connections_closed_total{reason="drain"} 0.0',
    ]
    lines = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "promoter.api.connections"
    ]
    assert lines == [
        (logging.WARNING, "at the cap of 1 connections: closed 1 to make room and 0 at accept")
    ]


# the cap's choice: the connection silent the longest, not the oldest
FAIR_CAP = 8
ROUNDS = 3 * FAIR_CAP  # a chunk of the upload, then a new connection of the flood
CHUNK = 16 * 1024


def _executor_token(url: str, orchestrator_token: str) -> str:
    """A token of run ``run_1``, asked on a connection the daemon has closed on return."""
    body = json.dumps({"executor_run_id": "run_1", "ttl_seconds": 3600}).encode()
    with _connect(url) as sock:
        sock.sendall(
            b"POST /v1/executor-tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            + f"Authorization: Bearer {orchestrator_token}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = _closed(sock)  # read to the daemon's close: its connection is gone
    head, _, document = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created\r\n"), answer
    token: str = json.loads(document)["token"]
    return token


@pytest.mark.parametrize("flood", ["silent", "dripping"])
def test_a_flood_of_new_connections_does_not_close_an_upload_that_keeps_sending(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, flood: str
) -> None:
    """A local process reconnecting in a loop at a cap of 8, each connection sending
    nothing (or, dripping, a byte of a head now and then, rarer than the upload's
    chunks): the cap closed the oldest connection whose request was not whole, and the
    executor's blob upload in progress, sending all the while, was the oldest once the
    flood had been closed past it. Each round sends a chunk of the upload and waits until
    the blob's writer has taken it (so the daemon read it: the order is the test's own),
    then opens a connection of the flood and waits for the one closed to make room for
    it: always a connection of the flood (the one silent the longest), and the upload is
    stored whole."""
    written = threading.Condition()
    taken = [0]  # bytes the blob's writer took
    write = BlobWriter.write

    def counted(writer: BlobWriter, chunk: bytes | memoryview) -> None:
        write(writer, chunk)
        with written:
            taken[0] += len(chunk)
            written.notify_all()

    def read_to(end: int) -> None:
        with written:
            assert written.wait_for(lambda: taken[0] >= end, PATIENCE), (taken[0], end)

    monkeypatch.setattr(BlobWriter, "write", counted)
    blob = b"".join(hashlib.sha256(b"%d" % n).digest() * (CHUNK // 32) for n in range(ROUNDS + 1))
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        max_connections=FAIR_CAP,
        request_head_seconds=600,  # the cap alone, not the deadline
    ) as daemon:
        token = _executor_token(daemon.url, daemon.orchestrator_token)
        floods: list[socket.socket] = []  # silent the longest first
        for _ in range(FAIR_CAP - 1):  # each made in the daemon (answered), then a head begun
            floods.append(_connect(daemon.url))
            floods[-1].sendall(HEAD + b"\r\n")
            assert _answer(floods[-1]).startswith(b"HTTP/1.1 200 OK\r\n")
            floods[-1].sendall(HEAD[:1])
        dripped = dict.fromkeys(floods, 1)
        upload = _connect(daemon.url)  # the eighth: the cap is full
        try:
            upload.sendall(
                f"PUT /v1/blobs/sha256/{sha(blob)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {len(blob)}\r\n\r\n".encode()
                + blob[:CHUNK]
            )
            read_to(CHUNK)
            for sent in range(1, ROUNDS + 1):
                upload.sendall(blob[sent * CHUNK : (sent + 1) * CHUNK])
                read_to((sent + 1) * CHUNK)
                if flood == "dripping":  # the flood's silent longest: a byte, to the back
                    drip = floods.pop(0)
                    drip.sendall(HEAD[dripped[drip] : dripped[drip] + 1])
                    dripped[drip] += 1
                    floods.append(drip)
                new = _connect(daemon.url)
                readable, _, _ = select.select([upload, *floods], [], [], PATIENCE)
                assert readable, f"nothing closed to make room in {PATIENCE} s"
                assert (
                    upload not in readable
                ), f"round {sent}: the upload closed to make room: {_closed(upload)!r}"
                for sock in readable:
                    assert _closed(sock) == b""
                    floods.remove(sock)
                    sock.close()
                floods.append(new)
                dripped[new] = 0
            answer = _answer(upload)
            upload.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            scraped = _closed(upload)
        finally:
            upload.close()
            for sock in floods:
                sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created\r\n"), answer
    assert json.loads(body) == {"sha256": sha(blob), "bytes": len(blob), "created": True}
    (stored,) = [p for p in (tmp_path / "state").rglob(sha(blob)) if p.is_file()]
    assert stored.read_bytes() == blob
    assert scraped.startswith(b"HTTP/1.1 200 OK\r\n"), scraped[:200]
    assert _closed_counts(scraped.decode()) == [
        'promoter_connections_closed_total{reason="head"} 0.0',
        'promoter_connections_closed_total{reason="body"} 0.0',
        f'promoter_connections_closed_total{{reason="make_room"}} {float(ROUNDS)}',
        'promoter_connections_closed_total{reason="at_accept"} 0.0',
        'promoter_connections_closed_total{reason="drain"} 0.0',
    ]


def test_a_client_waiting_for_100_continue_is_not_closed_for_a_dripping_one(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sent ``Expect: 100-continue`` waits for the daemon: it is the
    daemon's turn until the route asks for the body. The gate counted it silent from its
    head, so at a cap of two a new connection closed it, not a connection dripping its
    head. The upload's route is held before it reads the body (``_Upload.open``,
    released by the test): the dripping one is closed to make room, and the upload,
    sent once ``100 Continue`` comes, is stored."""
    reached, release = _held_upload(monkeypatch)
    blob = b"a blob sent after 100 Continue\n"
    with running_daemon(
        tmp_path / "state", {"work": repo}, max_connections=2, request_head_seconds=600
    ) as daemon:
        token = _executor_token(daemon.url, daemon.orchestrator_token)
        with _connect(daemon.url) as upload, _connect(daemon.url) as drip:
            upload.sendall(
                f"PUT /v1/blobs/sha256/{sha(blob)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nExpect: 100-continue\r\n"
                "Content-Type: application/octet-stream\r\n"
                f"Content-Length: {len(blob)}\r\n\r\n".encode()
            )
            answer = _drip_closed_for_the_upload(daemon.url, upload, drip, (reached, release), blob)
            upload.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            scraped = _closed(upload)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created\r\n"), answer
    assert json.loads(body) == {"sha256": sha(blob), "bytes": len(blob), "created": True}
    assert _closed_counts(scraped.decode())[2:4] == [
        'promoter_connections_closed_total{reason="make_room"} 1.0',
        'promoter_connections_closed_total{reason="at_accept"} 0.0',
    ]


def test_a_pipelined_upload_whose_body_drips_is_closed_to_make_room(
    tmp_path: Path, repo: Path
) -> None:
    """An executor sends a quick request and, behind it on the same connection, a blob
    upload whose body then comes a byte at a time: its reading resumed when the first
    answer ended, but the gate counted it the daemon's turn, so it was never a candidate
    to close to make room. Two such connections filled a cap of two and the operator's
    ``/readyz`` was closed at accept. Its body still coming, it is the client's turn: the
    one silent the longest is closed to make room and ``/readyz`` is answered."""
    blob = b"a blob whose body never ends\n"
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        max_connections=2,
        request_head_seconds=600,
        request_body_silence_seconds=600,
    ) as daemon:
        token = _executor_token(daemon.url, daemon.orchestrator_token)
        upload = (
            f"PUT /v1/blobs/sha256/{sha(blob)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(blob)}\r\n\r\n"
        ).encode()
        with _connect(daemon.url) as first, _connect(daemon.url) as second:
            for sock in (first, second):
                sock.sendall(HEAD + b"\r\n" + upload + blob[:1])  # pipelined behind /readyz
                assert _answer(sock).startswith(b"HTTP/1.1 200 OK\r\n")
            second.sendall(blob[1:2])  # the second's body heard last: the first is silent longest
            with _connect(daemon.url) as honest:
                honest.sendall(HEAD + b"\r\n")
                answer = _answer(honest)  # closed at accept: no connection was a candidate
                readable, _, _ = select.select([first, second], [], [], PATIENCE)
                assert readable == [first], "no pipelined upload was closed to make room"
                assert _closed(first) == b""
            assert select.select([second], [], [], 0)[0] == []  # still held
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer


def test_a_pipelined_upload_waiting_for_100_continue_is_not_closed_to_make_room(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same upload sent with ``Expect: 100-continue`` behind a quick request waits
    for the daemon once the first answer ends, until its route asks for the body (held
    here before it does): not a candidate, so at a cap of two a connection dripping its
    head is closed to make room, and the upload, sent after its ``100 Continue``, is
    stored."""
    reached, release = _held_upload(monkeypatch)
    blob = b"a pipelined blob sent after 100 Continue\n"
    with running_daemon(
        tmp_path / "state", {"work": repo}, max_connections=2, request_head_seconds=600
    ) as daemon:
        token = _executor_token(daemon.url, daemon.orchestrator_token)
        with _connect(daemon.url) as upload, _connect(daemon.url) as drip:
            upload.sendall(
                HEAD
                + b"\r\n"
                + f"PUT /v1/blobs/sha256/{sha(blob)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nExpect: 100-continue\r\n"
                "Content-Type: application/octet-stream\r\n"
                f"Content-Length: {len(blob)}\r\n\r\n".encode()
            )
            assert _answer(upload).startswith(b"HTTP/1.1 200 OK\r\n")
            answer = _drip_closed_for_the_upload(daemon.url, upload, drip, (reached, release), blob)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created\r\n"), answer
    assert json.loads(body) == {"sha256": sha(blob), "bytes": len(blob), "created": True}


WAITERS_CAP = 4  # the connections of the daemon held by one credential's long-polls
WAITS_PER_CREDENTIAL = 2


def _answer(sock: socket.socket) -> bytes:
    """One whole answer with a JSON body (its head and its body to the closing brace)."""
    answer = b""
    while not answer.endswith(b"}"):
        chunk = sock.recv(65536)
        assert chunk, f"the connection was closed inside the answer: {answer!r}"
        answer += chunk
    return answer


@pytest.mark.parametrize("watched", ["operation", "events"])
def test_one_credentials_long_polls_do_not_hold_every_connection(
    tmp_path: Path, repo: Path, watched: str
) -> None:
    """The orchestrator's token opens as many long-polls as the daemon has connections:
    of an operation's change (``GET /v1/operations/{id}?wait=``, not a costly read), or of
    the watch feed (a costly read, but within the orchestrator's places). Each would be in
    the daemon's turn, so the operator's next connection was closed at accept until they
    ended. Past ``max_waits_per_credential`` a wait is answered ``429`` at once, its
    connection back in the client's turn, and the operator gets in."""
    probes: list[str] = []

    def observe(name: str) -> None:
        if name == "long_poll_probe":
            probes.append(name)

    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        max_connections=WAITERS_CAP,
        max_waits_per_credential=WAITS_PER_CREDENTIAL,
        request_head_seconds=600,  # the cap alone, not the deadline
    ) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
        path = f"/v1/operations/{operation_id}?wait=300&status=completed"
        if watched == "events":
            with daemon.orchestrator() as orch:
                cursor = orch.get("/v1/events", params={"limit": 500}).json()["cursor"]
            path = f"/v1/events?wait=300&after={cursor}"
        request = (
            f"GET {path} HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Bearer {daemon.orchestrator_token}\r\n\r\n"
        ).encode()
        waiters: list[socket.socket] = []
        faults.OBSERVERS.append(observe)
        try:
            for _ in range(WAITERS_CAP):
                sock = _connect(daemon.url)
                waiters.append(sock)
                sock.sendall(request)
            refused: list[bytes] = []
            end = time.monotonic() + PATIENCE
            # every long-poll in the daemon's turn, or answered (the probes of one long-poll
            # are at least one: its first read comes at once)
            while len(probes) + len(refused) < WAITERS_CAP:
                assert time.monotonic() < end, f"{len(probes)} long-polls, {refused}"
                readable, _, _ = select.select(waiters, [], [], 0.05)
                for sock in readable:
                    refused.append(_answer(sock))
                    waiters.remove(sock)
            with daemon.operator() as operator:
                ready = operator.get("/readyz")
                listed = operator.get("/v1/operations")
        finally:
            faults.OBSERVERS.remove(observe)
            for sock in waiters:
                sock.close()
    assert ready.status_code == 200, ready.text
    assert listed.status_code == 200, listed.text
    assert operation_id in listed.text
    assert len(refused) == WAITERS_CAP - WAITS_PER_CREDENTIAL
    for answer in refused:
        _too_many(answer)


def _too_many(answer: bytes) -> dict[str, Any]:
    """The problem of a wait refused at once: ``429``, ``Retry-After: 2``, its code."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429 Too Many Requests\r\n"), head
    assert b"\r\nretry-after: 2\r\n" in head.lower(), head
    problem: dict[str, Any] = json.loads(body)
    assert problem["code"] == "too_many_requests"
    assert problem["retry_after"] == 2
    return problem


SHARED_CAP = 6  # the daemon's connections; its waits are at most half of them
WAITS_AT_ONCE = SHARED_CAP // 2


def test_several_credentials_long_polls_do_not_hold_every_connection(
    tmp_path: Path, repo: Path
) -> None:
    """The orchestrator and two named operators each open ``max_waits_per_credential``
    long-polls (2 each: within each credential's bound) on a daemon of 6 connections: the
    orchestrator of an operation's change, the operators of the watch feed. Together they
    would hold every connection in the daemon's turn. Past half the connections' waits
    (3) a wait is answered ``429`` at once, and the operator's ``/readyz`` and
    ``GET /v1/operations`` are answered."""
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        max_connections=SHARED_CAP,
        max_waits_per_credential=2,
        request_head_seconds=600,  # the cap alone, not the deadline
    ) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, CHANGE)
        operation_id = promote(daemon, bundle, receipt).json()["operation_id"]
        tokens = [add_operator(daemon.state_dir / "credentials", n) for n in ("dora", "ezra")]
        with daemon.orchestrator() as orch:
            cursor = orch.get("/v1/events", params={"limit": 500}).json()["cursor"]
        asked = [(daemon.orchestrator_token, f"/v1/operations/{operation_id}?wait=300")] + [
            (token, f"/v1/events?wait=300&after={cursor}") for token in tokens
        ]
        waiters: list[socket.socket] = []
        try:
            for token, path in asked:
                for _ in range(2):
                    sock = _connect(daemon.url)
                    waiters.append(sock)
                    sock.sendall(
                        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        f"Authorization: Bearer {token}\r\n\r\n".encode()
                    )
            refused: list[bytes] = []
            end = time.monotonic() + PATIENCE
            # every long-poll waiting in the daemon or answered
            while len(refused) + sum(daemon.services.waits.values()) < SHARED_CAP:
                assert time.monotonic() < end, (refused, daemon.services.waits)
                readable, _, _ = select.select(waiters, [], [], 0.05)
                for sock in readable:
                    refused.append(_answer(sock))
                    waiters.remove(sock)
            with daemon.operator() as operator:
                ready = operator.get("/readyz")
                listed = operator.get("/v1/operations")
        finally:
            for sock in waiters:
                sock.close()
    assert ready.status_code == 200, ready.text
    assert listed.status_code == 200, listed.text
    assert operation_id in listed.text
    assert len(refused) == SHARED_CAP - WAITS_AT_ONCE
    for answer in refused:
        problem = _too_many(answer)
        assert "half its 6 connections" in problem["detail"], problem


# a client that never reads: its answers fill the daemon's write buffer
DRAIN = 1.0  # the bound of a client taking none of its answer, in these tests' daemons
SMALL_WINDOW = 4096  # the client's receive buffer: the kernels hold little of an answer


def _narrow(url: str) -> socket.socket:
    """A connection to ``url`` whose receive buffer is small (set before it connects)."""
    address = httpx.URL(url)
    assert address.port is not None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_WINDOW)
    sock.settimeout(PATIENCE)
    sock.connect((address.host, address.port))
    return sock


def _hung_up(sock: socket.socket) -> bool:
    """Whether the daemon closed ``sock`` within ``PATIENCE``, seen without reading it."""
    watch = select.poll()
    watch.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(watch.poll(PATIENCE * 1000))


def _drain_closes(url: str) -> str:
    scraped = httpx.get(f"{url}/metrics", timeout=PATIENCE)
    assert scraped.status_code == 200
    return next(line for line in _closed_counts(scraped.text) if 'reason="drain"' in line)


@pytest.fixture
def unread(tmp_path: Path, repo: Path) -> Iterator[Daemon]:
    with running_daemon(
        tmp_path / "state",
        {"work": repo},
        request_head_seconds=600,  # the drain's bound alone
        response_drain_silence_seconds=DRAIN,
        admission_credential_limits={"executor": 1},
    ) as running:
        yield running


def test_a_client_that_never_reads_its_answers_is_closed(unread: Daemon) -> None:
    """Before any credential: 32 requests for the OpenAPI document (330 kB) sent at once,
    and none of the answers read. The first fills the write buffer; the next answer's
    task waited for room for ever, its connection held. Closed within the bound, and
    counted."""
    whole = len(httpx.get(f"{unread.url}/openapi.json", timeout=PATIENCE).content)
    asked = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 32
    with _narrow(unread.url) as sock:
        sock.sendall(asked)
        assert _hung_up(sock), f"the daemon held a connection that never read {PATIENCE} s"
        assert len(_closed(sock)) < 32 * whole
    assert _drain_closes(unread.url) == 'promoter_connections_closed_total{reason="drain"} 1.0'


def test_an_executor_that_never_reads_its_diffs_gives_its_place_back(
    unread: Daemon, repo: Path
) -> None:
    """An executor asks for its bundle's 1 MiB diff page 8 times at once and reads none:
    the second answer's task waited for room for ever, holding the run's one place for
    costly reads (``admission_credential_limits``), so each of its next diffs was ``429``.
    The connection is closed within the bound and the place given back."""
    identity = unread.services.registry.by_name("work").identity
    big = b"".join(b"line %d of a file the reviewer reads\n" % n for n in range(80_000))
    _, bundle, _ = submit(unread, repo, identity, [("src/app.py", b"print('v1')\n", big)])
    with unread.executor("run_1") as executor:
        token = executor.headers["Authorization"]
        path = f"/v1/bundles/{bundle['bundle_id']}/diff"
        asked = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {token}\r\n\r\n"
        with _narrow(unread.url) as sock:
            sock.sendall(asked.encode() * 8)
            assert _hung_up(sock), f"the daemon held a connection that never read {PATIENCE} s"
        again = executor.get(path, timeout=PATIENCE)
    assert again.status_code == 200, again.text
    assert _drain_closes(unread.url) == 'promoter_connections_closed_total{reason="drain"} 1.0'


def test_a_client_reading_slowly_but_steadily_is_not_cut(unread: Daemon) -> None:
    """Silence is bounded, not time: 6 OpenAPI documents read 8 kB at a time, one read
    every 10 ms (at least 2.4 s), take several times the bound, and arrive whole."""
    whole = httpx.get(f"{unread.url}/openapi.json", timeout=PATIENCE)
    asked = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 6
    started = time.monotonic()
    received = b""
    with _narrow(unread.url) as sock:
        sock.sendall(asked)
        while not (received.endswith(whole.content) and received.count(whole.content) == 6):
            chunk = sock.recv(8192)
            assert chunk, f"the connection was closed after {len(received)} bytes"
            received += chunk
            time.sleep(0.01)  # the reader's pace, not a synchronization
        took = time.monotonic() - started
    assert received.count(b"HTTP/1.1 200 OK\r\n") == 6
    assert took > 2 * DRAIN, took  # it did take longer than the bound
    assert _drain_closes(unread.url) == 'promoter_connections_closed_total{reason="drain"} 0.0'


def _held_upload(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """A blob upload's route held before it reads the body (``_Upload.open``): the first
    event is set once it is reached, the second releases it."""
    reached, release = threading.Event(), threading.Event()
    opened = blobs_routes._Upload.open

    def held(upload: blobs_routes._Upload, limit: int, declared: int) -> None:
        reached.set()
        assert release.wait(PATIENCE), "the test never released the upload"
        opened(upload, limit, declared)

    monkeypatch.setattr(blobs_routes._Upload, "open", held)
    return reached, release


def _drip_closed_for_the_upload(
    url: str,
    upload: socket.socket,
    drip: socket.socket,
    route: tuple[threading.Event, threading.Event],
    blob: bytes,
) -> bytes:
    """With ``upload``'s route held (``_held_upload``) at a cap of two: a head dripped on
    ``drip``, then a new connection; the drip must be the one closed to make room, then the
    upload gets its ``100 Continue`` and sends ``blob``. Its answer."""
    reached, release = route
    try:
        assert reached.wait(PATIENCE), "the upload's route never started"
        drip.sendall(HEAD[:1])  # the dripping one: heard after the upload's head
        with _connect(url) as new:  # one past the cap: room made
            readable, _, _ = select.select([upload, drip], [], [], PATIENCE)
            assert readable == [drip], "the upload waiting for 100 Continue closed"
            assert _closed(drip) == b""
            new.sendall(HEAD + b"\r\n")
            assert _answer(new).startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        release.set()
    interim = b""
    while not interim.endswith(b"\r\n\r\n"):
        chunk = upload.recv(1)
        assert chunk, f"the upload closed before 100 Continue: {interim!r}"
        interim += chunk
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    upload.sendall(blob)
    return _answer(upload)
