"""The speed table: each row a ratio measured side by side, median of interleaved rounds.

Every round runs every row once (a row's variants in an order that rotates with the
round), so a machine that gets busier mid-run slows every row alike; each row reports
the median of its per-round figures. The rows:

- ``http_flow_1150``: the whole flow over HTTP against a real daemon on a loopback
  port (grant, executor token, blob upload, bundle submit + verification, lease,
  ``POST /v1/promotions`` with ``wait``), 1150 small files, over the bare per-file
  durable-write loop (``bench_promote.bare_loop``) on an identical copy. The daemon is
  ``promoter serve`` in its own process, as deployed; the same flow against a daemon in
  the client's own interpreter (sharing its lock) is reported next to it
  (``http_flow_1150.in_process``), as is the upload's share of the flow.
- ``promote_1150``, ``promote_115``: promotion alone (``request_promotion`` until the
  operation completed, in-process, with the garbage collector tuned as ``promoter
  serve`` tunes it; blobs, grant, lease and first verification before) over the bare
  loop.
- ``verify_10k``: the first ``POST /v1/bundles`` of a 10 000-change bundle to a fresh
  daemon (timed by a client process of its own, started before it is timed) over
  re-hashing every blob plus JCS of the bundle.
- ``healthz_during_verify_10k``: the largest ``/healthz`` latency (milliseconds, not a
  ratio) seen by a client polling it back to back while a second daemon verifies the
  same bundle; that submission's ratio is a detail (``verify_10k.beside_probe``).
- ``cli_help``: ``promoter --help`` start (seconds, absolute goal), and its ratio over a
  bare ``python -c pass``.
- ``build_1_in_100k``, ``build_1gib`` (only with ``PROMOTER_BENCH_BUILDER=1``, they are
  long): the bundle builder, see ``bench.rows_builder``.

With ``full`` (``--full`` in ``bench.run``) the rows of ``bench.rows_gitcost`` join the
rounds: a 1-file promotion in a 100k-file repository (nested, with snapshots, flat)
over the same in a 10-file one; they build their repositories once per run.

A row's files stay until the whole run ends. On ext4 without a journal (this kind of
machine's disk) the kernel does not reuse an inode freed in the last 30 seconds, and it
finds that out inode by inode on every allocation: a tree deleted between rows makes
every file created after it, promoter's and the bare loop's, pay for each inode freed,
by whichever variant happens to share a block group with it.

What this does not do: gate anything (the exit status is 0 whatever the figures).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import rfc8785

from bench import bench_promote as bp
from bench import rows_builder, rows_fswrite, rows_gitcost
from promoter.api import gc_policy
from promoter.api.app import create_app
from promoter.api.server import make_server
from promoter.client import PromoterClient
from promoter.config import RepositoryConfig, load_settings
from promoter.domain.canonical import rfc3339, sha256_hex, utcnow
from promoter.domain.documents import seal_bundle
from promoter.domain.models import blob_path
from promoter.engine.services import Services, build_services

# row -> (goal, unit): a ratio goal unless the unit says otherwise
GOALS: dict[str, tuple[float, str]] = {
    "http_flow_1150": (2.0, "x"),
    "promote_1150": (1.0, "x"),
    "promote_115": (1.2, "x"),
    "verify_10k": (1.5, "x"),
    "healthz_during_verify_10k": (50.0, "ms"),
    "cli_help": (0.3, "s"),
    **rows_fswrite.GOALS,
    **rows_builder.BUILDER_GOALS,  # with full=True only, as the next: 100k-file repositories
    **rows_gitcost.GOALS,
}
LABELS = {
    "http_flow_1150": "full HTTP flow, 1150 files, vs bare durable loop",
    "promote_1150": "promotion alone, 1150 changes, vs bare loop",
    "promote_115": "promotion alone, 115 changes, vs bare loop",
    "verify_10k": "verification, 10k changes, vs re-hash + JCS",
    "healthz_during_verify_10k": "/healthz max latency during a 10k verification",
    "cli_help": "promoter --help start",
    **rows_fswrite.LABELS,
    **rows_builder.BUILDER_LABELS,
    **rows_gitcost.LABELS,
}


@dataclass
class Table:
    samples: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, list[float]] = field(default_factory=dict)

    def add(self, row: str, value: float) -> None:
        self.samples.setdefault(row, []).append(value)

    def note(self, key: str, value: float) -> None:
        self.extra.setdefault(key, []).append(value)


# --- a daemon in this process ---------------------------------------------------------------


@contextmanager
def daemon(state_dir: Path, repo: Path) -> Iterator[tuple[str, Services]]:
    settings = load_settings(
        None, state_dir=state_dir, repositories={bp.REPO_NAME: RepositoryConfig(path=repo)}
    )
    services = build_services(settings)
    server = make_server(create_app(settings, services), "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, name="bench-server", daemon=True)
    previous = gc_policy.tune_for_serving()  # as ``promoter serve`` does
    thread.start()
    try:
        if not server.ready.wait(60):
            raise RuntimeError("the benchmark daemon did not start")
        yield f"http://127.0.0.1:{server.port}", services
    finally:
        server.should_exit = True
        thread.join(60)
        services.close()
        gc_policy.restore(previous)


def grant_document(
    identity: str, source: bp.Source, changes: int, grant_id: str = "grt_bench"
) -> dict[str, Any]:
    now = utcnow()
    return {
        "schema": "GrantV1",
        "grant_id": grant_id,
        "repository_identity": identity,
        "branch": "refs/heads/main",
        "base_commit": source.base_commit,
        "base_tree": source.base_tree,
        "executor_run_id": bp.RUN_ID,
        "workflow_id": bp.WORKFLOW,
        "stage": bp.STAGE,
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": bp.FENCE,
        "not_before": rfc3339(now - timedelta(minutes=5)),
        "expires_at": rfc3339(now + timedelta(hours=2)),
        "write_allowlist": [{"pattern": "**", "operations": ["create", "modify", "delete"]}],
        "target_preconditions": [],
        "limits": {"max_changes": changes + 10, "max_total_bytes": 1 << 40},
    }


def bundle_document(
    grant: dict[str, Any], grant_sha256: str, steps: list[bp.Step]
) -> dict[str, Any]:
    changes = [
        {"path": s.path, "operation": s.operation, "old": bp._state(s.old), "new": bp._state(s.new)}
        for s in steps
    ]
    return seal_bundle(
        {
            "schema": "PatchBundleV1",
            "bundle_id": "",
            "bundle_sha256": "",
            "grant_id": grant["grant_id"],
            "grant_sha256": grant_sha256,
            "executor_run_id": bp.RUN_ID,
            "repository_identity": grant["repository_identity"],
            "base_commit": grant["base_commit"],
            "base_tree": grant["base_tree"],
            "changes": changes,
            "change_count": len(changes),
            "total_bytes": sum(len(s.new) for s in steps if s.new is not None),
            "created_at": rfc3339(utcnow()),
        }
    )


def lease_document() -> dict[str, Any]:
    return {
        "run_id": bp.RUN_ID,
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": bp.FENCE,
        "expires_at": rfc3339(utcnow() + timedelta(hours=2)),
    }


def upload(executor: PromoterClient, blobs: list[bytes]) -> None:
    """Every blob the host lacks: batched when the client can, else one PUT each."""
    batch = getattr(executor, "put_blobs", None)
    if callable(batch):
        batch([(sha256_hex(b), len(b), b) for b in blobs])
        return
    for data in blobs:
        executor.put_blob(sha256_hex(data), data)


# --- the rows ---------------------------------------------------------------------------------


def _alternate(round_no: int, runs: list[tuple[str, Callable[[], object]]]) -> dict[str, float]:
    """Time each run (after ``sync``), in an order that rotates with ``round_no``."""
    order = runs[round_no % len(runs) :] + runs[: round_no % len(runs)]
    seconds: dict[str, float] = {}
    for name, call in order:
        os.sync()
        started = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - started
    return seconds


@contextmanager
def daemon_process(state_dir: Path, repo: Path) -> Iterator[tuple[str, str, str]]:
    """``promoter serve`` in its own process: ``(url, orchestrator token, identity)``.

    How a deployed daemon runs: its own interpreter, so the client's work (hashing,
    framing, JSON) does not share its lock. Ready when it prints its URL on stderr.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [sys.executable, "-m", "promoter.cli.main", "serve", "--state-dir", str(state_dir)]
    argv += ["--port", "0", "--repo", f"{bp.REPO_NAME}={repo}"]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert proc.stderr is not None
        url = ""
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("promoter: ready on "):
                url = line.removeprefix("promoter: ready on ")
                break
        if not url:
            raise RuntimeError("the benchmark daemon exited before it was ready")
        drain = threading.Thread(target=proc.stderr.read, daemon=True)  # the pipe never fills
        drain.start()
        token = (state_dir / "credentials" / "orchestrator.token").read_text().strip()
        with PromoterClient(url, token, timeout=60) as orch:
            identity = str(orch.repositories()[0]["repository_identity"])
        yield url, token, identity
    finally:
        proc.terminate()
        proc.wait(60)


