"""The current speed table of ``docs/benchmarks.md``, written from a ``make bench`` run.

``python -m scripts.docs_bench RESULTS.json PAGE`` reads what ``python -m bench.run --json
RESULTS.json`` wrote and replaces the part of PAGE between ``<!-- bench-table: begin -->``
and ``<!-- bench-table: end -->`` with one table: each row's median over the bare
baseline, its goal, its verdict and its round figures, under one line saying what
machine measured it. ``make bench`` runs both, so the page always holds the last run and
nothing older: no machine's history is kept.

Not here: measuring (``bench``), judging a run (the exit status stays 0 whatever the
figures), or any other part of the page.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench-table: begin -->"
END = "<!-- bench-table: end -->"


def _figure(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.3g}×"
    return f"{value:.3g} {unit}"


def table_markdown(result: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """The table of one run's ``table`` result, rows in the order of ``labels``."""
    rows: Mapping[str, Mapping[str, Any]] = result["rows"]
    load = result.get("load_average_before", ["?"])[0], result.get("load_average_after", ["?"])[0]
    lines = [
        f"Measured by `make bench`: the median of {result['rounds']} interleaved rounds on "
        f"{result['cpus']} CPUs, {result.get('filesystem', 'an unknown filesystem')}, load "
        f"average {load[0]} before and {load[1]} after.",
        "",
        "| measure | median | goal | verdict | rounds |",
        "|---|---|---|---|---|",
    ]
    ordered = [row for row in labels if row in rows] + sorted(set(rows) - set(labels))
    for row in ordered:
        figure = rows[row]
        unit = str(figure["unit"])
        samples = ", ".join(_figure(sample, unit) for sample in figure["samples"])
        lines.append(
            f"| {labels.get(row, row)} | {_figure(figure['median'], unit)} "
            f"| ≤ {_figure(figure['goal'], unit)} | {'met' if figure['met'] else 'missed'} "
            f"| {samples} |"
        )
    return "\n".join(lines)


def replace_table(page: str, table: str) -> str:
    """``page`` with the text between its two markers replaced by ``table``."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} part")
    return f"{page[: start + len(BEGIN)]}\n{table}\n{page[end:]}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m scripts.docs_bench RESULTS.json PAGE", file=sys.stderr)
        return 2
    results = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if "table" not in results:
        print(f"{argv[0]} holds no speed table: {argv[1]} left as it is", file=sys.stderr)
        return 1
    from bench.bench_table import LABELS

    page = Path(argv[1])
    page.write_text(
        replace_table(page.read_text(encoding="utf-8"), table_markdown(results["table"], LABELS)),
        encoding="utf-8",
    )
    print(f"{argv[1]}: the speed table of this run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
