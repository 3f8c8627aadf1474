"""Metrics and log lines of a real daemon: what the operator sees of each request.

A flow (grant, blobs, bundle, one promotion refused for target drift, one completed)
runs through the real server while the root logger writes JSON lines into a buffer;
then ``/metrics`` is parsed with ``prometheus_client``'s parser and the log is read
line by line.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from promoter.api.logs import REQUEST_ID, LogFormat, handler, safe_request_id
from promoter.api.routes.health import router as health_router
from promoter.domain.blob_frames import frame_header
from promoter.engine.operation import promote as engine_promote
from promoter.engine.operation import views as engine_views
from promoter.fs import lock as fs_lock
from tests.support.daemon import Daemon
from tests.support.flows import sha
from tests.support.promotion import promote, submit

V1 = b"print('v1')\n"
SECRET_BLOB = b"blob-content-that-must-never-reach-a-log-7f3a9c\n"
CHANGES = [("src/app.py", V1, b"print('v2')\n"), ("src/secret.py", None, SECRET_BLOB)]


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    sink = handler("json", buffer)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(sink)
    root.setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(sink)
        root.setLevel(old_level)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]


def metrics_text(daemon: Daemon) -> str:
    with daemon.client() as client:
        answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return answer.text


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def drift_then_complete(daemon: Daemon, repo: Path, identity: str) -> list[str]:
    """A refused promotion (the user edited the target) and then a completed one."""
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    (repo / "src" / "app.py").write_bytes(b"the user's edit\n")
    refused = promote(daemon, bundle, receipt).json()
    assert (refused["status"], refused["code"]) == ("refused", "target_drift")
    (repo / "src" / "app.py").write_bytes(V1)
    done = promote(daemon, bundle, receipt).json()
    assert done["status"] == "completed", done
    return [refused["operation_id"], done["operation_id"]]


def test_metrics_count_a_refusal_by_its_code_and_a_completion_with_its_bytes(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    drift_then_complete(daemon, repo, identity)
    got = samples(metrics_text(daemon))
    assert (
        got[("promoter_promotions_total", (("code", "target_drift"), ("outcome", "refused")))] == 1
    )
    assert got[("promoter_promotions_total", (("code", ""), ("outcome", "completed")))] == 1
    assert got[("promoter_files_written_total", (("operation", "create"),))] == 1
    assert got[("promoter_files_written_total", (("operation", "modify"),))] == 1
    assert got[("promoter_bytes_written_total", ())] == len(b"print('v2')\n") + len(SECRET_BLOB)
    assert got[("promoter_blob_intake_bytes_total", (("status", "201"),))] == len(
        V1 + b"print('v2')\n" + SECRET_BLOB
    )
    assert got[("promoter_promotion_duration_seconds_count", (("outcome", "refused"),))] == 1
    assert got[("promoter_verification_duration_seconds_count", (("status", "201"),))] == 1
    assert got[("promoter_lock_wait_seconds_count", (("repository", "work"),))] == 2
    route = (("method", "POST"), ("route", "/v1/promotions"), ("status", "200"))
    assert got[("promoter_http_requests_total", route)] == 2
    for status in ("needs_recovery", "needs_reconciliation"):
        assert got[("promoter_operations_waiting", (("status", status),))] == 0


def test_metrics_exposition_has_one_type_and_one_help_line_per_family(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    drift_then_complete(daemon, repo, identity)
    text = metrics_text(daemon)
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(types) == len(set(types)), "a family has a second TYPE line"
    assert sorted(types) == sorted(helps), "a family lacks its HELP line"
    for family in text_string_to_metric_families(text):
        if family.type == "counter":  # promtool's lint: counters end in _total
            assert all(sample.name.endswith("_total") for sample in family.samples), family.name
        assert re.fullmatch(r"promoter_[a-z_]+", family.name), family.name
    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"promoter_promotions", "promoter_http_requests", "promoter_operations_waiting"} <= (
        families
    )
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not installed: skipping promtool check metrics")
        return
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_target_drift_refusal_is_logged_with_its_code_operation_and_request_id(
    daemon: Daemon, repo: Path, identity: str, log_buffer: io.StringIO
) -> None:
    refused_id, done_id = drift_then_complete(daemon, repo, identity)
    logged = lines(log_buffer)
    outcome = [line for line in logged if line["logger"] == "promoter.outcome"]
    assert [(o["operation_id"], o["status"], o.get("code")) for o in outcome] == [
        (refused_id, "refused", "target_drift"),
        (done_id, "completed", None),
    ]
    assert outcome[0]["repository"] == "work" and outcome[0]["bundle_id"].startswith("bnd_")
    assert outcome[1]["files"] == 2
    access = [
        line
        for line in logged
        if line["logger"] == "promoter.access" and line["route"] == "/v1/promotions"
    ]
    assert [(a["http_status"], a["status"], a.get("code")) for a in access] == [
        (200, "refused", "target_drift"),
        (200, "completed", None),
    ]
    for attempt, answer in zip(outcome, access, strict=True):
        assert attempt["request_id"] == answer["request_id"]
    assert not any(line["logger"] == "uvicorn.access" for line in logged)


def test_each_decision_and_action_of_an_attempt_has_its_own_line(
    daemon: Daemon, repo: Path, identity: str, log_buffer: io.StringIO
) -> None:
    drift_then_complete(daemon, repo, identity)
    events = [
        (line["logger"], line["message"], line.get("code"), line.get("target_count"))
        for line in lines(log_buffer)
        if line["logger"] in ("promoter.decision", "promoter.action", "promoter.outcome")
    ]
    assert events == [
        ("promoter.decision", "promotion decision: refused", "target_drift", None),
        ("promoter.outcome", "promotion refused [target_drift]", "target_drift", None),
        ("promoter.decision", "promotion decision: allowed", None, None),
        ("promoter.action", "promotion action", None, 2),
        ("promoter.outcome", "promotion completed", None, None),
    ]


def test_the_request_id_reaches_the_attempt_thread(
    daemon: Daemon, repo: Path, identity: str
) -> None:
    seen: list[tuple[str, str | None]] = []

    def observer(common_dir: str, waited: float) -> None:
        seen.append((threading.current_thread().name, REQUEST_ID.get()))

    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    fs_lock.OBSERVERS.append(observer)
    try:
        with daemon.orchestrator() as orch:
            answer = orch.post(
                "/v1/promotions",
                json={
                    "bundle_id": bundle["bundle_id"],
                    "verification_receipt_sha256": receipt["receipt_sha256"],
                    "fence": 7,
                    "wait": True,
                },
                headers={"X-Request-ID": "promote-1"},
            )
    finally:
        fs_lock.OBSERVERS.remove(observer)
    assert answer.json()["status"] == "completed"
    assert [(name.startswith("promoter-op"), rid) for name, rid in seen] == [(True, "promote-1")]


def test_the_log_never_holds_a_token_or_blob_content(
    daemon: Daemon, repo: Path, identity: str, log_buffer: io.StringIO
) -> None:
    drift_then_complete(daemon, repo, identity)
    with daemon.orchestrator() as orch:
        minted = orch.post(
            "/v1/executor-tokens", json={"executor_run_id": "run_9", "ttl_seconds": 60}
        ).json()["token"]
    with daemon.client("wrong-token-that-must-not-be-logged") as stranger:
        assert stranger.get("/v1/operations").status_code == 401
    text = log_buffer.getvalue()
    assert "promoter.access" in text
    secrets = [daemon.orchestrator_token, daemon.operator_token, minted]
    secrets += ["wrong-token-that-must-not-be-logged", SECRET_BLOB.decode().strip()]
    for secret in secrets:
        assert secret not in text


def test_a_request_id_is_echoed_and_in_every_line_of_its_request(
    daemon: Daemon, log_buffer: io.StringIO
) -> None:
    with daemon.orchestrator() as orch:
        answer = orch.get("/v1/operations/op_missing", headers={"X-Request-ID": "trace-42.a:b"})
    assert answer.headers["x-request-id"] == "trace-42.a:b"
    mine = [line for line in lines(log_buffer) if line.get("request_id") == "trace-42.a:b"]
    assert [line["logger"] for line in mine] == ["promoter.access"]
    assert (mine[0]["http_status"], mine[0]["code"]) == (404, "operation_unknown")


def test_healthz_answers_the_exact_bytes_every_time_and_a_fresh_request_id(
    daemon: Daemon,
) -> None:
    with daemon.client() as client:
        answers = [client.get("/healthz") for _ in range(2)]
    for answer in answers:
        assert answer.status_code == 200
        assert answer.content == b'{"status": "ok"}'
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["content-length"] == str(len(b'{"status": "ok"}'))
    assert answers[0].headers["x-request-id"] != answers[1].headers["x-request-id"]


def test_healthz_answered_before_routing_keeps_its_line_its_count_and_the_routes_bytes(
    daemon: Daemon, log_buffer: io.StringIO
) -> None:
    with daemon.client() as client:
        served = client.get("/healthz", headers={"X-Request-ID": "alive-1"})
        refused = client.post("/healthz")  # only GET is answered before routing
    mine = [line for line in lines(log_buffer) if line.get("request_id") == "alive-1"]
    assert [(line["logger"], line["route"], line["http_status"]) for line in mine] == [
        ("promoter.access", "/healthz", 200)
    ]
    assert (mine[0]["method"], mine[0]["path"], mine[0]["status"]) == ("GET", "/healthz", "ok")
    assert refused.status_code == 405
    got = samples(metrics_text(daemon))
    counted = (("method", "GET"), ("route", "/healthz"), ("status", "200"))
    assert got[("promoter_http_requests_total", counted)] == 1
    # the route behind it (for an app without the middleware) answers the very same bytes
    bare = FastAPI()
    bare.include_router(health_router)
    with TestClient(bare) as plain:
        routed = plain.get("/healthz")
    assert (routed.status_code, routed.content) == (200, served.content)
    assert routed.headers["content-type"] == served.headers["content-type"]
    assert routed.headers["content-length"] == served.headers["content-length"]


def test_healthz_polls_never_reach_the_router_and_other_requests_still_do(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    routed: list[str] = []
    real = APIRouter.__call__

    async def counting(self: APIRouter, scope: Any, receive: Any, send: Any) -> None:
        routed.append(f"{scope['method']} {scope['path']}")
        await real(self, scope, receive, send)

    monkeypatch.setattr(APIRouter, "__call__", counting)
    with daemon.client() as client:
        answers = [client.get("/healthz") for _ in range(3)]
        refused = client.post("/healthz")
        ready = client.get("/readyz")
    assert [a.content for a in answers] == [b'{"status": "ok"}'] * 3
    assert (refused.status_code, ready.status_code) == (405, 200)
    assert [r for r in routed if r.endswith("/healthz")] == ["POST /healthz"]
    assert "GET /readyz" in routed


def test_a_generated_request_id_is_echoed_when_none_is_offered(daemon: Daemon) -> None:
    with daemon.client() as client:
        first = client.get("/healthz").headers["x-request-id"]
        second = client.get("/healthz").headers["x-request-id"]
    assert first.startswith("req_") and second.startswith("req_") and first != second


@pytest.mark.parametrize(
    "offered",
    ["a" * 65, "line\r\nbreak", "spaces are not ids", 'quote"d', "ünïcode", "", "{json}"],
)
def test_log_injection_through_x_request_id_is_replaced(
    daemon: Daemon, log_buffer: io.StringIO, offered: str
) -> None:
    assert safe_request_id(offered) != offered
    raw = offered.encode("utf-8")
    if b"\r" in raw or b"\n" in raw:
        return  # httpx refuses to send such a header; safe_request_id is the guard
    with daemon.client() as client:
        answer = client.get("/healthz", headers={"X-Request-ID": raw})
    echoed = answer.headers["x-request-id"]
    assert echoed != offered and echoed.startswith("req_")
    assert offered not in log_buffer.getvalue() or offered == ""


def test_an_unexpected_error_is_logged_with_its_request_id(
    daemon: Daemon, log_buffer: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("operation view broke")

    monkeypatch.setattr(engine_views, "operation_view", broken)
    with daemon.orchestrator() as orch:
        answer = orch.get("/v1/operations/op_1", headers={"X-Request-ID": "boom-1"})
    assert answer.status_code == 500
    mine = [line for line in lines(log_buffer) if line.get("request_id") == "boom-1"]
    assert [(line["logger"], line["level"]) for line in mine][:2] == [
        ("promoter.access", "error"),
        ("promoter.api", "error"),
    ]
    assert "RuntimeError: operation view broke" in mine[1]["exception"]
    about = [line for line in lines(log_buffer) if "operation view broke" in json.dumps(line)]
    assert about and all(line.get("request_id") == "boom-1" for line in about)


def test_a_fault_inside_an_attempt_is_logged_with_the_request_id(
    daemon: Daemon,
    repo: Path,
    identity: str,
    log_buffer: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("read-back broke")

    monkeypatch.setattr(engine_promote, "read_back", broken)
    with daemon.orchestrator() as orch:
        view = orch.post(
            "/v1/promotions",
            json={
                "bundle_id": bundle["bundle_id"],
                "verification_receipt_sha256": receipt["receipt_sha256"],
                "fence": 7,
                "wait": True,
            },
            headers={"X-Request-ID": "attempt-1"},
        ).json()
    assert (view["status"], view["code"]) == ("refused", "internal")
    mine = [line for line in lines(log_buffer) if line.get("request_id") == "attempt-1"]
    assert [line["logger"] for line in mine] == [
        "promoter.operations",  # the fault, with its traceback
        "promoter.operations",  # the operation put back (refused: nothing was journaled)
        "promoter.decision",
        "promoter.outcome",
        "promoter.access",
    ]
    assert "RuntimeError: read-back broke" in mine[0]["exception"]
    assert "put back: refused" in mine[1]["message"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_log_injection_through_the_path_writes_no_control_character(
    daemon: Daemon, fmt: LogFormat
) -> None:
    buffer = io.StringIO()
    sink = handler(fmt, buffer)
    access = logging.getLogger("promoter.access")
    access.addHandler(sink)
    old_level = access.level
    access.setLevel(logging.INFO)
    try:
        with daemon.client() as client:
            answer = client.get("/v1/x%0afake%20line%1b[31m%c2%9b%e2%80%aeend")
    finally:
        access.removeHandler(sink)
        access.setLevel(old_level)
    assert answer.status_code == 404
    text = buffer.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert not any(ch in text for ch in ("\x1b", "\x9b", "\u202e", "\r"))
    assert "unmatched" in text


def test_an_unknown_method_is_one_bounded_label(daemon: Daemon) -> None:
    with daemon.client() as client:
        for method in ("BREW", "PROPFIND", "XYZZY"):
            client.request(method, "/healthz")
    got = samples(metrics_text(daemon))
    methods = {
        dict(labels).get("method") for name, labels in got if name == "promoter_http_requests_total"
    }
    assert "other" in methods and not methods & {"BREW", "PROPFIND", "XYZZY"}


def test_blob_intake_counts_each_blob_of_a_batch_under_its_own_status(daemon: Daemon) -> None:
    fresh, again, forged = b"batched blob\n", b"stored twice\n", b"not what it claims"
    with daemon.executor("run_metrics") as ex:
        first = ex.post("/v1/blobs:batchUpdate", content=frame_header(sha(again), 13) + again)
        assert first.status_code == 200, first.text
        frames = [
            frame_header(sha(fresh), len(fresh)) + fresh,
            frame_header(sha(again), len(again)) + again,
            frame_header(sha(b"something else"), len(forged)) + forged,
        ]
        answer = ex.post("/v1/blobs:batchUpdate", content=b"".join(frames))
    assert answer.status_code == 200, answer.text
    statuses = [r["status"] for r in answer.json()["responses"]]
    assert statuses[:2] == [201, 200] and statuses[2] >= 400
    got = samples(metrics_text(daemon))
    assert got[("promoter_blob_intake_bytes_total", (("status", "201"),))] == 13 + len(fresh)
    assert got[("promoter_blob_intake_bytes_total", (("status", "200"),))] == len(again)
    refused = got[("promoter_blob_intake_bytes_total", (("status", str(statuses[2])),))]
    assert refused == answer.json()["responses"][2]["bytes"]
