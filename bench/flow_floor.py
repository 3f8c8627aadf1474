"""What the serving stack alone costs a 1-file flow, beside the flow itself and a bare write.

The same counts of 1-file flows, timed in one process, in blocks whose order rotates
with the round (each block after one untimed flow, each flow after an ``os.sync``):

- ``bare``: ``bench.workload.bare_loop`` of one 20-byte file in a temp git-less directory
  (temp write + fsync + rename + parent fsync).
- ``stack_empty``: the flow's three requests (``PUT /v1/blobs/sha256/{sha256}`` with a
  20-byte body and the executor's bearer token, ``POST /v1/bundles`` with the sealed
  bundle ``bench.documents`` makes for the same 1-file change, ``POST /v1/promotions``
  with ``wait`` and the orchestrator's token) sent by plain ``httpx.Client`` pools with
  promoter's client options (``promoter.client.wire.pool_options``: base URL, bearer,
  timeout, TLS context) to a FastAPI app of three ``async`` routes that read the body
  (the two documents ``json.loads``-ed) and answer a small JSON through
  ``promoter.api.responses.json_response``, served as promoter serves
  (``promoter.api.server.make_server``: uvicorn, httptools, the default loop, in a
  thread, the collector tuned by ``gc_policy.tune_for_serving``). Bodies and digests
  are made before the timer starts.
- ``stack_middleware``: ``stack_empty`` behind promoter's one ASGI layer as
  ``promoter.api.app`` adds it (``front_layer``: ``promoter.api.front.FrontDoor``, which
  counts into its own ``Metrics`` and writes the access line to ``promoter.access``,
  whose level the process leaves as ``bench.harness.daemon`` does).
- ``stack_client``: ``stack_middleware`` called through ``PromoterClient`` (``put_blob``,
  ``submit_bundle``, ``promote``: retries, answer checks and JSON reading of promoter's
  client) instead of the bare pools.
- ``stack_hops``: ``stack_client`` with the worker-thread hops promoter's three routes
  make (``run_in_threadpool``: five for the upload, two for the submission, one for the
  promotion, whose attempt runs on a thread of its own and is waited for), with nothing
  in them but the documents' ``json.loads``.
- ``stack_one``: ``stack_middleware``'s app and pool, the flow as one request: the
  bundle's frame and the blob's (``promoter.domain.evidence_frames``) posted to a route
  that reads the body and answers a small JSON: the stack's floor for one request.
- ``flow_1_one``: ``flow_1``'s change in one request (``POST
  /v1/promotions:withEvidence`` with ``wait``, ``PromoterClient.promote_with_evidence``)
  against the same kind of daemon.
- ``flow_1``: the flow of ``bench.rows_fixed.flow_1`` (digest, bundle sealed, ``PUT``,
  submission, promotion with ``wait``, all timed) against ``bench.harness.daemon`` on
  a copy of a ``bench.workload`` source repository, grant, executor token and lease set
  up untimed.

Per variant: processor time a flow (user + system of this process and its waited-for
children, ``bench.harness._cpu_times``; the mean of a round), the p50 wall time of a
round, and both over ``bare``'s; the medians over the rounds. Where it goes: the
calling thread's own time (``time.thread_time``: the client, or the bare write), the
server's event-loop thread's (its thread clock), the other threads' and waited-for
children's (the rest: worker threads, the runner, git), the live child processes'
(``/proc/<pid>/schedstat``: a running ``git cat-file``, which ``getrusage`` does not
count), and the collector's (``gc.callbacks``: all threads', the calling thread's).
Of one more, untimed flow: the worker-thread hops (``anyio.to_thread.run_sync``, which
``run_in_threadpool`` enters) and, for ``flow_1``, its flushes, git processes and the
sizes of its bodies and answers; ``flow_1``'s sealing of its bundle (client side) is
timed apart too. Run: ``python -m bench.flow_floor --flows 50 --rounds 3`` (``--variants
stack_one,flow_1_one,flow_1`` times only those beside ``bare``).

Deliberately not here: gating on the figures, the speed table (``bench.bench_table``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from bench import documents as bd
from bench import workload as wl
from bench.harness import SERVER_THREAD, _cpu_times, daemon, serving
from bench.variables import stop_on_unknown
from promoter.api.admission import Admission, Gate
from promoter.api.front import FrontDoor
from promoter.api.hosts import HostAllowlist
from promoter.api.metrics import Metrics
from promoter.api.observe import Recorder
from promoter.api.responses import json_response
from promoter.client.evidence import bundle_frame
from promoter.client.sync import PromoterClient
from promoter.client.wire import pool_options
from promoter.config import Settings
from promoter.domain.blob_frames import frame_header
from promoter.domain.canonical import sha256_hex
from promoter.fs import flush
from promoter.git import runner

TIMEOUT = 600.0
# stand-ins of the same shapes as the real ones (``promoter.store.credentials``, ``repos``)
EXECUTOR_TOKEN = "pex_" + "E" * 43
ORCHESTRATOR_TOKEN = "por_" + "O" * 43
IDENTITY = "repo_" + "1" * 32
COMMIT, TREE = "2" * 40, "3" * 40
RECEIPT = "4" * 64
OPERATION = "op_" + "5" * 26


def payload(n: int, round_no: int) -> bytes:
    """Flow ``n``'s file: 20 bytes, different in every flow of a round."""
    return b"flow %04d round %03d\n" % (n, round_no)


