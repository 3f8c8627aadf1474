"""Blobs, bundle and promotion in one request (``POST /v1/promotions:withEvidence``).

Against a real daemon and repository: the flow completes with exact bytes and a receipt
that verifies under the host's key; asking again is the same operation; a caller without
both authorities, a bundle of another run, and a body the batch's bounds refuse (one
name framed twice over other bytes, frames streamed past the total, a connection dropped
mid-frame) are refused with their stable codes and nothing stored (no blob, no bundle, no
receipt, no operation, nothing charged); the same request racing itself promotes once;
both clients' methods. Asked for, the answer carries the
bundle's diff and the promotion receipt as their own requests answer them; a diff that
cannot be built, or a receipt whose reading fails, is left out and named in
``not_carried`` with its error's code and detail, the promotion answered all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from promoter import faults
from promoter.client.aio import AsyncPromoterClient
from promoter.client.sync import PromoterClient
from promoter.domain.blob_frames import (
    BATCH_BLOB_MAX,
    BATCH_MAX_BLOBS,
    BATCH_MAX_BYTES,
    frame_header,
)
from promoter.domain.evidence_frames import bundle_header
from promoter.engine.receipts.signing import verify_document
from promoter.errors import Forbidden, Unauthenticated
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.flows import jcs_sha, make_bundle, make_grant, sha
from tests.support.fsutil import NEVER_BUSY, skip_without_group_sync
from tests.support.pause import Pause
from tests.support.promotion import git_dir_digest, set_lease, tree_bytes

URL = "/v1/promotions:withEvidence"
V1 = b"print('v1')\n"
V2 = b"print('v2')\n"
NEW = b"\x00binary\r\nbytes\xff"
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/app.py", V1, V2),
    ("src/new/data.bin", None, NEW),
]


def _grant(daemon: Daemon, repo: Path, identity: str, run_id: str = "run_1") -> dict[str, Any]:
    grant = make_grant(repo, identity, run_id=run_id, grant_id=f"grt_{run_id}")
    with daemon.orchestrator() as orch:
        answer = orch.post("/v1/grants", json=grant)
        assert answer.status_code == 201, answer.text
    set_lease(daemon, grant)
    return grant


def _executor_token(daemon: Daemon, run_id: str) -> str:
    with daemon.orchestrator() as orch:
        answer = orch.post(
            "/v1/executor-tokens", json={"executor_run_id": run_id, "ttl_seconds": 3600}
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["token"])


def body(bundle: dict[str, Any], *blobs: bytes, frames: bytes | None = None) -> bytes:
    document = json.dumps(bundle).encode()
    blob_frames = b"".join(frame_header(sha(b), len(b)) + b for b in blobs)
    return bundle_header(len(document)) + document + (blob_frames if frames is None else frames)


def _post(
    daemon: Daemon, content: bytes, executor: str | None, *, token: str | None = None, **q: Any
) -> httpx.Response:
    headers = {"Content-Type": "application/octet-stream"}
    if executor is not None:
        headers["Promoter-Executor-Token"] = executor
    params = {"fence": "7", "wait": "true", **q}
    with daemon.client(token or daemon.orchestrator_token) as client:
        return client.post(URL, content=content, headers=headers, params=params)


def stored(daemon: Daemon) -> dict[str, list[str]]:
    """Every file promoter keeps for a submission or a promotion, and the run's charge."""
    audit = daemon.state_dir / "audit"
    out = {
        name: sorted(p.name for p in (audit / name).rglob("*") if p.is_file())
        if (audit / name).exists()
        else []
        for name in ("blobs", "bundles", "receipts")
    }
    quota = daemon.state_dir / "quota"
    out["quota"] = sorted(
        f"{p.name}:{json.loads(p.read_bytes())['bytes']}" for p in quota.glob("*.json")
    )
    with daemon.operator() as op:
        out["operations"] = [
            o["operation_id"] for o in op.get("/v1/operations").json()["operations"]
        ]
    return out


NOTHING: dict[str, list[str]] = {
    "blobs": [],
    "bundles": [],
    "receipts": [],
    "quota": [],
    "operations": [],
}