@contextmanager
def _flow_daemon(state_dir: Path, repo: Path, separate: bool) -> Iterator[tuple[str, str, str]]:
    if separate:
        with daemon_process(state_dir, repo) as answer:
            yield answer
        return
    with daemon(state_dir, repo) as (url, services):
        identity = services.registry.by_name(bp.REPO_NAME).identity
        yield url, services.tokens["orchestrator"], identity


def http_flow(
    table: Table,
    work: Path,
    round_no: int,
    source: bp.Source,
    workload: bp.Workload,
    *,
    separate: bool = True,
) -> None:
    """The flow against a daemon in its own process (``separate``), or in this one."""
    here = work / f"http{round_no}{'' if separate else '-in-process'}"
    here.mkdir()
    ours = bp.copy_repo(source.path, here / "promoter")
    bare = bp.copy_repo(source.path, here / "bare")
    blobs = bp._blobs(workload)
    phases: dict[str, float] = {}
    with _flow_daemon(here / "state", ours, separate) as (url, orchestrator, identity):
        grant = grant_document(identity, source, len(workload.steps))

        def flow() -> None:
            started = time.perf_counter()
            with PromoterClient(url, orchestrator, timeout=3600) as orch:
                registered = orch.register_grant(grant)
                token = orch.mint_executor_token(bp.RUN_ID)["token"]
                bundle = bundle_document(grant, registered["grant_sha256"], workload.steps)
                with orch.with_token(token) as executor:
                    missing = set(executor.blobs_missing(sha256_hex(b) for b in blobs))
                    upload(executor, [b for b in blobs if sha256_hex(b) in missing])
                    phases["upload"] = time.perf_counter() - started
                    submitted = executor.submit_bundle(bundle)
                orch.set_lease(bp.WORKFLOW, bp.STAGE, lease_document())
                receipt = submitted["verification_receipt"]["receipt_sha256"]
                done = orch.promote(bundle["bundle_id"], receipt, bp.FENCE, wait=True)
                if done.get("status") != "completed":
                    raise AssertionError(f"the promotion ended {done.get('status')}: {done}")

        seconds = _alternate(
            round_no, [("flow", flow), ("bare", lambda: bp.bare_loop(bare, workload.steps))]
        )
    bp.check_tree(ours, workload.target, "http flow")
    bp.check_tree(bare, workload.target, "bare loop")
    # kept until the run ends (see the module docstring: deleted inodes)
    if not separate:  # the daemon sharing the client's interpreter: a detail of the row
        table.note("http_flow_1150.in_process", seconds["flow"] / seconds["bare"])
        table.note("http_flow_1150.in_process_seconds", seconds["flow"])
        return
    table.add("http_flow_1150", seconds["flow"] / seconds["bare"])
    table.note("http_flow_1150.seconds", seconds["flow"])
    table.note("http_flow_1150.bare_seconds", seconds["bare"])
    table.note("http_flow_1150.upload_share", phases["upload"] / seconds["flow"])
    table.note("http_flow_1150.upload_ms_per_blob", 1000 * phases["upload"] / len(blobs))