def change_of(n: int, data: bytes) -> dict[str, Any]:
    """The bundle change creating flow ``n``'s file (as ``bench.rows_fixed.flow_1``)."""
    return {
        "path": f"flow1-{n}.txt",
        "operation": "create",
        "old": bd.state_of(None),
        "new": bd.state_of(data),
    }


# --- what a variant hands the timer ------------------------------------------------------


@dataclass
class Rig:
    """One variant, set up: its flow, the server's thread (if any), what it notes.

    ``per_flow``: milliseconds the flow adds up (reset after the untimed flow, reported
    a flow); ``notes``: fixed figures; ``after``: one more, untimed flow and its figures.
    """

    flow: Callable[[int], None]
    server: threading.Thread | None = None
    notes: dict[str, float] = field(default_factory=dict)
    per_flow: dict[str, float] = field(default_factory=dict)
    after: Callable[[int], dict[str, float]] | None = None


Setup = Callable[[Path, int, int], AbstractContextManager[Rig]]


@dataclass
class Sample:
    """One timed flow: wall and processor seconds, split by thread."""

    wall: float
    cpu: float
    client: float
    server: float
    children: float


@dataclass
class Round:
    samples: list[Sample]
    notes: dict[str, float]

    def p50(self) -> float:
        return statistics.median(s.wall for s in self.samples)

    def mean(self, what: Callable[[Sample], float]) -> float:
        return statistics.fmean(what(s) for s in self.samples)


# --- bare --------------------------------------------------------------------------------


@contextmanager
def bare(work: Path, round_no: int, flows: int) -> Iterator[Rig]:
    here = work / f"bare-{round_no}"
    here.mkdir()

    def flow(n: int) -> None:
        wl.bare_loop(here, [wl.Step(f"flow1-{n}.txt", None, payload(n, round_no))])

    yield Rig(flow)


# --- the stack, with nothing behind it -----------------------------------------------------


def front_layer(app: FastAPI) -> None:
    """Promoter's one ASGI layer on ``app``, with the default settings' bounds."""
    app.add_middleware(
        FrontDoor,
        recorder=Recorder(Metrics()),
        hosts=HostAllowlist("127.0.0.1", []),
        admission=Admission(Gate(Settings())),
    )


