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
- ``verify_10k``: the first ``POST /v1/bundles`` of a 10 000-change bundle to a fresh
  daemon (timed by a client process of its own, started before it is timed) over
  re-hashing every blob plus JCS of the bundle.
- ``healthz_during_verify_10k``: the largest ``/healthz`` latency (milliseconds, not a
  ratio) seen by a client polling it back to back while a second daemon verifies the
  same bundle; that submission's ratio is a detail (``verify_10k.beside_probe``).
- ``cli_help``: ``promoter --help`` start (seconds, absolute goal), and its ratio over a
  bare ``python -c pass``.
- ``flow_1``: a 1-file flow (upload, submit, promotion) over a bare 1-file durable write,
  with its flushes, git processes and processor time; ``flow_10``: a 10-file change over
  ``git apply`` + ``sync``; see ``bench.rows_fixed``.
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

``python -m bench.bench_table`` prints the table; with ``--rows`` only the rows named of
the write path's (``rss_promote_4x256mib``, ``promote_1150``, ``promote_115``,
``flow_1``, ``flow_10``) and the builder's (``build_1_in_100k``, ``build_1gib``; no
``PROMOTER_BENCH_BUILDER`` needed), for ``--rounds`` rounds; a name it does not know
stops it. ``flow_1`` and ``flow_10`` are
``bench.rows_fixed``'s: a 1-file flow's time, flushes and git processes, and a 10-file
change beside ``git apply`` + ``sync``.

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
from bench import rows_builder, rows_fixed, rows_fswrite, rows_gitcost, rows_verify
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
    "verify_10k": (1.5, "x"),
    "healthz_during_verify_10k": (50.0, "ms"),
    "cli_help": (0.3, "s"),
    **rows_fixed.GOALS,
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
    **rows_fixed.LABELS,
    **rows_fswrite.LABELS,
    **rows_builder.BUILDER_LABELS,
    **rows_gitcost.LABELS,
}


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
) -> None:
    here = work / f"{row}-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    warm = wl.copy_repo(source.path, here / "promoter-warm")
    bare = wl.copy_repo(source.path, here / "bare")
    prepared = pp.prepare_promoter(ours, here / "state", source, workload, template)
    warmed = pp.prepare_promoter(
        warm,
        here / "state-warm",
        source,
        workload,
        template,
        warm_copy=wl.copy_repo(source.path, here / "warm-up"),
    )
    done: dict[str, str] = {}
    cpu: dict[str, tuple[float, float]] = {}
    previous = gc_policy.tune_for_serving()  # the collector as ``promoter serve`` sets it
    try:
        seconds = alternate(
            round_no,
            [
                ("promoter", lambda: done.setdefault("cold", pp.promote_once(prepared))),
                ("bare", lambda: wl.bare_loop(bare, workload.steps)),
                ("warm", lambda: done.setdefault("warm", pp.promote_once(warmed))),
            ],
            cpu,
        )
    finally:
        gc_policy.restore(previous)
    pp.finish_promoter(prepared, done["cold"])
    pp.finish_promoter(warmed, done["warm"])
    wl.check_tree(ours, workload.target, row)
    wl.check_tree(warm, workload.target, f"{row} (warm daemon)")
    wl.check_tree(bare, workload.target, "bare loop")
    table.add(row, seconds["promoter"] / seconds["bare"])
    table.note(f"{row}.seconds", seconds["promoter"])
    table.note(f"{row}.bare_seconds", seconds["bare"])
    table.note(f"{row}.warm", seconds["warm"] / seconds["bare"])
    table.note(f"{row}.warm_seconds", seconds["warm"])
    changes = len(workload.steps)  # processor time a change, microseconds: user, system
    for variant, key in (("promoter", ""), ("bare", "bare_")):
        user, system = cpu[variant]
        table.note(f"{row}.{key}user_us_per_change", 1e6 * user / changes)
        table.note(f"{row}.{key}system_us_per_change", 1e6 * system / changes)
    # kept until the run ends (see the module docstring: deleted inodes)


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
        big_template, _, _ = pp.make_blob_template(work / "t-big", big)
        small_template, _, _ = pp.make_blob_template(work / "t-small", small)
        creates = rows_verify.creates(verify_changes, 64)
        table = Table()
        load_before = os.getloadavg()
        rows: list[Callable[[int], None]] = [
            lambda r: http_flow(table, work, r, big_source, big),
            lambda r: http_flow(table, work, r, big_source, big, separate=False),
            lambda r: promotion(table, "promote_1150", work, r, big_source, big, big_template),
            lambda r: promotion(table, "promote_115", work, r, small_source, small, small_template),
            lambda r: rows_verify.verification(table, work, r, small_source, creates),
            lambda r: cli_start(table, r),
            lambda r: rows_fswrite.rss_promote(table, work, r),
            lambda r: rows_fixed.flow_1(table, work, r, small_source),
            lambda r: rows_fixed.flow_10(table, work, r, small_source),
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


SOME_ROWS = (
    "rss_promote_4x256mib",
    "promote_1150",
    "promote_115",
    "flow_1",
    "flow_10",
    "build_1_in_100k",
    "build_1gib",
)


def some_rows(wanted: set[str], rounds: int = 3) -> dict[str, Any]:
    """Only the rows named in ``wanted`` (of ``SOME_ROWS``), interleaved for ``rounds``
    rounds."""
    unknown = wanted - set(SOME_ROWS)
    if unknown:
        raise SystemExit(f"--rows does not know {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="promoter-bench-fswrite-"))
    try:
        table = Table()
        rows: list[Callable[[int], None]] = []
        for name, files in (("promote_1150", 1150), ("promote_115", 115)):
            if name not in wanted:
                continue
            load = wl.make_workload(files, 4096)
            (work / name).mkdir()
            (work / f"t-{name}").mkdir()
            source = wl.make_source(work / name, load)
            template, _, _ = pp.make_blob_template(work / f"t-{name}", load)
            rows.append(_promotion_row(table, name, work, source, load, template))
        if "rss_promote_4x256mib" in wanted:
            rows.append(lambda r: rows_fswrite.rss_promote(table, work, r))
        if "flow_1" in wanted:
            (work / "flow_1").mkdir()
            flow_source = wl.make_source(work / "flow_1", wl.make_workload(115, 4096))
            rows.append(lambda r: rows_fixed.flow_1(table, work, r, flow_source))
        if "flow_10" in wanted:
            (work / "flow_10").mkdir()
            agent_source = wl.make_source(work / "flow_10", wl.make_workload(115, 4096))
            rows.append(lambda r: rows_fixed.flow_10(table, work, r, agent_source))
        if wanted & {"build_1_in_100k", "build_1gib"}:
            made = rows_builder.prepare(work, big="build_1gib" in wanted)
            if "build_1_in_100k" in wanted:
                rows.append(lambda r: rows_builder.build_1_in_100k(table, made, r))
            if "build_1gib" in wanted:
                rows.append(lambda r: rows_builder.build_1gib(table, made, r))
        load_before = os.getloadavg()
        for round_no in range(rounds):
            for step in rows[round_no % len(rows) :] + rows[: round_no % len(rows)]:
                step(round_no)
        return _result(table, rounds, load_before, os.getloadavg(), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _promotion_row(
    table: Table, name: str, work: Path, source: wl.Source, load: wl.Workload, t: Path
) -> Callable[[int], None]:
    return lambda round_no: promotion(table, name, work, round_no, source, load, t)


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
    parser = argparse.ArgumentParser(description="The speed table, or only some of its rows.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--rows",
        help=f"comma-separated, of {', '.join(SOME_ROWS)} (default: the whole table)",
    )
    args = parser.parse_args(argv)
    if args.rows is None:
        print(format_result(run(args.rounds)))
    else:
        print(format_result(some_rows(set(args.rows.split(",")), args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