def problem(answer: httpx.Response) -> tuple[int, str]:
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.text
    return answer.status_code, answer.json()["code"]


def _host_key(daemon: Daemon) -> Ed25519PublicKey:
    with daemon.orchestrator() as orch:
        [entry] = orch.get("/v1/keys").json()["keys"]
    key = load_pem_public_key(entry["public_key_pem"].encode())
    assert isinstance(key, Ed25519PublicKey)
    return key


def test_one_request_promotes_exact_bytes_with_a_receipt_that_verifies(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    (repo / "notes.txt").write_bytes(b"the person's own work\n")
    before, git_before = tree_bytes(repo), git_dir_digest(repo)

    answer = _post(daemon, body(bundle, V1, V2, NEW), executor)

    assert answer.status_code == 200, answer.text
    reply = answer.json()
    assert (reply["bundle_id"], reply["bundle_sha256"]) == (
        bundle["bundle_id"],
        bundle["bundle_sha256"],
    )
    verification = reply["verification_receipt"]
    assert verification["status"] == "passed"
    view = reply["operation"]
    assert view["status"] == "completed", view
    assert view["verification_receipt_sha256"] == verification["receipt_sha256"]
    after = tree_bytes(repo)
    assert after["src/app.py"][0] == V2
    assert after["src/new/data.bin"][0] == NEW
    untouched = {k: v for k, v in before.items() if k != "src/app.py"}
    assert {k: after[k] for k in untouched} == untouched
    assert git_dir_digest(repo) == git_before
    with daemon.orchestrator() as orch:
        served = orch.get(f"/v1/bundles/{bundle['bundle_id']}/verification")
        raw = orch.get(f"/v1/operations/{view['operation_id']}/receipt")
        signed = orch.get(f"/v1/operations/{view['operation_id']}/receipt.dsse")
    assert json.loads(served.content) == verification  # the answered receipt is the stored one
    promotion = json.loads(raw.content)
    assert promotion["receipt_sha256"] == jcs_sha(
        {k: v for k, v in promotion.items() if k != "receipt_sha256"}
    )
    assert promotion["verification_receipt_sha256"] == verification["receipt_sha256"]
    assert {t["path"]: t["sha256"] for t in promotion["targets"]} == {
        "src/app.py": sha(V2),
        "src/new/data.bin": sha(NEW),
    }
    checked = verify_document(signed.content, [_host_key(daemon)])
    assert checked.signature_checked and checked.kind == "promotion_receipt"
    assert {sha(V1), sha(V2), sha(NEW)} <= set(stored(daemon)["blobs"])


def test_asking_again_answers_the_same_operation_and_writes_nothing_twice(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    content = body(bundle, V1, V2, NEW)
    first = _post(daemon, content, executor)
    assert first.status_code == 200, first.text
    files = stored(daemon)
    again = _post(daemon, content, executor)
    assert again.status_code == 200, again.text
    assert again.json()["operation"]["operation_id"] == first.json()["operation"]["operation_id"]
    assert again.json()["operation"]["attempt"] == 1
    assert again.json()["verification_receipt"] == first.json()["verification_receipt"]
    assert stored(daemon) == files  # no second receipt, no second charge
    no_wait = _post(daemon, content, executor, wait="false")  # ended: answered at once
    assert no_wait.status_code == 200, no_wait.text
    operation = no_wait.json()["operation"]
    assert (operation["operation_id"], operation["status"], operation["attempt"]) == (
        first.json()["operation"]["operation_id"],
        "completed",
        1,
    )
    with daemon.orchestrator() as orch:
        stored_receipt = orch.get(f"/v1/operations/{operation['operation_id']}/receipt")
    assert rfc8785.dumps(operation["receipt"]) == stored_receipt.content
    assert "receipt" not in no_wait.json()  # the top-level one only when asked for


@pytest.mark.parametrize(
    "who",
    [
        "no_executor_header",
        "unknown_executor_token",
        "orchestrator_token_as_executor",
        "executor_token_in_authorization",
        "executor_of_another_run",
        "no_authorization",
    ],
)
def test_a_caller_without_both_authorities_is_refused_and_nothing_is_stored(
    daemon: Daemon, repo: Path, identity: str, who: str
) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    content = body(bundle, V1, V2, NEW)
    run_1 = _executor_token(daemon, "run_1")
    expected = (403, "forbidden")
    if who == "no_executor_header":
        answer, expected = _post(daemon, content, None), (401, "unauthenticated")
    elif who == "unknown_executor_token":
        answer, expected = _post(daemon, content, "pex_unknown"), (401, "unauthenticated")
    elif who == "orchestrator_token_as_executor":
        answer = _post(daemon, content, daemon.orchestrator_token)
    elif who == "executor_token_in_authorization":
        answer = _post(daemon, content, run_1, token=run_1)
    elif who == "executor_of_another_run":
        answer = _post(daemon, content, _executor_token(daemon, "run_2"))
    else:
        with daemon.client(None) as anonymous:
            answer = anonymous.post(
                URL,
                content=content,
                params={"fence": "7"},
                headers={"Promoter-Executor-Token": run_1},
            )
        expected = (401, "unauthenticated")
    assert problem(answer) == expected
    assert stored(daemon) == NOTHING
    assert tree_bytes(repo)["src/app.py"][0] == V1


def test_a_bundle_under_another_runs_grant_is_refused_before_any_blob(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = _grant(daemon, repo, identity, run_id="run_2")
    bundle = make_bundle(grant, CHANGES, executor_run_id="run_1")  # claims run_1
    answer = _post(daemon, body(bundle, V1, V2, NEW), _executor_token(daemon, "run_1"))
    assert problem(answer) == (403, "forbidden")
    assert stored(daemon) == NOTHING


def _hostile(bundle: dict[str, Any], case: str) -> bytes:
    if case == "blob_larger_than_a_batch_carries":
        big = b"x" * (BATCH_BLOB_MAX + 1)
        return body(bundle, V1, V2, NEW, big)
    if case == "too_many_frames":
        return body(bundle, *[b"%d" % n for n in range(BATCH_MAX_BLOBS + 1)])
    if case == "frame_size_lies_short":  # declares more bytes than the body holds
        return body(bundle, frames=frame_header(sha(V2), len(V2) + 5) + V2)
    if case == "frame_size_lies_long":  # declares fewer: the rest is not a header
        return body(bundle, frames=frame_header(sha(V2), 3) + V2)
    if case == "bytes_not_their_hash":
        return body(bundle, V1, NEW, frames=frame_header(sha(V2), len(V2)) + b"print('v3')\n")
    if case == "one_hash_good_bytes_then_other_bytes":  # the second copy lies
        return body(bundle, frames=_twice(V2, b"print('v3')\n"))
    if case == "one_hash_other_bytes_then_good_bytes":  # the first copy lies
        return body(bundle, frames=_twice(b"print('v3')\n", V2))
    if case == "one_hash_other_length_then_good_bytes":
        return body(bundle, frames=_twice(V2 + b"#", V2))
    if case == "bundle_larger_than_a_document":  # past max_document_bytes: refused at its header
        return bundle_header((64 << 20) + 1) + b"{"
    if case == "bundle_nested_past_the_depth":  # refused while it streams, never parsed
        deep = b"[" * 65 + b"]" * 65
        return bundle_header(len(deep)) + deep
    if case == "bundle_with_values_past_the_count":
        many = b"[" + b"0," * 250_000 + b"0]"
        return bundle_header(len(many)) + many
    if case == "bundle_header_malformed":
        return b"bundle 01\n{}"
    if case == "body_ends_inside_the_bundle":
        return body(bundle)[:-10]
    if case == "bundle_not_json":
        return bundle_header(3) + b"{x}"
    raise AssertionError(case)


def _twice(first: bytes, second: bytes) -> bytes:
    """The blob frames of ``CHANGES`` with ``V2``'s name framed twice, over ``first`` and
    then ``second``: one of them is not the bytes of that name."""
    named = [(sha(V1), V1), (sha(V2), first), (sha(V2), second), (sha(NEW), NEW)]
    return b"".join(frame_header(digest, len(data)) + data for digest, data in named)


HOSTILE = {
    "blob_larger_than_a_batch_carries": (413, "payload_too_large"),
    "too_many_frames": (413, "payload_too_large"),
    "frame_size_lies_short": (400, "bad_request"),
    "frame_size_lies_long": (400, "bad_request"),
    "bytes_not_their_hash": (422, "blob_hash_mismatch"),
    "one_hash_good_bytes_then_other_bytes": (422, "blob_hash_mismatch"),
    "one_hash_other_bytes_then_good_bytes": (422, "blob_hash_mismatch"),
    "one_hash_other_length_then_good_bytes": (422, "blob_hash_mismatch"),
    "bundle_larger_than_a_document": (413, "payload_too_large"),
    "bundle_nested_past_the_depth": (422, "json_too_deep"),
    "bundle_with_values_past_the_count": (413, "json_too_many_items"),
    "bundle_header_malformed": (400, "bad_request"),
    "body_ends_inside_the_bundle": (400, "bad_request"),
    "bundle_not_json": (400, "invalid_json"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_body_the_batch_bounds_refuse_stores_nothing(
    daemon: Daemon, repo: Path, identity: str, case: str
) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    answer = _post(daemon, _hostile(bundle, case), _executor_token(daemon, "run_1"))
    status, code = problem(answer)
    assert (status, code) == HOSTILE[case] or (case == "bundle_not_json" and status == 400)
    assert stored(daemon) == NOTHING
    assert not list((daemon.state_dir / "audit" / "tmp").glob("*"))


def test_a_declared_length_past_the_bound_is_refused_before_reading(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = _grant(daemon, repo, identity)
    start = body(make_bundle(grant, CHANGES), V1)
    limit = daemon.services.settings.max_document_bytes + (16 << 20) + 64
    url = urlsplit(daemon.url)
    head = (
        f"POST {URL}?fence=7 HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {daemon.orchestrator_token}\r\n"
        f"Promoter-Executor-Token: {_executor_token(daemon, 'run_1')}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {limit}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode() + start)  # far less than declared: never read
        answer = sock.makefile("rb").readline()
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert stored(daemon) == NOTHING


def test_blob_frames_streamed_past_the_total_bound_are_refused_and_store_nothing(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """No length declared (chunked): the bound on a request's blob frames is counted as
    they stream, each frame within a batch's bounds, 64 of them one header past it."""
    grant = _grant(daemon, repo, identity)
    big = b"x" * BATCH_BLOB_MAX
    frames = [frame_header(sha(big), len(big)) + big for _ in range(64)]
    assert len(b"".join(frames)) > BATCH_MAX_BYTES

    def chunks() -> Iterator[bytes]:
        yield body(make_bundle(grant, CHANGES), V1, V2, NEW)
        yield from frames

    answer = _post(daemon, chunks(), _executor_token(daemon, "run_1"))  # type: ignore[arg-type]
    assert problem(answer) == (413, "payload_too_large")
    assert answer.json()["limit"] == BATCH_MAX_BYTES
    assert stored(daemon) == NOTHING
    assert not list((daemon.state_dir / "audit" / "tmp").iterdir())


def _temps_open(directory: Path) -> int:
    """Descriptors of this process (the daemon's too) open on a temp in ``directory``,
    named or anonymous (``O_TMPFILE``: ``<directory>/#<inode> (deleted)``)."""
    inside = f"{directory.resolve()}/"
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}").startswith(inside)
    return found


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for the daemon's ``condition`` (bounded, so a broken test fails)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


BIG = [bytes([n]) * BATCH_BLOB_MAX for n in range(5)]  # past what is gathered before a write
BIG_CHANGES = [*CHANGES, *((f"src/big{n}.bin", None, b) for n, b in enumerate(BIG))]


@pytest.mark.daemon(executor_quota_bytes=sum(map(len, [V1, V2, NEW, *BIG])))
def test_a_body_cut_mid_blob_by_a_dropped_connection_stores_and_keeps_nothing(
    daemon: Daemon, repo: Path, identity: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection dropped inside a blob frame, the length declared whole, after some
    blobs were written to temps: no blob, document, charge or operation, no temp, and no
    reservation kept (the run's quota is exactly the request's blobs: the same request
    whole still fits); logged as a closed connection, never an unexpected error."""
    caplog.set_level(logging.INFO, logger="promoter.api")
    grant = _grant(daemon, repo, identity)
    executor = _executor_token(daemon, "run_1")
    whole = body(make_bundle(grant, BIG_CHANGES), *BIG, V1, V2, NEW)
    cut = whole[: whole.index(BIG[4]) + 4]  # inside the last big blob's frame
    url = urlsplit(daemon.url)
    head = (
        f"POST {URL}?fence=7&wait=true HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {daemon.orchestrator_token}\r\n"
        f"Promoter-Executor-Token: {executor}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(whole)}\r\n\r\n"
    )
    temps = daemon.state_dir / "audit" / "tmp"
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode() + cut)
        _until(lambda: _temps_open(temps) > 0, "the first blobs written to temps")
    _until(lambda: _temps_open(temps) == 0, "the cut request's temps closed")
    assert not list(temps.iterdir())
    _until(
        lambda: any("closed inside the body" in r.getMessage() for r in caplog.records),
        "the dropped connection logged",
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert stored(daemon) == NOTHING
    assert tree_bytes(repo)["src/app.py"][0] == V1
    again = _post(daemon, whole, executor)
    assert again.status_code == 200, again.text
    assert again.json()["operation"]["status"] == "completed"
    assert _charge(daemon) == sum(map(len, [V1, V2, NEW, *BIG]))


@pytest.mark.parametrize("where", ["blob_batch_write", "evidence_linked", "evidence_stored"])
def test_a_second_request_racing_the_first_for_one_bundle_promotes_once(
    daemon: Daemon,
    repo: Path,
    identity: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """The first request paused writing its first blob, after linking its first blob,
    or with its evidence stored and no operation yet; the same request again runs whole
    meanwhile. Released, the first answers the second's operation: the change lands once,
    each blob charged once, one operation, one promotion receipt. (Not paused inside the
    quota's charge, which serializes the daemon's charges by design.)"""
    grant = _grant(daemon, repo, identity)
    executor = _executor_token(daemon, "run_1")
    content = body(make_bundle(grant, CHANGES), V1, V2, NEW)
    pause = Pause(tmp_path, where)
    monkeypatch.setenv(faults.ENV, pause.spec)
    faults.reset()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_post, daemon, content, executor)
        pause.reached()
        second = _post(daemon, content, executor)
        assert second.status_code == 200, second.text
        assert second.json()["operation"]["status"] == "completed"
        assert tree_bytes(repo)["src/app.py"][0] == V2
        pause.release()
        answer = first.result(timeout=120)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert answer.status_code == 200, answer.text
    operation = second.json()["operation"]["operation_id"]
    assert answer.json()["operation"]["operation_id"] == operation
    assert answer.json()["operation"]["attempt"] == 1
    left = stored(daemon)
    assert left["operations"] == [operation]
    assert len(left["receipts"]) == 2  # the verification receipt and the promotion's
    assert _charge(daemon) == len(V1) + len(V2) + len(NEW)
    assert tree_bytes(repo)["src/app.py"][0] == V2
    assert not list((daemon.state_dir / "audit" / "tmp").iterdir())


def test_the_answer_carries_the_diff_and_the_receipt_their_own_requests_answer(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """Asked for, the answer carries the bundle's first diff page and the promotion
    receipt, each equal to what its own request answers; not asked, neither member."""
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    content = body(bundle, V1, V2, NEW)
    answer = _post(daemon, content, executor, diff="true", receipt="true")
    assert answer.status_code == 200, answer.text
    reply = answer.json()
    operation_id = reply["operation"]["operation_id"]
    with daemon.orchestrator() as orch:
        diff = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
        receipt = orch.get(f"/v1/operations/{operation_id}/receipt")
    assert diff.status_code == 200 and receipt.status_code == 200
    assert reply["diff"] == diff.json()
    assert reply["receipt"] == json.loads(receipt.content)
    assert reply["receipt"]["receipt_sha256"] == reply["operation"]["receipt_sha256"]
    assert "not_carried" not in reply  # everything asked for is carried
    plain = _post(daemon, content, executor).json()  # the same operation, nothing carried
    assert "diff" not in plain and "receipt" not in plain and "not_carried" not in plain
    assert plain["operation"]["operation_id"] == operation_id
    waited_not = _post(daemon, content, executor, wait="false", receipt="true")
    assert waited_not.status_code == 200  # ended already: answered at once, receipt carried
    assert waited_not.json()["receipt"] == json.loads(receipt.content)
    assert "not_carried" not in waited_not.json()


def test_a_receipt_not_made_yet_is_neither_carried_nor_named(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """Not waited for, a new promotion answers 202 before its receipt exists: asked for,
    the receipt is not carried, and not named as a failure (the status says why)."""
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    answer = _post(daemon, body(bundle, V1, V2, NEW), executor, wait="false", receipt="true")
    assert answer.status_code == 202, answer.text
    assert "receipt" not in answer.json() and "not_carried" not in answer.json()
    operation_id = answer.json()["operation"]["operation_id"]
    with daemon.orchestrator() as orch:
        view = orch.get(f"/v1/operations/{operation_id}").json()
        while view["status"] == "in_progress":
            view = orch.get(
                f"/v1/operations/{operation_id}", params={"wait": 60, "status": "in_progress"}
            ).json()
    assert view["status"] == "completed", view


def _failing_once(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch, point: str
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A promotion asked to carry the diff and the receipt while the fault point ``point``
    fails (EIO) on its first hit: the bundle, the answer (200) and the point's hits."""
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    monkeypatch.setenv(faults.ENV, f"{point}=EIO@1")
    faults.reset()
    answer = _post(daemon, body(bundle, V1, V2, NEW), executor, diff="true", receipt="true")
    hits = faults.hits(point)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert answer.status_code == 200, answer.text
    return bundle, dict(answer.json()), hits


def test_a_diff_that_cannot_be_built_is_named_not_carried_and_the_promotion_still_answers(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, reply, _ = _failing_once(daemon, repo, identity, monkeypatch, "bundle_diff_file")
    assert "diff" not in reply  # left out: the caller asks for it, told why
    assert reply["not_carried"] == [
        {
            "part": "diff",
            "code": "storage_error",
            "detail": "the bundle's diff could not be read: injected fault at "
            "bundle_diff_file: Input/output error",
        }
    ]
    assert reply["operation"]["status"] == "completed"
    assert reply["receipt"]["receipt_sha256"] == reply["operation"]["receipt_sha256"]
    assert tree_bytes(repo)["src/app.py"][0] == V2
    with daemon.orchestrator() as orch:
        assert orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff").status_code == 200


def test_a_receipt_whose_reading_fails_is_named_not_carried_and_the_promotion_still_answers(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The carried receipt's reading failing (fault point ``promotion_receipt_read``, an
    error the daemon does not expect there) leaves it out, named ``internal`` as its own
    request answers that fault; the promotion's answer and the carried diff stand, and
    the receipt's own request reads it afterwards."""
    point = "promotion_receipt_read"
    bundle, reply, read = _failing_once(daemon, repo, identity, monkeypatch, point)
    assert read == 1
    assert "receipt" not in reply  # left out: the caller asks for it, told why
    assert reply["not_carried"] == [
        {
            "part": "receipt",
            "code": "internal",
            "detail": "an unexpected error occurred; see the daemon's log",
        }
    ]
    assert reply["operation"]["status"] == "completed"
    assert tree_bytes(repo)["src/app.py"][0] == V2
    operation_id = reply["operation"]["operation_id"]
    with daemon.orchestrator() as orch:
        diff = orch.get(f"/v1/bundles/{bundle['bundle_id']}/diff")
        receipt = orch.get(f"/v1/operations/{operation_id}/receipt")
    assert reply["diff"] == diff.json()
    assert receipt.status_code == 200, receipt.text
    assert json.loads(receipt.content)["receipt_sha256"] == reply["operation"]["receipt_sha256"]


def test_a_fault_of_the_daemons_reading_the_diff_is_named_internal_and_the_promotion_answers(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of the daemon's own (here a ``TypeError``) while it builds the diff never
    fails the answer of a promotion that happened: named ``internal``, as the separate
    read would answer it."""
    from promoter.api.routes import promotions

    def broken(*given: object, **named: object) -> object:
        raise TypeError("a fault of the daemon's")

    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    monkeypatch.setattr(promotions, "bundle_diff", broken)
    answer = _post(daemon, body(bundle, V1, V2, NEW), executor, diff="true", receipt="true")
    assert answer.status_code == 200, answer.text
    reply = answer.json()
    assert "diff" not in reply
    assert reply["not_carried"] == [
        {
            "part": "diff",
            "code": "internal",
            "detail": "an unexpected error occurred; see the daemon's log",
        }
    ]
    assert reply["operation"]["status"] == "completed"
    assert reply["receipt"]["receipt_sha256"] == reply["operation"]["receipt_sha256"]
    assert tree_bytes(repo)["src/app.py"][0] == V2


def test_sync_client_promotes_in_one_request(daemon: Daemon, repo: Path, identity: str) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    big = b"big file\n" * (BATCH_BLOB_MAX // 8)  # stored first, by PUT with the run's token
    changes = [*CHANGES, ("src/big.txt", None, big)]
    bundle = make_bundle(grant, changes)
    blobs = [(sha(b), len(b), b) for b in (V1, V2, NEW, big)]
    with PromoterClient(daemon.url, daemon.orchestrator_token) as client:
        reply = client.promote_with_evidence(
            bundle, blobs, 7, executor_token=executor, wait=True, with_review=True
        )
        assert reply["operation"]["status"] == "completed", reply
        assert reply.get("diff", {}).get("bundle_id") == bundle["bundle_id"]
        assert reply.get("receipt", {}).get("operation_id") == reply["operation"]["operation_id"]
        again = client.promote_with_evidence(bundle, blobs, 7, executor_token=executor, wait=True)
        assert again["operation"]["operation_id"] == reply["operation"]["operation_id"]
        with pytest.raises(Forbidden):
            client.promote_with_evidence(bundle, blobs, 7, executor_token=daemon.orchestrator_token)
    assert (repo / "src/big.txt").read_bytes() == big
    assert (repo / "src/new/data.bin").read_bytes() == NEW


def test_async_client_promotes_in_one_request(daemon: Daemon, repo: Path, identity: str) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")

    async def flow() -> tuple[Any, Any]:
        async with AsyncPromoterClient(daemon.url, daemon.orchestrator_token) as client:
            blobs = [(sha(b), b) for b in (V1, V2, NEW)]
            done = await client.promote_with_evidence(
                bundle, blobs, 7, executor_token=executor, wait=True, with_review=True
            )
            with pytest.raises(Unauthenticated):
                await client.promote_with_evidence(bundle, blobs, 7, executor_token="pex_x")
            return done, await client.operation(done.operation.operation_id)

    done, view = asyncio.run(flow())
    assert done.operation.status == "completed"
    assert done.diff is not None and done.diff["bundle_id"] == bundle["bundle_id"]
    assert done.receipt is not None and done.receipt["receipt_sha256"] == view.receipt_sha256
    assert view.status == "completed"
    assert done.verification_receipt.receipt_sha256 == view.verification_receipt_sha256
    assert (repo / "src/app.py").read_bytes() == V2


def _put_first(daemon: Daemon) -> bytes:
    """A blob stored by the run before the request: its quota record exists."""
    first = b"stored first\n"
    with daemon.executor("run_1") as ex:
        assert ex.put(f"/v1/blobs/sha256/{sha(first)}", content=first).status_code == 201
    return first


def _charge(daemon: Daemon) -> int:
    return sum(int(entry.rsplit(":", 1)[1]) for entry in stored(daemon)["quota"])


@pytest.mark.daemon(group_sync_max_pending_bytes=NEVER_BUSY)
@pytest.mark.parametrize("sync", [1, 2], ids=["temps-sync", "names-sync"])
def test_a_failed_sync_of_the_evidence_answers_507_and_the_same_request_completes(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch, sync: int
) -> None:
    """The first ``syncfs`` failing: nothing named, the charge given back. The second:
    the names stay (complete, their bytes and the charge durable), no operation. Either
    way the same request again completes, each blob charged once."""
    skip_without_group_sync(daemon.state_dir)
    grant = _grant(daemon, repo, identity)
    executor = _executor_token(daemon, "run_1")
    first = _put_first(daemon)
    before = stored(daemon)
    content = body(make_bundle(grant, CHANGES), V1, V2, NEW)
    monkeypatch.setenv(faults.ENV, f"after_evidence_group_sync=EIO@{sync}")
    faults.reset()
    answer = _post(daemon, content, executor)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    assert problem(answer) == (507, "storage_error")
    assert not list((daemon.state_dir / "audit" / "tmp").iterdir())
    left = stored(daemon)
    if sync == 1:
        assert left == before
    else:
        assert set(left["blobs"]) == {sha(first), sha(V1), sha(V2), sha(NEW)}
        assert left["bundles"] == [f"{grant_bundle(content)}.json"]
        assert left["operations"] == []
        assert _charge(daemon) == len(first) + len(V1) + len(V2) + len(NEW)
    again = _post(daemon, content, executor)
    assert again.status_code == 200, again.text
    assert again.json()["operation"]["status"] == "completed"
    assert _charge(daemon) == len(first) + len(V1) + len(V2) + len(NEW)
    assert tree_bytes(repo)["src/app.py"][0] == V2


def grant_bundle(content: bytes) -> str:
    """The bundle id of a one-request body."""
    head, _, rest = content.partition(b"\n")
    return str(json.loads(rest[: int(head.split()[1])])["bundle_id"])


def test_a_bundle_that_fails_verification_stores_none_of_the_requests_blobs(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    """Verified before anything is named: a blob the bundle names and the body lacks
    refuses the request, and the blobs it carried are not stored or charged."""
    grant = _grant(daemon, repo, identity)
    answer = _post(
        daemon, body(make_bundle(grant, CHANGES), V1, V2), _executor_token(daemon, "run_1")
    )
    assert problem(answer) == (422, "blob_missing")
    assert answer.json()["failed_checks"] == ["blob_integrity"]
    assert stored(daemon) == NOTHING
    assert not list((daemon.state_dir / "audit" / "tmp").iterdir())


def _open_on(directory: Path) -> int:
    """Descriptors of this process (the daemon's too) open on ``directory``."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}") == str(directory)
    return found


@pytest.mark.daemon(group_sync_max_pending_bytes=NEVER_BUSY)
def test_the_evidence_leaves_no_descriptor_of_its_group_open(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    grant = _grant(daemon, repo, identity)
    bundle = make_bundle(grant, CHANGES)
    executor = _executor_token(daemon, "run_1")
    assert problem(_post(daemon, body(bundle, V1, V2), executor)) == (422, "blob_missing")
    answer = _post(daemon, body(bundle, V1, V2, NEW), executor)
    assert answer.status_code == 200, answer.text
    assert _open_on((daemon.state_dir / "audit" / "tmp").resolve()) == 0


def test_the_one_request_replayed_after_its_rejection_promotes_nothing(gated: Gated) -> None:
    """Under the approval gate the request is held; the operator rejects it; the same
    request sent again (a replay) is refused ``approval_rejected``, naming that
    operation: nothing written, nothing stored again."""
    daemon, repo, identity = gated
    grant = _grant(daemon, repo, identity)
    executor = _executor_token(daemon, "run_1")
    content = body(make_bundle(grant, CHANGES), V1, V2, NEW)
    before = tree_bytes(repo)
    held = _post(daemon, content, executor, wait="false")
    assert held.status_code == 202, held.text
    operation = held.json()["operation"]
    assert operation["status"] == "awaiting_approval"
    with daemon.operator() as op:
        rejected = op.post(f"/v1/operations/{operation['operation_id']}/reject", json={})
    assert rejected.status_code == 200, rejected.text
    files = stored(daemon)
    for wait in ("true", "false"):
        again = _post(daemon, content, executor, wait=wait)
        assert problem(again) == (409, "approval_rejected")
        assert again.json()["operation_id"] == operation["operation_id"]
        assert stored(daemon) == files
    assert tree_bytes(repo) == before
    assert stored(daemon)["operations"] == [operation["operation_id"]]