def minimal_app(*, middleware: bool, runner: ThreadPoolExecutor | None = None) -> FastAPI:
    """The flow's three routes, each reading its body and answering a small JSON.

    With ``runner``, each route also hops to a worker thread where promoter's does
    (``stack_hops``), with nothing to do there: the executor's token checked, the blob
    opened, each chunk written, the blob committed; the bundle's token checked, the bundle
    parsed; the promotion request parsed and its attempt run on ``runner``, waited for.
    """
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    hop = runner is not None

    @app.put("/v1/blobs/sha256/{sha256}")
    async def put_blob(sha256: str, request: Request) -> Response:
        if not hop:
            body = await request.body()
            return json_response({"sha256": sha256, "bytes": len(body), "created": True}, 201)
        await run_in_threadpool(_nothing)  # the executor token, from the database
        await run_in_threadpool(_nothing)  # the upload opened
        size = 0
        async for chunk in request.stream():
            size += await run_in_threadpool(len, chunk)  # each chunk written
        await run_in_threadpool(_nothing)  # the blob committed
        return json_response({"sha256": sha256, "bytes": size, "created": True}, 201)

    @app.post("/v1/bundles")
    async def post_bundle(request: Request) -> Response:
        if hop:
            await run_in_threadpool(_nothing)  # the executor token, from the database
            document = await run_in_threadpool(json.loads, await request.body())
        else:
            document = json.loads(await request.body())
        answer = {
            "bundle_id": document["bundle_id"],
            "bundle_sha256": document["bundle_sha256"],
            "verification_receipt": {"receipt_sha256": RECEIPT},
        }
        return json_response(answer, 201)

    def promote(raw: bytes) -> Any:
        document = json.loads(raw)
        if runner is not None:
            runner.submit(_nothing).result()  # the attempt, on the runner's thread
        return document

    @app.post("/v1/promotions")
    async def post_promotion(request: Request) -> Response:
        raw = await request.body()
        document = await run_in_threadpool(promote, raw) if hop else json.loads(raw)
        answer = {"operation_id": OPERATION, "bundle_id": document["bundle_id"]}
        return json_response({**answer, "status": "completed"})

    @app.post("/v1/promotions:withEvidence")
    async def post_with_evidence(request: Request) -> Response:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        answer = {"bytes": size, "verification_receipt": {"receipt_sha256": RECEIPT}}
        return json_response({**answer, "operation": {"status": "completed"}})

    if middleware:  # as ``promoter.api.app.create_app`` adds it
        front_layer(app)
    return app


def _nothing() -> None:
    """A worker thread's job in ``stack_hops``."""


def stand_in_bundles(flows: int, round_no: int) -> dict[int, dict[str, Any]]:
    """The sealed bundles of flows 0..``flows`` under a stand-in grant."""
    grant = bd.grant_document(IDENTITY, COMMIT, TREE, max_changes=10, grant_id="grt_flow1")
    grant_sha256 = sha256_hex(json.dumps(grant, sort_keys=True).encode())
    return {
        n: bd.bundle_document(grant, grant_sha256, [change_of(n, payload(n, round_no))])
        for n in range(flows + 2)
    }


