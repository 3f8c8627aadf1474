"""The speed table: each row a ratio measured side by side, median of interleaved rounds.

Every round runs every row once (a row's variants in an order that rotates with the
round), so a machine that gets busier mid-run slows every row alike; each row reports
the median of its per-round figures. The rows:

- ``http_flow_1150``: the whole flow over HTTP against a real daemon on a loopback
  port (grant, executor token, blob upload, bundle submit + verification, lease,
  ``POST /v1/promotions`` with ``wait``), 1150 small files, over the bare per-file
  durable-write loop (``bench.workload.bare_loop``) on an identical copy. The daemon is
  ``promoter serve`` in its own process, as deployed; the same flow against a daemon in
  the client's own interpreter (sharing its lock) is reported next to it
  (``http_flow_1150.in_process``), as is the upload's share of the flow.
- ``promote_1150``, ``promote_115``: promotion alone (``request_promotion`` until the
  operation completed, in-process, with the garbage collector tuned as ``promoter
  serve`` tunes it; blobs, grant, lease and first verification before) over the bare
  loop. Each promotion is its daemon's first, as after a start; beside them, the same
  promotion on a daemon that has already promoted the same workload into another copy
  (``prepared.prepare_promoter``'s ``warm_copy``) is a detail (``promote_115.warm``, its
  ratio over the same bare loop): the difference is what a daemon pays once after it
  starts (statements compiled, database pages read), not per promotion. The processor
  time of the first promotion and of the bare loop, user and system apart, per change in
  microseconds, is a detail too (``promote_115.user_us_per_change``,
  ``promote_115.bare_system_us_per_change``, …): where the two differ, and by whose time.
  After every timed run of a round, the first promotion is rolled back, timed, and its
  copy checked back at the base: the seconds and their ratio over the promotion are
  details (``promote_1150.rollback_seconds``, ``promote_1150.rollback_over_promotion``).
- ``promote_1150_syncfs``: the same first promotion of ``promote_1150`` (one more variant
  in its rounds, the same timed promotion) over ``bench.workload.bare_syncfs`` of the
  same change on an identical copy: every temp written, renamed or unlinked with no
  flush, then one ``syncfs`` of the filesystem, the cheapest durable write of a group.
  The processor time of both, user plus system, per change in microseconds, is a
  detail (``promote_1150_syncfs.cpu_us_per_change``, ``….syncfs_cpu_us_per_change``);
  the kernel's writeback after a ``syncfs`` runs in its flusher threads, charged to
  neither, while an ``fsync`` writes back in the caller's time.
- ``promote_11500_syncfs`` (with ``full`` only: a round takes several minutes, most of
  it making the copies, the blobs and the verified bundle of 11 500 changes): the same
  at ten times the size, promotion and ``bare_syncfs`` alone (no bare loop, no warm
  daemon).
- ``verify_10k``: the first ``POST /v1/bundles`` of a 10 000-change bundle to a fresh
  daemon (timed by a client process of its own, started before it is timed) over
  re-hashing every blob plus JCS of the bundle.
- ``healthz_during_verify_10k``: the largest ``/healthz`` latency (milliseconds, not a
  ratio) seen by a client polling it back to back while a second daemon verifies the
  same bundle; that submission's ratio is a detail (``verify_10k.beside_probe``).
- ``cli_help``: ``promoter --help`` start (seconds, absolute goal), and its ratio over a
  bare ``python -c pass``.
- ``flow_1``: a 1-file flow (upload, submit, promotion) over a bare 1-file durable write,
  printed as a detail (its goal retired: ``flow_1_one_request`` is judged instead),
  with its flushes, git processes and processor time; ``flow_10``: an agent-sized change
  (7 files modified, 3 created) over ``git apply`` + ``sync``, and ``flow_10_promotion``
  its promotion alone over the same; see ``bench.rows_fixed``.
- ``flow_1_one_request`` (and ``_cpu``, ``_flushes``): a 1-file flow in one request
  (``bench.rows_one_request``) over the serving stack's floor for one request; its daemon
  processor time and its flushes, the three-request flow's beside them.
- ``flow_agent_one_request``: changes of 5-17 files to a click-like project, each in one
  request, over ``git apply`` of the same patch + ``sync``; see ``bench.rows_agent``.
- ``promotions_workers_2_over_1``: promotions of 8 clients into 8 repositories against
  ``promoter serve --workers 2`` over the same against ``--workers 1``, time over time
  (``bench.rows_workers``).
- ``build_1_in_100k``, ``build_1gib`` (only with ``PROMOTER_BENCH_BUILDER=1``, they are
  long): the bundle builder, see ``bench.rows_builder``.

The rows of ``bench.rows_layers`` (layered sandboxes of ``promoter run``: ready time
and own disk at 10 000 files against 10, a run against a bare worktree loop) join every
run's rounds, at 100 000 files with ``full``, and so do those of ``bench.rows_run_small``
(``promoter run --yes`` of a 10-file edit on a 166-file project against the worktree
loop: wall and CPU). With ``full`` (``--full`` in
``bench.run``) the rows of ``bench.rows_gitcost`` join the rounds: a 1-file promotion
in a 100k-file repository (nested, with snapshots, flat) over the same in a 10-file
one, and the nested one's processor time (``promote_1_in_100k_cpu``); they build their
repositories once per run.

A row's files stay until the whole run ends. On ext4 without a journal (this kind of
machine's disk) the kernel does not reuse an inode freed in the last 30 seconds, and it
finds that out inode by inode on every allocation: a tree deleted between rows makes
every file created after it, promoter's and the bare loop's, pay for each inode freed,
by whichever variant happens to share a block group with it.

``python -m bench.bench_table`` prints the table; with ``--rows`` only the rows named
(``SOME_ROWS``: the write path's ``rss_promote_4x256mib``, ``promote_1150``,
``promote_1150_syncfs``, ``promote_115``, ``promote_11500_syncfs``, ``flow_1``, ``flow_10``,
``flow_10_promotion``, the ``flow_1_one_request`` rows, ``flow_agent_one_request``,
``promotions_workers_2_over_1``, the ``promote_1_in_100k`` rows (only the pairs named,
their repositories alone), and the builder's ``build_1_in_100k`` and ``build_1gib``, no
``PROMOTER_BENCH_BUILDER`` needed), for
``--rounds`` rounds; a row named alone brings only the variants it needs
(``promote_1150_syncfs`` without the bare loop and the warm daemon); a name it does not
know stops it.

What this does not do: gate anything (the exit status is 0 whatever the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import documents as bd
from bench import prepared as pp
from bench import (
    rows_agent,
    rows_builder,
    rows_fixed,
    rows_fswrite,
    rows_gitcost,
    rows_layers,
    rows_one_request,
    rows_run_small,
    rows_verify,
    rows_workers,
    variables,
)
from bench import workload as wl
from bench.harness import (
    Table,
    alternate,
    daemon,
    daemon_process,
    upload,
)
from promoter.api import gc_policy
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex

# row -> (goal, unit): a ratio goal unless the unit says otherwise
GOALS: dict[str, tuple[float, str]] = {
    "http_flow_1150": (2.0, "x"),
    "promote_1150": (1.0, "x"),
    "promote_115": (1.2, "x"),
    "promote_1150_syncfs": (1.5, "x"),
    "promote_11500_syncfs": (2.0, "x"),  # with full=True only: long
    "verify_10k": (1.5, "x"),
    "healthz_during_verify_10k": (50.0, "ms"),
    "cli_help": (0.3, "s"),
    **rows_fixed.GOALS,
    **rows_one_request.GOALS,
    **rows_agent.GOALS,
    **rows_workers.GOALS,
    **rows_fswrite.GOALS,
    **rows_builder.BUILDER_GOALS,  # with full=True only, as the next: 100k-file repositories
    **rows_gitcost.GOALS,
    **rows_layers.GOALS,  # 10k files; 100k with full=True
    **rows_run_small.GOALS,
}
LABELS = {
    "http_flow_1150": "full HTTP flow, 1150 files, vs bare durable loop",
    "promote_1150": "promotion alone, 1150 changes, vs bare loop",
    "promote_115": "promotion alone, 115 changes, vs bare loop",
    "promote_1150_syncfs": "promotion alone, 1150 changes, vs batched syncfs",
    "promote_11500_syncfs": "promotion alone, 11,500 changes, vs batched syncfs",
    "verify_10k": "verification, 10k changes, vs re-hash + JCS",
    "healthz_during_verify_10k": "/healthz max latency during a 10k verification",
    "cli_help": "promoter --help start",
    **rows_fixed.LABELS,
    **rows_one_request.LABELS,
    **rows_agent.LABELS,
    **rows_workers.LABELS,
    **rows_fswrite.LABELS,
    **rows_builder.BUILDER_LABELS,
    **rows_gitcost.LABELS,
    **rows_layers.LABELS,
    **rows_run_small.LABELS,
}

# the rows ``--rows`` can name (``some_rows``)
SOME_ROWS = (
    "rss_promote_4x256mib",
    "promote_1150",
    "promote_1150_syncfs",
    "promote_115",
    "promote_11500_syncfs",
    "flow_1",
    "flow_10",
    "flow_10_promotion",
    "flow_1_one_request",
    "flow_1_one_request_cpu",
    "flow_1_one_request_flushes",
    "flow_agent_one_request",
    "promotions_workers_2_over_1",
    "promote_1_in_100k",
    "promote_1_in_100k_cpu",
    "promote_1_in_100k_snapshots",
    "promote_1_in_100k_flat",
    "build_1_in_100k",
    "build_1gib",
)


# --- the rows ---------------------------------------------------------------------------------


@contextmanager
def _flow_daemon(state_dir: Path, repo: Path, separate: bool) -> Iterator[tuple[str, str, str]]:
    if separate:
        with daemon_process(state_dir, repo) as answer:
            yield answer
        return
    with daemon(state_dir, repo) as (url, services):
        identity = services.registry.by_name(bd.REPO_NAME).identity
        yield url, services.tokens["orchestrator"], identity


def http_flow(
    table: Table,
    work: Path,
    round_no: int,
    source: wl.Source,
    workload: wl.Workload,
    *,
    separate: bool = True,
) -> None:
    """The flow against a daemon in its own process (``separate``), or in this one."""
    here = work / f"http{round_no}{'' if separate else '-in-process'}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    bare = wl.copy_repo(source.path, here / "bare")
    blobs = pp.blobs_of(workload)
    phases: dict[str, float] = {}
    with _flow_daemon(here / "state", ours, separate) as (url, orchestrator, identity):
        grant = bd.grant_document(
            identity, source.base_commit, source.base_tree, max_changes=len(workload.steps) + 10
        )

        def flow() -> None:
            started = time.perf_counter()
            with PromoterClient(url, orchestrator, timeout=3600) as orch:
                registered = orch.register_grant(grant)
                token = orch.mint_executor_token(bd.RUN_ID)["token"]
                bundle = bd.bundle_document(
                    grant, registered["grant_sha256"], bd.step_changes(workload.steps)
                )
                with orch.with_token(token) as executor:
                    missing = set(executor.blobs_missing(sha256_hex(b) for b in blobs))
                    upload(executor, [b for b in blobs if sha256_hex(b) in missing])
                    phases["upload"] = time.perf_counter() - started
                    submitted = executor.submit_bundle(bundle)
                orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
                receipt = submitted["verification_receipt"]["receipt_sha256"]
                done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                if done.get("status") != "completed":
                    raise AssertionError(f"the promotion ended {done.get('status')}: {done}")

        seconds = alternate(
            round_no, [("flow", flow), ("bare", lambda: wl.bare_loop(bare, workload.steps))]
        )
    wl.check_tree(ours, workload.target, "http flow")
    wl.check_tree(bare, workload.target, "bare loop")
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
    source: wl.Source,
    workload: wl.Workload,
    template: Path,
    *,
    loop: bool = True,
    syncfs_row: str | None = None,
) -> None:
    """A first promotion beside its baselines, alternating: the bare loop and a warm daemon
    (``loop``, the row ``row``), one batched ``syncfs`` write (``syncfs_row``)."""
    here = work / f"{row}-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    prepared = pp.prepare_promoter(ours, here / "state", source, workload, template)
    done: dict[str, str] = {}
    runs: list[tuple[str, Callable[[], object]]] = [
        ("promoter", lambda: done.setdefault("cold", pp.promote_once(prepared)))
    ]
    copies = {"promoter": ours}
    if loop:
        warm = copies["warm"] = wl.copy_repo(source.path, here / "promoter-warm")
        bare = copies["bare"] = wl.copy_repo(source.path, here / "bare")
        warmed = pp.prepare_promoter(
            warm,
            here / "state-warm",
            source,
            workload,
            template,
            warm_copy=wl.copy_repo(source.path, here / "warm-up"),
        )
        runs += [
            ("bare", lambda: wl.bare_loop(bare, workload.steps)),
            ("warm", lambda: done.setdefault("warm", pp.promote_once(warmed))),
        ]
    if syncfs_row is not None:
        batched = copies["syncfs"] = wl.copy_repo(source.path, here / "syncfs")
        runs.append(("syncfs", lambda: wl.bare_syncfs(batched, workload.steps)))
    cpu: dict[str, tuple[float, float]] = {}
    previous = gc_policy.tune_for_serving()  # the collector as ``promoter serve`` sets it
    try:
        seconds = alternate(round_no, runs, cpu)
    finally:
        gc_policy.restore(previous)
    for variant, copy in copies.items():
        wl.check_tree(copy, workload.target, f"{row} ({variant})")
    if loop:  # undoing the first promotion, timed beside it (after every timed run)
        rolled_back = pp.finish_with_rollback(prepared, done["cold"])
        wl.check_tree(ours, workload.base, f"{row} (rolled back)")
        table.note(f"{row}.rollback_seconds", rolled_back)
        table.note(f"{row}.rollback_over_promotion", rolled_back / seconds["promoter"])
    else:
        pp.finish_promoter(prepared, done["cold"])
    if loop:
        pp.finish_promoter(warmed, done["warm"])
    # kept until the run ends (see the module docstring: deleted inodes)
    changes = len(workload.steps)  # processor time a change, microseconds
    if syncfs_row is not None:
        table.add(syncfs_row, seconds["promoter"] / seconds["syncfs"])
        table.note(f"{syncfs_row}.seconds", seconds["promoter"])
        table.note(f"{syncfs_row}.syncfs_seconds", seconds["syncfs"])
        for variant, key in (("promoter", ""), ("syncfs", "syncfs_")):
            table.note(f"{syncfs_row}.{key}cpu_us_per_change", 1e6 * sum(cpu[variant]) / changes)
    if not loop:
        return
    table.add(row, seconds["promoter"] / seconds["bare"])
    table.note(f"{row}.seconds", seconds["promoter"])
    table.note(f"{row}.bare_seconds", seconds["bare"])
    table.note(f"{row}.warm", seconds["warm"] / seconds["bare"])
    table.note(f"{row}.warm_seconds", seconds["warm"])
    for variant, key in (("promoter", ""), ("bare", "bare_")):
        user, system = cpu[variant]
        table.note(f"{row}.{key}user_us_per_change", 1e6 * user / changes)
        table.note(f"{row}.{key}system_us_per_change", 1e6 * system / changes)


def cli_start(table: Table, round_no: int) -> None:
    python = sys.executable
    seconds = alternate(
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


SYNCFS = "promote_1150_syncfs"  # measured beside ``promote_1150``, the same promotion


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
        big = wl.make_workload(big_files, size)
        small = wl.make_workload(small_files, size)
        for name in ("big", "small", "t-big", "t-small"):
            (work / name).mkdir()
        big_source = wl.make_source(work / "big", big)
        small_source = wl.make_source(work / "small", small)
        (work / "agent").mkdir()
        click_source = rows_agent.make_source(work / "agent")
        big_template, _, _ = pp.make_blob_template(work / "t-big", big)
        small_template, _, _ = pp.make_blob_template(work / "t-small", small)
        creates = rows_verify.creates(verify_changes, 64)
        table = Table()
        load_before = os.getloadavg()
        rows: list[Callable[[int], None]] = [
            lambda r: http_flow(table, work, r, big_source, big),
            lambda r: http_flow(table, work, r, big_source, big, separate=False),
            _promotion_row(
                table, "promote_1150", work, big_source, big, big_template, syncfs_row=SYNCFS
            ),
            lambda r: promotion(table, "promote_115", work, r, small_source, small, small_template),
            lambda r: rows_verify.verification(table, work, r, small_source, creates),
            lambda r: cli_start(table, r),
            lambda r: rows_fswrite.rss_promote(table, work, r),
            lambda r: rows_fixed.flow_1(table, work, r, small_source),
            lambda r: rows_fixed.flow_10(table, work, r, small_source),
            lambda r: rows_one_request.flow_1_one_request(table, work, r, small_source),
            lambda r: rows_agent.flow_agent_one_request(table, work, r, click_source),
            lambda r: rows_workers.promotions_workers(table, work, r, small_source),
        ]
        if full or builder:  # long: a 100k-file repository and 1 GiB of new content
            made = rows_builder.prepare(work)
            rows += [lambda r: rows_builder.build_1_in_100k(table, made, r)]
            rows += [lambda r: rows_builder.build_1gib(table, made, r)]
        if full:  # long: 11,500 changes (see ``promote_11500_syncfs`` above)
            rows.append(
                _made_row(table, work, 11_500, loop=False, syncfs_row="promote_11500_syncfs")
            )
        with contextlib.ExitStack() as stack:
            if full:  # long: 100k-file repositories, nested and flat
                rows += rows_gitcost.rows(table, work, stack)
            rows += rows_layers.rows(table, work, stack, full=full)
            rows += rows_run_small.rows(table, work, stack)
            for round_no in range(rounds):
                for step in rows[round_no % len(rows) :] + rows[: round_no % len(rows)]:
                    step(round_no)
        load_after = os.getloadavg()
    finally:
        if not os.environ.get("PROMOTER_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return _result(table, rounds, load_before, load_after, work)


def _result(
    table: Table,
    rounds: int,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    work: Path,
) -> dict[str, Any]:
    return {
        "rounds": rounds,
        "cpus": os.cpu_count() or 1,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "filesystem": wl.filesystem_of(work.parent),
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


def some_rows(wanted: set[str], rounds: int = 3) -> dict[str, Any]:
    """Only the rows named in ``wanted`` (``SOME_ROWS``), interleaved for
    ``rounds`` rounds. A row measured beside another (``promote_1150_syncfs`` beside
    ``promote_1150``, ``flow_10_promotion`` in ``flow_10``) brings only what it needs."""
    unknown = wanted - set(SOME_ROWS)
    if unknown:
        raise ValueError(f"not rows --rows can run: {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="promoter-bench-fswrite-"))
    try:
        with contextlib.ExitStack() as stack:
            return _some_rows(wanted, rounds, work, stack)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _some_rows(
    wanted: set[str], rounds: int, work: Path, stack: contextlib.ExitStack
) -> dict[str, Any]:
    table = Table()
    rows: list[Callable[[int], None]] = []
    for files in (1150, 115, 11_500):
        name, syncfs_row = f"promote_{files}", f"promote_{files}_syncfs"
        loop = name in wanted
        if not (loop or syncfs_row in wanted):
            continue
        syncfs = syncfs_row if syncfs_row in wanted else None
        rows.append(_made_row(table, work, files, loop=loop, syncfs_row=syncfs))
    if "rss_promote_4x256mib" in wanted:
        rows.append(lambda r: rows_fswrite.rss_promote(table, work, r))
    if "flow_1" in wanted:
        (work / "flow_1").mkdir()
        flow_source = wl.make_source(work / "flow_1", wl.make_workload(115, 4096))
        rows.append(lambda r: rows_fixed.flow_1(table, work, r, flow_source))
    if wanted & {"flow_10", "flow_10_promotion"}:
        (work / "flow_10").mkdir()
        agent_source = wl.make_source(work / "flow_10", wl.make_workload(115, 4096))
        rows.append(lambda r: rows_fixed.flow_10(table, work, r, agent_source))
    if wanted & set(rows_one_request.GOALS):
        (work / "one_request").mkdir()
        one_source = wl.make_source(work / "one_request", wl.make_workload(115, 4096))
        rows.append(lambda r: rows_one_request.flow_1_one_request(table, work, r, one_source))
    if wanted & set(rows_agent.GOALS):
        (work / "agent").mkdir()
        click_source = rows_agent.make_source(work / "agent")
        rows.append(lambda r: rows_agent.flow_agent_one_request(table, work, r, click_source))
    if wanted & set(rows_workers.GOALS):
        (work / "workers").mkdir()
        workers_source = wl.make_source(work / "workers", wl.make_workload(115, 4096))
        rows.append(lambda r: rows_workers.promotions_workers(table, work, r, workers_source))
    if wanted & {"build_1_in_100k", "build_1gib"}:
        made = rows_builder.prepare(work, big="build_1gib" in wanted)
        if "build_1_in_100k" in wanted:
            rows.append(lambda r: rows_builder.build_1_in_100k(table, made, r))
        if "build_1gib" in wanted:
            rows.append(lambda r: rows_builder.build_1gib(table, made, r))
    if wanted & set(rows_gitcost.GOALS):  # only the pairs named, their repositories
        rows += rows_gitcost.rows(table, work, stack, wanted=wanted)
    load_before = os.getloadavg()
    for round_no in range(rounds):
        for step in rows[round_no % len(rows) :] + rows[: round_no % len(rows)]:
            step(round_no)
    return _result(table, rounds, load_before, os.getloadavg(), work)


def _made_row(
    table: Table, work: Path, files: int, *, loop: bool, syncfs_row: str | None
) -> Callable[[int], None]:
    """A ``promotion`` row of ``files`` changes, its workload, source and blobs made here."""
    name = f"promote_{files}"
    load = wl.make_workload(files, 4096)
    (work / name).mkdir()
    (work / f"t-{name}").mkdir()
    source = wl.make_source(work / name, load)
    template, _, _ = pp.make_blob_template(work / f"t-{name}", load)
    return _promotion_row(table, name, work, source, load, template, loop, syncfs_row)


def _promotion_row(
    table: Table,
    name: str,
    work: Path,
    source: wl.Source,
    load: wl.Workload,
    t: Path,
    loop: bool = True,
    syncfs_row: str | None = None,
) -> Callable[[int], None]:
    return lambda round_no: promotion(
        table, name, work, round_no, source, load, t, loop=loop, syncfs_row=syncfs_row
    )


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


def main(argv: list[str] | None = None) -> int:
    variables.stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    parser = argparse.ArgumentParser(description="The speed table, or only some of its rows.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--rows", help=f"comma-separated, of {', '.join(SOME_ROWS)} (default: the whole table)"
    )
    args = parser.parse_args(argv)
    if args.rows is None:
        print(format_result(run(args.rounds)))
        return 0
    wanted = set(args.rows.split(","))
    if wanted - set(SOME_ROWS):
        parser.error(f"not rows --rows can run: {', '.join(sorted(wanted - set(SOME_ROWS)))}")
    print(format_result(some_rows(wanted, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
