"""Where a promotion's time goes, phase by phase, without a profiler's overhead.

``python -m bench.promote_phases --files 115 --rounds 11`` times the same promotion as the
table's ``promote_115`` row (``bench.prepared``, in the requesting thread) on two daemons
per round (both after the start-up rehearsal, as ``bench.prepared`` makes them): one
whose first promotion it is, and one that has promoted the same workload into another
copy before (``warm_copy``); the bare durable loop runs beside them, the
three in an order that rotates with the round. Each phase is timed by wrapping the
function that does it where the promotion looks it up (``PHASES``), with
``time.perf_counter`` and nothing else; the SQL statements compiled during the promotion
are counted and timed the same way (a warm daemon finds them in its statement cache).
It prints the median of every phase for both daemons, in milliseconds.

Deliberately not here: the ratios and goals (``bench.bench_table``), cProfile
(``bench.promote_profile``), and any change to what is timed: the wrappers only add up.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.sql.compiler import Compiled

from bench import prepared as pp
from bench import workload as wl
from bench.harness import alternate
from bench.variables import stop_on_unknown
from promoter.api import gc_policy

# label -> (module, attribute): the functions whose calls are added up, where looked up
PHASES: tuple[tuple[str, str, str], ...] = (
    ("whole attempt", "promoter.engine.operation.promote", "run"),
    ("evidence re-check", "promoter.engine.operation.promote", "recheck_evidence"),
    ("repository lock", "promoter.fs.lock", "RepoLock.acquire"),
    ("read-back under the lock", "promoter.engine.operation.promote", "read_back"),
    ("plan's transaction", "promoter.engine.operation.promote", "_journal"),
    ("temps (written, synced, named)", "promoter.engine.operation.promote", "stage_temps"),
    ("replaces", "promoter.engine.operation.apply", "Applier.place"),
    ("removals", "promoter.engine.operation.apply", "Applier.remove"),
    ("directories' sync", "promoter.engine.operation.apply", "Applier.fsync"),
    ("final read-back", "promoter.engine.operation.outcome", "read_targets"),
    ("receipt, its transactions and audit file", "promoter.engine.operation.outcome", "complete"),
)
COMPILED = "SQL statements compiled"


@contextmanager
def timed(spent: dict[str, float], counted: dict[str, int]) -> Iterator[None]:
    """Every phase's function (and SQL compilation) wrapped to add its seconds to
    ``spent`` and its calls to ``counted``; the originals are put back on exit."""
    undo: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - started
                counted[label] += 1

        undo.append((owner, name, original))
        setattr(owner, name, timed_call)

    try:
        for label, module, attribute in PHASES:
            owner: Any = importlib.import_module(module)
            *path, name = attribute.split(".")
            for part in path:
                owner = getattr(owner, part)
            wrap(owner, name, label)
        wrap(Compiled, "__init__", COMPILED)
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


Samples = dict[str, dict[str, list[float]]]  # variant -> label -> milliseconds per round


def _promote(
    prepared: pp.Prepared, variant: str, samples: Samples, done: dict[str, str]
) -> Callable[[], None]:
    """The timed call of one daemon's promotion, its phases added to ``samples``."""

    def call() -> None:
        spent: dict[str, float] = defaultdict(float)
        counted: dict[str, int] = defaultdict(int)
        with timed(spent, counted):
            started = time.perf_counter()
            done[variant] = pp.promote_once(prepared)
            spent["whole promotion"] = time.perf_counter() - started
        for label, seconds in spent.items():
            samples[variant][label].append(1000 * seconds)
        samples[variant]["compiled (count)"].append(float(counted[COMPILED]))

    return call


def _round(
    here: Path,
    round_no: int,
    source: wl.Source,
    workload: wl.Workload,
    template: Path,
    samples: Samples,
) -> None:
    """One round: both daemons' promotions and the bare loop, in a rotating order."""
    here.mkdir()
    copies = {n: wl.copy_repo(source.path, here / n) for n in ("first", "warm", "bare")}
    daemons = {
        "first": pp.prepare_promoter(
            copies["first"], here / "state-first", source, workload, template, inline=True
        ),
        "warm": pp.prepare_promoter(
            copies["warm"],
            here / "state-warm",
            source,
            workload,
            template,
            inline=True,
            warm_copy=wl.copy_repo(source.path, here / "warm-up"),
        ),
    }
    done: dict[str, str] = {}
    previous = gc_policy.tune_for_serving()  # as ``promoter serve`` sets it
    try:
        seconds = alternate(
            round_no,
            [
                ("first", _promote(daemons["first"], "first", samples, done)),
                ("warm", _promote(daemons["warm"], "warm", samples, done)),
                ("bare", lambda: wl.bare_loop(copies["bare"], workload.steps)),
            ],
        )
    finally:
        gc_policy.restore(previous)
    samples["bare"]["bare loop"].append(1000 * seconds["bare"])
    for variant, prepared in daemons.items():
        pp.finish_promoter(prepared, done[variant])
        wl.check_tree(copies[variant], workload.target, f"promoter ({variant})")
    wl.check_tree(copies["bare"], workload.target, "bare loop")


def run(files: int = 115, rounds: int = 11, size: int = 4096) -> dict[str, Any]:
    """``rounds`` rounds of a first promotion, a warm daemon's and the bare loop: the
    median of every phase (milliseconds) and of the statements compiled."""
    work = Path(tempfile.mkdtemp(prefix="promoter-bench-phases-"))
    samples: Samples = {variant: defaultdict(list) for variant in ("first", "warm", "bare")}
    try:
        workload = wl.make_workload(files, size)
        for name in ("source", "template"):
            (work / name).mkdir()
        source = wl.make_source(work / "source", workload)
        template, _, _ = pp.make_blob_template(work / "template", workload)
        for round_no in range(rounds):
            _round(work / f"round-{round_no}", round_no, source, workload, template, samples)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "files": files,
        "rounds": rounds,
        "medians": {
            variant: {label: statistics.median(values) for label, values in by_label.items()}
            for variant, by_label in samples.items()
        },
    }


def format_result(result: dict[str, Any]) -> str:
    first, warm = result["medians"]["first"], result["medians"]["warm"]
    lines = [
        f"a promotion of {result['files']} changes, phase by phase: median of "
        f"{result['rounds']} rounds, milliseconds (a daemon's first promotion; a daemon "
        "that has promoted before)",
        f"  {'phase':<44} {'first':>8} {'warm':>8}",
    ]
    labels = ["whole promotion", *(label for label, _, _ in PHASES), COMPILED, "compiled (count)"]
    for label in labels:
        lines.append(f"  {label:<44} {first.get(label, 0.0):8.2f} {warm.get(label, 0.0):8.2f}")
    bare = result["medians"]["bare"]["bare loop"]
    lines.append(f"  {'the bare durable loop, same changes':<44} {bare:8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time a promotion's phases (no profiler).")
    parser.add_argument("--files", type=int, default=115, help="base files of the workload")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--size", type=int, default=4096, help="bytes per file")
    args = parser.parse_args(argv)
    os.sync()
    print(format_result(run(args.files, args.rounds, args.size)))
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