def _compact(document: Any) -> bytes:
    """``document`` as httpx sends a ``json=`` body (the size on the wire)."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _answer(response: httpx.Response) -> dict[str, Any]:
    if not response.is_success:
        raise AssertionError(f"{response.request.url.path} answered {response.status_code}")
    body = response.json()
    if not isinstance(body, dict):
        raise AssertionError(f"{response.request.url.path} answered no JSON object")
    return body


def _stack(*, middleware: bool, client: bool, hops: bool = False) -> Setup:
    @contextmanager
    def setup(work: Path, round_no: int, flows: int) -> Iterator[Rig]:
        bundles = stand_in_bundles(flows, round_no)
        blobs = {n: payload(n, round_no) for n in bundles}
        digests = {n: sha256_hex(data) for n, data in blobs.items()}
        notes = {"bundle_bytes": float(len(_compact(bundles[0])))}
        with ExitStack() as stack:
            runner = None
            if hops:
                runner = stack.enter_context(ThreadPoolExecutor(1, "bench-runner"))
            app = minimal_app(middleware=middleware, runner=runner)
            url, thread = stack.enter_context(serving(app))
            if client:
                orch = stack.enter_context(PromoterClient(url, ORCHESTRATOR_TOKEN, timeout=TIMEOUT))
                executor = stack.enter_context(orch.with_token(EXECUTOR_TOKEN))

                def through_client(n: int) -> None:
                    bundle = bundles[n]
                    executor.put_blob(digests[n], blobs[n])
                    submitted = executor.submit_bundle(bundle)
                    receipt = submitted["verification_receipt"]["receipt_sha256"]
                    done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                    if done.get("status") != "completed":
                        raise AssertionError(f"the promotion ended {done.get('status')}")

                yield Rig(through_client, thread, notes)
                return
            ex_pool = stack.enter_context(
                httpx.Client(**pool_options(url, EXECUTOR_TOKEN, TIMEOUT, None))
            )
            orch_pool = stack.enter_context(
                httpx.Client(**pool_options(url, ORCHESTRATOR_TOKEN, TIMEOUT, None))
            )

            def plain(n: int) -> None:  # the requests ``Transport`` sends, nothing around them
                bundle, data = bundles[n], blobs[n]
                headers = {
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(len(data)),
                }
                path = f"/v1/blobs/sha256/{digests[n]}"
                _answer(ex_pool.request("PUT", path, content=data, headers=headers))
                submitted = _answer(ex_pool.request("POST", "/v1/bundles", json=bundle))
                receipt = submitted["verification_receipt"]["receipt_sha256"]
                request = {
                    "bundle_id": bundle["bundle_id"],
                    "verification_receipt_sha256": receipt,
                    "fence": bd.FENCE,
                    "wait": True,
                }
                done = _answer(orch_pool.request("POST", "/v1/promotions", json=request))
                if done.get("status") != "completed":
                    raise AssertionError(f"the promotion ended {done.get('status')}")

            yield Rig(plain, thread, notes)

    return setup


@contextmanager
def stack_one(work: Path, round_no: int, flows: int) -> Iterator[Rig]:
    """The stack's floor for one request: the flow's body in one ``POST``, read and answered."""
    bundles = stand_in_bundles(flows, round_no)
    bodies = {}
    for n, bundle in bundles.items():
        data = payload(n, round_no)
        bodies[n] = bundle_frame(bundle) + frame_header(sha256_hex(data), len(data)) + data
    with ExitStack() as stack:
        url, thread = stack.enter_context(serving(minimal_app(middleware=True)))
        pool = stack.enter_context(
            httpx.Client(**pool_options(url, ORCHESTRATOR_TOKEN, TIMEOUT, None))
        )
        headers = {
            "Content-Type": "application/octet-stream",
            "Promoter-Executor-Token": EXECUTOR_TOKEN,
        }

        def one(n: int) -> None:
            path = "/v1/promotions:withEvidence"
            done = _answer(pool.request("POST", path, content=bodies[n], headers=headers))
            if done["operation"].get("status") != "completed":
                raise AssertionError("the floor answered no completed operation")

        yield Rig(one, thread, {"body_bytes": float(len(bodies[0]))})


# --- the real flow -------------------------------------------------------------------------


def _flow_1(source: wl.Source) -> Setup:
    @contextmanager
    def setup(work: Path, round_no: int, flows: int) -> Iterator[Rig]:
        here = work / f"flow1-{round_no}"
        here.mkdir()
        ours = wl.copy_repo(source.path, here / "promoter")
        with daemon(here / "state", ours) as (url, services):
            thread = next(t for t in threading.enumerate() if t.name == SERVER_THREAD)
            identity = services.registry.by_name(bd.REPO_NAME).identity
            grant = bd.grant_document(
                identity, source.base_commit, source.base_tree, max_changes=10, grant_id="grt_flow1"
            )
            with PromoterClient(url, services.tokens["orchestrator"], timeout=TIMEOUT) as orch:
                registered = orch.register_grant(grant)
                token = orch.mint_executor_token(bd.RUN_ID)["token"]
                orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
                spent = {"sealing_ms": 0.0}
                sizes: dict[str, float] = {}
                with orch.with_token(token) as executor:

                    def flow(n: int) -> None:  # ``bench.rows_fixed.flow_1``'s flow
                        sealing = time.thread_time()
                        data = payload(n, round_no)
                        bundle = bd.bundle_document(
                            grant, registered["grant_sha256"], [change_of(n, data)]
                        )
                        spent["sealing_ms"] += 1000 * (time.thread_time() - sealing)
                        put = executor.put_blob(sha256_hex(data), data)
                        submitted = executor.submit_bundle(bundle)
                        receipt = submitted["verification_receipt"]["receipt_sha256"]
                        done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                        if done.get("status") != "completed":
                            raise AssertionError(f"the promotion ended {done.get('status')}")
                        if not sizes:
                            for name, document in (
                                ("bundle_bytes", bundle),
                                ("put_answer_bytes", put),
                                ("bundle_answer_bytes", submitted),
                                ("promotion_answer_bytes", done),
                            ):
                                sizes[name] = float(len(_compact(document)))

                    def counted(n: int) -> dict[str, float]:
                        """Flow ``n``, untimed, with its flushes and git processes."""
                        flushes, spawned = flush.flushes(), runner.spawned()
                        flow(n)
                        made = flush.flushes() - flushes
                        counts = {f"{kind}_per_flow": float(made[kind]) for kind in made}
                        counts["git_per_flow"] = float(runner.spawned() - spawned)
                        return {**counts, **sizes}

                    yield Rig(flow, thread, per_flow=spent, after=counted)

    return setup


def _flow_1_one(source: wl.Source) -> Setup:
    @contextmanager
    def setup(work: Path, round_no: int, flows: int) -> Iterator[Rig]:
        here = work / f"flow1one-{round_no}"
        here.mkdir()
        ours = wl.copy_repo(source.path, here / "promoter")
        with daemon(here / "state", ours) as (url, services):
            thread = next(t for t in threading.enumerate() if t.name == SERVER_THREAD)
            identity = services.registry.by_name(bd.REPO_NAME).identity
            grant = bd.grant_document(
                identity, source.base_commit, source.base_tree, max_changes=10, grant_id="grt_one"
            )
            with PromoterClient(url, services.tokens["orchestrator"], timeout=TIMEOUT) as orch:
                registered = orch.register_grant(grant)
                token = str(orch.mint_executor_token(bd.RUN_ID)["token"])
                orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())

                def flow(n: int) -> None:  # the change of ``flow_1``, in one request
                    data = payload(n, round_no)
                    bundle = bd.bundle_document(
                        grant, registered["grant_sha256"], [change_of(n, data)]
                    )
                    blobs = [(sha256_hex(data), len(data), data)]
                    done = orch.promote_with_evidence(
                        bundle, blobs, bd.FENCE, executor_token=token, wait=True
                    )
                    if done["operation"].get("status") != "completed":
                        raise AssertionError(f"the promotion ended {done['operation']}")

                def counted(n: int) -> dict[str, float]:
                    """Flow ``n``, untimed, with its flushes and git processes."""
                    flushes, spawned = flush.flushes(), runner.spawned()
                    flow(n)
                    made = flush.flushes() - flushes
                    counts = {f"{kind}_per_flow": float(made[kind]) for kind in made}
                    counts["git_per_flow"] = float(runner.spawned() - spawned)
                    return counts

                yield Rig(flow, thread, after=counted)

    return setup


@contextmanager
def _hops_counted() -> Iterator[list[int]]:
    """How many times ``anyio.to_thread.run_sync`` (``run_in_threadpool``) is entered."""
    original = anyio.to_thread.run_sync
    count = [0]

    async def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return await original(*args, **kwargs)

    anyio.to_thread.run_sync = counting  # type: ignore[assignment]
    try:
        yield count
    finally:
        anyio.to_thread.run_sync = original


# --- timing --------------------------------------------------------------------------------


def _thread_clock(thread: threading.Thread | None) -> float:
    if thread is None or thread.ident is None or not thread.is_alive():
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def _children_ns() -> dict[int, int]:
    """Processor nanoseconds so far of each live child process (all its threads)."""
    found: dict[int, int] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as handle:
                pids = [int(pid) for pid in handle.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                total = 0
                for thread in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{thread}/schedstat", encoding="ascii") as s:
                        total += int(s.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            found[pid] = total
    return found


def _children_delta(before: dict[int, int], after: dict[int, int]) -> float:
    return sum(ns - before.get(pid, 0) for pid, ns in after.items()) / 1e9


@contextmanager
def _collections() -> Iterator[dict[str, float]]:
    """The collector's processor milliseconds inside the block: all threads', the caller's."""
    caller = threading.get_ident()
    spent = {"gc_ms": 0.0, "gc_client_ms": 0.0}
    started: dict[int, float] = {}

    def callback(phase: str, _info: dict[str, int]) -> None:
        me = threading.get_ident()
        if phase == "start":
            started[me] = time.thread_time()
        elif me in started:
            took = 1000 * (time.thread_time() - started.pop(me))
            spent["gc_ms"] += took
            if me == caller:
                spent["gc_client_ms"] += took

    gc.callbacks.append(callback)
    try:
        yield spent
    finally:
        gc.callbacks.remove(callback)