def promotion(
    table: Table,
    row: str,
    work: Path,
    round_no: int,
    source: bp.Source,
    workload: bp.Workload,
    template: Path,
) -> None:
    here = work / f"{row}-{round_no}"
    here.mkdir()
    ours = bp.copy_repo(source.path, here / "promoter")
    bare = bp.copy_repo(source.path, here / "bare")
    prepared = bp.prepare_promoter(ours, here / "state", source, workload, template)
    operation: list[str] = []
    previous = gc_policy.tune_for_serving()  # the collector as ``promoter serve`` sets it
    try:
        seconds = _alternate(
            round_no,
            [
                ("promoter", lambda: operation.append(bp.promote_once(prepared))),
                ("bare", lambda: bp.bare_loop(bare, workload.steps)),
            ],
        )
    finally:
        gc_policy.restore(previous)
    bp.finish_promoter(prepared, operation[0])
    bp.check_tree(ours, workload.target, row)
    bp.check_tree(bare, workload.target, "bare loop")
    table.add(row, seconds["promoter"] / seconds["bare"])
    table.note(f"{row}.seconds", seconds["promoter"])
    table.note(f"{row}.bare_seconds", seconds["bare"])
    # kept until the run ends (see the module docstring: deleted inodes)


def _plain_blob_store(blobs_root: Path, blobs: list[bytes]) -> None:
    """Blob files in the store's layout, written without fsync (set-up, not measured)."""
    for data in blobs:
        target = blobs_root.parent / blob_path(sha256_hex(data))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o444)


