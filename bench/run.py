"""Run the benchmarks and print their figures and ratios: ``python -m bench.run`` (``make bench``).

By default (``--quick``) runs the speed table (``bench.bench_table``): every row a ratio
measured side by side, median of ``--rounds`` (at least 3) interleaved rounds, a few
minutes in all, then the command line's processor time (``bench.cli_start``: its build
row in 10 000 files, 100 000 with ``--full``). ``--full`` (or ``--profile``) adds the
promotion benchmark (``bench.bench_promote``, with ``--profile`` one profiled run) and
the snapshot benchmark (``bench.bench_snapshots``) when that module exposes ``run() -> dict``. A
benchmark module may also expose ``format_result(dict) -> str`` for its own table;
otherwise its result is printed key by key. This reports, it does not gate: the exit
status is 0 whatever the figures are, and a benchmark that fails is reported and skipped.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bench import variables


def _optional_module(name: str) -> ModuleType | None:
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ImportError:
        return None
    try:
        return importlib.import_module(name)
    except Exception:
        print(f"{name} could not be imported:", file=sys.stderr)
        traceback.print_exc()
        return None


def _flatten(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out.append((prefix, value))


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(_show(item) for item in value)
    return str(value)


def generic_format(name: str, result: dict[str, Any]) -> str:
    """Every leaf of ``result`` as ``key: value``; ratios repeated at the end."""
    rows: list[tuple[str, Any]] = []
    _flatten("", result, rows)
    multiline = [(key, value) for key, value in rows if isinstance(value, str) and "\n" in value]
    lines = [f"{name} benchmark:"]
    lines += [f"  {key}: {_show(value)}" for key, value in rows if (key, value) not in multiline]
    ratios = [(key, value) for key, value in rows if "ratio" in key.lower()]
    if ratios:
        lines.append("  ratios:")
        lines += [f"    {key}: {_show(value)}" for key, value in ratios]
    for key, value in multiline:
        lines += [f"  {key}:", value]
    return "\n".join(lines)


def run_one(
    name: str,
    module: ModuleType,
    call: Callable[[], dict[str, Any]],
) -> dict[str, Any] | None:
    print(f"== {name} ==", flush=True)
    started = time.perf_counter()
    try:
        result = call()
    except Exception:
        print(f"{name} benchmark failed:", file=sys.stderr)
        traceback.print_exc()
        return None
    formatter = getattr(module, "format_result", None)
    if callable(formatter):
        print(formatter(result))
    else:
        print(generic_format(name, result))
    print(f"({name}: {time.perf_counter() - started:.1f} s wall)", flush=True)
    return result


def _write(path: str | None, results: dict[str, Any]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, sort_keys=True, default=str)


def main(argv: list[str] | None = None) -> int:
    variables.stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    parser = argparse.ArgumentParser(description="Run promoter's benchmarks and print ratios.")
    parser.add_argument("--files", type=int, default=1000, help="promotion bundle size")
    parser.add_argument("--size", type=int, default=4096, help="bytes per file")
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="profile one promotion run")
    parser.add_argument("--json", metavar="PATH", help="also write all results as JSON here")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the table")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--quick", action="store_true", help="the speed table only (default)")
    scope.add_argument("--full", action="store_true", help="the table and the older benchmarks")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    try:
        from bench import bench_table

        table = run_one(
            "table",
            bench_table,
            lambda: bench_table.run(max(3, args.rounds), args.size, full=args.full),
        )
        if table is not None:
            results["table"] = table
        from bench import cli_start

        started = run_one(
            "cli_start", cli_start, lambda: cli_start.run(max(5, args.rounds), full=args.full)
        )
        if started is not None:
            results["cli_start"] = started
        if not (args.full or args.profile):
            _write(args.json, results)
            return 0
        from bench import bench_promote

        promoted = run_one(
            "promote",
            bench_promote,
            lambda: bench_promote.run(
                args.files, args.size, profile=args.profile, repetitions=args.repetitions
            ),
        )
        if promoted is not None:
            results["promote"] = promoted
        snapshots = _optional_module("bench.bench_snapshots")
        snapshot_run = getattr(snapshots, "run", None) if snapshots is not None else None
        if snapshots is not None and callable(snapshot_run):
            measured = run_one("snapshots", snapshots, snapshot_run)
            if measured is not None:
                results["snapshots"] = measured
        else:
            print("(no bench.bench_snapshots with run() -> dict: snapshot benchmark skipped)")
        _write(args.json, results)
    except Exception:
        print("the benchmarks could not run:", file=sys.stderr)
        traceback.print_exc()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