def time_variant(setup: Setup, work: Path, round_no: int, flows: int) -> Round:
    """One block: set up, one untimed flow, ``flows`` timed ones (one more untimed)."""
    with setup(work, round_no, flows) as rig:
        rig.flow(0)  # untimed: connections opened, the folders every later flow finds made
        for key in rig.per_flow:
            rig.per_flow[key] = 0.0
        gc.collect()
        with _collections() as collected:
            samples = [_timed(rig, n) for n in range(1, flows + 1)]
        notes = {**rig.notes, **{key: value / flows for key, value in rig.per_flow.items()}}
        notes.update({key: value / flows for key, value in collected.items()})
        with _hops_counted() as hops:
            if rig.after is not None:
                notes.update(rig.after(flows + 1))
            else:
                rig.flow(flows + 1)
        if rig.server is not None:
            notes["thread_hops_per_flow"] = float(hops[0])
    return Round(samples, notes)


def _timed(rig: Rig, n: int) -> Sample:
    """Flow ``n`` of ``rig``, after an ``os.sync``: its wall and processor times."""
    os.sync()
    children = _children_ns()
    user, system = _cpu_times()
    server = _thread_clock(rig.server)
    client = time.thread_time()
    started = time.perf_counter()
    rig.flow(n)
    wall = time.perf_counter() - started
    client = time.thread_time() - client
    server = _thread_clock(rig.server) - server
    after_user, after_system = _cpu_times()
    cpu = (after_user - user) + (after_system - system)
    return Sample(wall, cpu, client, server, _children_delta(children, _children_ns()))