_PROBE = """
import json, statistics, sys, threading, time, httpx
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
seen = []
with httpx.Client(base_url=sys.argv[1], timeout=60) as client:
    client.get("/healthz").raise_for_status()
    print("ready", flush=True)
    while not stop.is_set():
        started = time.perf_counter()
        client.get("/healthz").raise_for_status()
        seen.append(time.perf_counter() - started)
print(json.dumps({"max_ms": 1000 * max(seen, default=0), "polls": len(seen),
                  "median_ms": 1000 * statistics.median(seen or [0])}), flush=True)
"""


@contextmanager
def healthz_probe(url: str) -> Iterator[Callable[[], dict[str, float]]]:
    """A separate process polling ``/healthz`` (so it does not share this process's GIL)
    from entry until the returned callable is called, which answers its latencies."""
    probe = subprocess.Popen(
        [sys.executable, "-c", _PROBE, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert probe.stdin is not None and probe.stdout is not None
    try:
        if probe.stdout.readline().strip() != "ready":
            raise RuntimeError("the /healthz probe did not start")

        def finish() -> dict[str, float]:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write("stop\n")
            probe.stdin.flush()
            figures: dict[str, float] = json.loads(probe.stdout.readline())
            return figures

        yield finish
    finally:
        probe.kill()
        probe.wait(60)


_SUBMIT = """
import json, sys, time
from promoter.client import PromoterClient
bundle = json.loads(open(sys.argv[3], encoding="utf-8").read())
with PromoterClient(sys.argv[1], sys.argv[2], timeout=3600) as executor:
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    executor.submit_bundle(bundle)
    print(json.dumps(time.perf_counter() - started), flush=True)
"""


@contextmanager
def submitter(url: str, token: str, document: Path) -> Iterator[Callable[[], float]]:
    """A separate process holding the bundle ``document``, ready to submit it: the returned
    callable has it submit and answers the seconds its client took (encoding included).

    A client in the daemon's own interpreter would stall the daemon's event loop while it
    encodes the 10 000-change body (one C call holding the lock) and bill that to
    ``/healthz``; a deployed daemon never shares its interpreter with a client.
    """
    client = subprocess.Popen(
        [sys.executable, "-c", _SUBMIT, url, token, str(document)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        if client.stdout.readline().strip() != "ready":
            raise RuntimeError("the submitting client did not start")

        def submit() -> float:
            assert client.stdin is not None and client.stdout is not None
            client.stdin.write("go\n")
            client.stdin.flush()
            answer = client.stdout.readline()
            if not answer.strip():
                raise RuntimeError("the submitting client failed")
            seconds: float = json.loads(answer)
            return seconds

        yield submit
    finally:
        client.kill()
        client.wait(60)


def _submission(
    here: Path, source: bp.Source, creates: list[bp.Step], *, probed: bool
) -> dict[str, float]:
    """One first submission of the ``creates`` bundle to a fresh daemon in ``here``: its
    seconds, and with ``probed`` the ``/healthz`` figures of a probe polling meanwhile."""
    (here / "state" / "audit").mkdir(parents=True)
    repo = bp.copy_repo(source.path, here / "repo")
    _plain_blob_store(
        here / "state" / "audit" / "blobs", [s.new for s in creates if s.new is not None]
    )
    with daemon(here / "state", repo) as (url, services):
        identity = services.registry.by_name(bp.REPO_NAME).identity
        grant = grant_document(identity, source, len(creates))
        with PromoterClient(url, services.tokens["orchestrator"], timeout=3600) as orch:
            registered = orch.register_grant(grant)
            token = orch.mint_executor_token(bp.RUN_ID)["token"]
        document = here / "bundle.json"
        document.write_text(json.dumps(bundle_document(grant, registered["grant_sha256"], creates)))
        figures: dict[str, float] = {}
        # the probe and the submitting client are processes of their own, started (and
        # stopped) outside the time taken; neither shares the daemon's interpreter lock
        os.sync()
        started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            probe = stack.enter_context(healthz_probe(url)) if probed else None
            submit = stack.enter_context(submitter(url, token, document))
            figures["seconds"] = submit()
            if probe is not None:
                figures.update(probe())
        figures["with_start"] = time.perf_counter() - started  # the processes' starts too
    return figures


def verification(
    table: Table, work: Path, round_no: int, source: bp.Source, creates: list[bp.Step]
) -> None:
    """The submission alone and, on a daemon of its own, beside a back-to-back probe.

    ``verify_10k`` is the submission alone: the probe's polls each take the interpreter
    lock from the verifying worker (about 0.2 ms a poll, over 1000 polls a submission), so
    a probed submission measures the probe's load as much as the verification. That
    figure is kept (``verify_10k.beside_probe``), and ``/healthz`` is measured there.
    """
    here = work / f"verify{round_no}"
    alone = here / "alone"
    blobs = [s.new for s in creates if s.new is not None]
    figures: dict[str, dict[str, float]] = {}
    bundle: dict[str, Any] = {}

    def baseline() -> None:
        for data in blobs:
            sha256_hex((alone / "state" / "audit" / blob_path(sha256_hex(data))).read_bytes())
        sha256_hex(rfc8785.dumps(bundle))

    order = [("alone", False), ("probed", True)]
    for name, probed in order if round_no % 2 == 0 else order[::-1]:
        figures[name] = _submission(here / name, source, creates, probed=probed)
    bundle.update(json.loads((alone / "bundle.json").read_text()))
    seconds = _alternate(round_no, [("baseline", baseline)])
    table.add("verify_10k", figures["alone"]["seconds"] / seconds["baseline"])
    table.note("verify_10k.seconds", figures["alone"]["seconds"])
    table.note("verify_10k.baseline_seconds", seconds["baseline"])
    table.note("verify_10k.beside_probe", figures["probed"]["seconds"] / seconds["baseline"])
    table.note("verify_10k.beside_probe_seconds", figures["probed"]["seconds"])
    table.note("verify_10k.seconds_with_probe_start", figures["probed"]["with_start"])
    table.add("healthz_during_verify_10k", figures["probed"]["max_ms"])
    table.note("healthz_during_verify_10k.median_ms", figures["probed"]["median_ms"])
    table.note("healthz_during_verify_10k.polls", figures["probed"]["polls"])
    # kept until the run ends (see the module docstring: deleted inodes)


def cli_start(table: Table, round_no: int) -> None:
    python = sys.executable
    seconds = _alternate(
        round_no,
        [
            (
                "help",
                lambda: subprocess.run(
                    [python, "-m", "promoter.cli.main", "--help"],
                    check=True,
                    capture_output=True,
                    timeout=120,
                ),
            ),
            ("python", lambda: subprocess.run([python, "-c", "pass"], check=True, timeout=60)),
        ],
    )
    table.add("cli_help", seconds["help"])
    table.note("cli_help.ratio_over_bare_python", seconds["help"] / seconds["python"])


# --- running and reporting --------------------------------------------------------------------


def _creates(count: int, size: int) -> list[bp.Step]:
    rng = random.Random(11)
    return [
        bp.Step(f"verify/d{i // 100:03d}/c{i:05d}.txt", None, bp._text(rng, size))
        for i in range(count)
    ]


def run(
    rounds: int = 3,
    size: int = 4096,
    *,
    big_files: int = 1150,
    small_files: int = 115,
    verify_changes: int = 10_000,
    full: bool = False,
    builder: bool = bool(os.environ.get("PROMOTER_BENCH_BUILDER")),
) -> dict[str, Any]:
    """Every row ``rounds`` times, interleaved; the medians and every sample."""
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-table-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        big = bp.make_workload(big_files, size)
        small = bp.make_workload(small_files, size)
        for name in ("big", "small", "t-big", "t-small"):
            (work / name).mkdir()
        big_source = bp.make_source(work / "big", big)
        small_source = bp.make_source(work / "small", small)
        big_template, _, _ = bp.make_blob_template(work / "t-big", big)
        small_template, _, _ = bp.make_blob_template(work / "t-small", small)
        creates = _creates(verify_changes, 64)
        table = Table()
        load_before = os.getloadavg()
        rows: list[Callable[[int], None]] = [
            lambda r: http_flow(table, work, r, big_source, big),
            lambda r: http_flow(table, work, r, big_source, big, separate=False),
            lambda r: promotion(table, "promote_1150", work, r, big_source, big, big_template),
            lambda r: promotion(table, "promote_115", work, r, small_source, small, small_template),
            lambda r: verification(table, work, r, small_source, creates),
            lambda r: cli_start(table, r),
            lambda r: rows_fswrite.rss_promote(table, work, r),
        ]
        if full or builder:  # long: a 100k-file repository and 1 GiB of new content
            made = rows_builder.prepare(work)
            rows += [lambda r: rows_builder.build_1_in_100k(table, made, r)]
            rows += [lambda r: rows_builder.build_1gib(table, made, r)]
        with contextlib.ExitStack() as stack:
            if full:  # long: 100k-file repositories, nested and flat
                rows += rows_gitcost.rows(table, work, stack)
            for round_no in range(rounds):
                for step in rows[round_no % len(rows) :] + rows[: round_no % len(rows)]:
                    step(round_no)
        load_after = os.getloadavg()
    finally:
        if not os.environ.get("PROMOTER_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return {
        "rounds": rounds,
        "cpus": os.cpu_count() or 1,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "filesystem": bp.filesystem_of(work.parent),
        "rows": {
            row: {
                "median": statistics.median(values),
                "samples": values,
                "goal": GOALS[row][0],
                "unit": GOALS[row][1],
                "met": statistics.median(values) <= GOALS[row][0],
            }
            for row, values in table.samples.items()
        },
        "details": {key: statistics.median(values) for key, values in table.extra.items()},
    }


def format_result(result: dict[str, Any]) -> str:
    lines = [
        f"speed table: median of {result['rounds']} interleaved rounds; {result['cpus']} CPUs, "
        f"load average {result['load_average_before'][0]} -> {result['load_average_after'][0]}; "
        f"{result['filesystem']}",
        f"  {'measure':<50} {'median':>9} {'goal':>8}  verdict  samples",
    ]
    for row, label in LABELS.items():
        if row not in result["rows"]:
            continue
        figure = result["rows"][row]
        unit = figure["unit"]
        samples = ", ".join(f"{s:.3g}" for s in figure["samples"])
        lines.append(
            f"  {label:<50} {figure['median']:8.3g}{unit:<1} {figure['goal']:7.3g}{unit:<1}  "
            f"{'met' if figure['met'] else 'MISSED':<7}  {samples}"
        )
    lines.append("  details (medians):")
    lines += [f"    {key}: {value:.4g}" for key, value in sorted(result["details"].items())]
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_result(run()))
