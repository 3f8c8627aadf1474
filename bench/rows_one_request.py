"""The speed table's rows for a 1-file flow in one request (``POST /v1/promotions:withEvidence``).

Per round, against one daemon in this process on a copy of a ``bench.workload`` source
(grant, executor token and lease set up once, untimed), three things alternate flow by
flow (``FLOWS`` each, after one untimed each, an ``os.sync`` before each):

- ``one``: a 1-file flow in one request (``PromoterClient.promote_with_evidence``: the
  bundle's frame and its blob's, the promotion with ``wait``; the client holds the
  orchestrator's token, the run's in its second header);
- ``three``: the same change in the three requests (``PUT`` of the blob, ``POST
  /v1/bundles``, ``POST /v1/promotions`` with ``wait``), as ``bench.rows_fixed.flow_1``;
- ``floor``: the serving stack's own cost of one such request: the same body, posted by a
  plain pool with promoter's client options to a FastAPI app whose one route reads it and
  answers a small JSON, served as promoter serves, behind its one ASGI layer
  (``bench.flow_floor.minimal_app``'s shape, one request instead of three).

Rows: ``flow_1_one_request`` (the one request's p50 over the floor's),
``flow_1_one_request_cpu`` (processor milliseconds a one-request flow spends outside the
calling thread: the daemon's threads and its git children) and
``flow_1_one_request_flushes`` (fsync, fdatasync, ``syncfs`` and durable SQLite commits of
one such flow, ``promoter.fs.flush``'s counter). Details: each p50 in milliseconds, the
three-request flow's processor time and flushes beside them.

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response

from bench import documents as bd
from bench import workload as wl
from bench.flow_floor import front_layer
from bench.harness import Table, _cpu_times, daemon, serving
from promoter.api.responses import json_response
from promoter.client.evidence import bundle_frame
from promoter.client.sync import PromoterClient
from promoter.client.wire import pool_options
from promoter.domain.blob_frames import frame_header
from promoter.domain.canonical import sha256_hex
from promoter.fs import flush

GOALS = {
    "flow_1_one_request": (3.0, "x"),
    "flow_1_one_request_cpu": (10.0, "ms"),
    "flow_1_one_request_flushes": (6.0, "flushes"),
}
LABELS = {
    "flow_1_one_request": "1-file flow in one request, p50, vs the stack's floor for one request",
    "flow_1_one_request_cpu": "1-file flow in one request, daemon processor time",
    "flow_1_one_request_flushes": "1-file flow in one request, flushes",
}
FLOWS = 7
KINDS = ("fsync", "fdatasync", "syncfs", "sqlite_commit")


def floor_app() -> FastAPI:
    """One route that reads its body and answers a small JSON, behind promoter's one
    ASGI layer as ``promoter.api.app`` adds it."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/promotions:withEvidence")
    async def one(request: Request) -> Response:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return json_response({"bytes": size, "operation": {"status": "completed"}})

    front_layer(app)
    return app


def _change(path: str, data: bytes) -> dict[str, Any]:
    return {"path": path, "operation": "create", "old": bd.state_of(None), "new": bd.state_of(data)}


def _flushes() -> dict[str, int]:
    made = flush.flushes()
    return {kind: int(made[kind]) for kind in KINDS}


def flow_1_one_request(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    here = work / f"one-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    with ExitStack() as stack:
        url, services = stack.enter_context(daemon(here / "state", ours))
        floor_url, _ = stack.enter_context(serving(floor_app()))
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity, source.base_commit, source.base_tree, max_changes=10, grant_id="grt_one"
        )
        orch = stack.enter_context(
            PromoterClient(url, services.tokens["orchestrator"], timeout=600)
        )
        registered = orch.register_grant(grant)
        token = str(orch.mint_executor_token(bd.RUN_ID)["token"])
        orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
        executor = stack.enter_context(orch.with_token(token))
        plain = stack.enter_context(httpx.Client(**pool_options(floor_url, token, 600, None)))

        def bundle_of(path: str, data: bytes) -> dict[str, Any]:
            return bd.bundle_document(grant, registered["grant_sha256"], [_change(path, data)])

        def one(n: int) -> None:
            data = b"one request %d of round %d\n" % (n, round_no)
            blob = [(sha256_hex(data), len(data), data)]
            bundle = bundle_of(f"one-{n}.txt", data)
            done = orch.promote_with_evidence(
                bundle, blob, bd.FENCE, executor_token=token, wait=True
            )
            if done["operation"].get("status") != "completed":
                raise AssertionError(f"the promotion ended {done['operation']}")

        def three(n: int) -> None:
            data = b"three requests %d of round %d\n" % (n, round_no)
            bundle = bundle_of(f"three-{n}.txt", data)
            executor.put_blob(sha256_hex(data), data)
            submitted = executor.submit_bundle(bundle)
            receipt = submitted["verification_receipt"]["receipt_sha256"]
            done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
            if done.get("status") != "completed":
                raise AssertionError(f"the promotion ended {done.get('status')}")

        def floor(n: int) -> None:
            data = b"one request %d of round %d\n" % (n, round_no)
            body = bundle_frame(bundle_of(f"floor-{n}.txt", data))
            body += frame_header(sha256_hex(data), len(data)) + data
            headers = {"Content-Type": "application/octet-stream", "Promoter-Executor-Token": token}
            answer = plain.post("/v1/promotions:withEvidence", content=body, headers=headers)
            if answer.status_code != 200:
                raise AssertionError(f"the floor answered {answer.status_code}")

        calls: list[tuple[str, Callable[[int], None]]] = [
            ("one", one),
            ("three", three),
            ("floor", floor),
        ]
        for _, call in calls:
            call(0)  # untimed: connections, folders and statements made
        timed: dict[str, list[float]] = {name: [] for name, _ in calls}
        daemon_cpu: dict[str, float] = {name: 0.0 for name, _ in calls}
        flushes: dict[str, dict[str, int]] = {name: dict.fromkeys(KINDS, 0) for name, _ in calls}
        for n in range(1, FLOWS + 1):
            turn = (n + round_no) % len(calls)
            for name, call in calls[turn:] + calls[:turn]:
                os.sync()
                before = _flushes()
                user, system = _cpu_times()
                mine = time.thread_time()
                started = time.perf_counter()
                call(n)
                timed[name].append(time.perf_counter() - started)
                mine = time.thread_time() - mine
                after_user, after_system = _cpu_times()
                daemon_cpu[name] += (after_user - user) + (after_system - system) - mine
                after = _flushes()
                for kind in KINDS:
                    flushes[name][kind] += after[kind] - before[kind]
    p50 = {name: statistics.median(values) for name, values in timed.items()}
    table.add("flow_1_one_request", p50["one"] / p50["floor"])
    table.add("flow_1_one_request_cpu", 1000 * daemon_cpu["one"] / FLOWS)
    table.add("flow_1_one_request_flushes", sum(flushes["one"].values()) / FLOWS)
    for name in ("one", "three", "floor"):
        table.note(f"flow_1_one_request.{name}_p50_ms", 1000 * p50[name])
    table.note("flow_1_one_request.three_daemon_cpu_ms", 1000 * daemon_cpu["three"] / FLOWS)
    table.note("flow_1_one_request.three_flushes", sum(flushes["three"].values()) / FLOWS)
    for kind in KINDS:
        table.note(f"flow_1_one_request.{kind}_per_flow", flushes["one"][kind] / FLOWS)