def run(
    flows: int,
    rounds: int,
    *,
    files: int = 115,
    size: int = 4096,
    only: set[str] | None = None,
) -> dict[str, list[Round]]:
    """Every variant (or ``bare`` and those in ``only``) ``rounds`` times, in an order that
    rotates with the round."""
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-floor-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        (work / "source").mkdir()
        source = wl.make_source(work / "source", wl.make_workload(files, size))
        variants: list[tuple[str, Setup]] = [
            ("bare", bare),
            ("stack_empty", _stack(middleware=False, client=False)),
            ("stack_middleware", _stack(middleware=True, client=False)),
            ("stack_client", _stack(middleware=True, client=True)),
            ("stack_hops", _stack(middleware=True, client=True, hops=True)),
            ("flow_1", _flow_1(source)),
            ("stack_one", stack_one),
            ("flow_1_one", _flow_1_one(source)),
        ]
        if only is not None:
            variants = [(n, v) for n, v in variants if n == "bare" or n in only]
        found: dict[str, list[Round]] = {name: [] for name, _ in variants}
        for round_no in range(rounds):
            turn = round_no % len(variants)
            for name, setup in variants[turn:] + variants[:turn]:
                found[name].append(time_variant(setup, work, round_no, flows))
        return found
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- the report ----------------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    return ", ".join(f"{1000 * v:.2f}" for v in values)


