"""The benchmarks' own variables (``PROMOTER_BENCH_*``), one list, and the refusal of any
other member of that family when ``make bench`` or any ``python -m bench.…`` starts.

A mistyped member (``BUILDR`` for ``BUILDER`` in ``PROMOTER_BENCH_BUILDER``) was read
by nothing: the builder rows the runner asked for were silently left out, and a
``PROMOTER_BENCH_DIR`` typo measured another disk than the one named. ``refusal``
names each such variable with the closest known name (difflib); ``stop_on_unknown``
prints it and ends the program (exit 2) before anything is measured.
``tests/contract/test_bench_variables.py`` checks that ``KNOWN`` holds every name
bench/, CI and the Makefile use, and nothing else.

Deliberately not here: reading the values (each where it is used), and the daemon's or
the suite's own variables (``promoter.config``, ``tests.support.suite_variables``).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping

__all__ = ["FAMILY", "KNOWN", "refusal", "stop_on_unknown"]

_PREFIX = "PROMOTER_"
FAMILY = "PROMOTER_BENCH_"
KNOWN = frozenset(
    {
        "PROMOTER_BENCH_DIR",  # where the benchmarks make their directories (a disk to measure)
        "PROMOTER_BENCH_KEEP",  # set: the table's and the native writer's directories stay
        "PROMOTER_BENCH_BUILDER",  # set: the table adds the builder rows (bench.rows_builder)
    }
)


def _closest(name: str) -> str:
    """The known name closest to ``name`` at a ratio of 0.75 or more, compared without the
    ``PROMOTER_`` every name shares (as the suite's own list compares them)."""
    known = {known[len(_PREFIX) :]: known for known in KNOWN}
    found = difflib.get_close_matches(name.upper()[len(_PREFIX) :], sorted(known), 1, 0.75)
    return f" (did you mean {known[found[0]]}?)" if found else ""


def refusal(environ: Mapping[str, str]) -> str | None:
    """Why the benchmarks must not run with ``environ``, or None: each variable of the
    family they do not read."""
    unknown = sorted(name for name in environ if name.upper().startswith(FAMILY))
    lines = [f"{name}{_closest(name)}" for name in unknown if name not in KNOWN]
    if not lines:
        return None
    return (
        "the benchmarks do not read "
        + "; ".join(lines)
        + ": unset or correct it, or a run believed to measure something would not"
    )


def stop_on_unknown(environ: Mapping[str, str] | None = None) -> None:
    """End the program (exit 2, the words on stderr) when ``environ`` (the process's)
    holds a variable of the family the benchmarks do not read."""
    said = refusal(os.environ if environ is None else environ)
    if said is not None:
        print(f"bench: {said}", file=sys.stderr)
        raise SystemExit(2)