def report(found: dict[str, list[Round]]) -> list[str]:
    base = found["bare"]
    base_cpu = statistics.median(r.mean(lambda s: s.cpu) for r in base)
    base_p50 = statistics.median(r.p50() for r in base)
    lines = [
        f"{'variant':<17} {'CPU ms/flow':>11} {'p50 ms':>8} {'CPU/bare':>9} {'p50/bare':>9}"
        "   rounds: CPU ms/flow; p50 ms"
    ]
    for name, rounds in found.items():
        cpus = [r.mean(lambda s: s.cpu) for r in rounds]
        p50s = [r.p50() for r in rounds]
        cpu, p50 = statistics.median(cpus), statistics.median(p50s)
        lines.append(
            f"{name:<17} {1000 * cpu:11.2f} {1000 * p50:8.2f} {cpu / base_cpu:8.1f}x "
            f"{p50 / base_p50:8.1f}x   {_ms(cpus)}; {_ms(p50s)}"
        )
    lines.append("")
    lines.append(
        f"{'where (ms/flow)':<17} {'client':>8} {'server':>8} {'other':>8} {'children':>9}"
        "   client: the calling thread; server: the event loop's thread; other: the rest"
        " (worker threads, the runner, waited-for children); children: live child processes"
    )
    for name, rounds in found.items():
        parts = [
            statistics.median(r.mean(what) for r in rounds)
            for what in (
                lambda s: s.client,
                lambda s: s.server,
                lambda s: s.cpu - s.client - s.server,
                lambda s: s.children,
            )
        ]
        lines.append(
            f"{name:<17} "
            + " ".join(f"{1000 * p:8.2f}" for p in parts[:3])
            + f" {1000 * parts[3]:9.2f}"
        )
    lines.append("")
    for name, rounds in found.items():
        keys = sorted({key for r in rounds for key in r.notes})
        if not keys:
            continue
        medians = {key: statistics.median(r.notes.get(key, 0.0) for r in rounds) for key in keys}
        shown = ", ".join(
            f"{key} {value:.2f}" if key.endswith("_ms") else f"{key} {value:g}"
            for key, value in medians.items()
        )
        lines.append(f"{name}: {shown}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--flows", type=int, default=50, help="timed flows a variant a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--variants", help="comma-separated variants to time beside bare (default: all)"
    )
    args = parser.parse_args(argv)
    only = None if args.variants is None else set(args.variants.split(","))
    before = os.getloadavg()
    found = run(args.flows, args.rounds, only=only)
    after = os.getloadavg()
    load = " ".join(f"{x:.2f}" for x in before) + " -> " + " ".join(f"{x:.2f}" for x in after)
    print(
        f"flow_floor: {args.flows} flows x {args.rounds} rounds a variant, "
        f"{os.cpu_count()} CPUs, load average {load}"
    )
    print("\n".join(report(found)))
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
