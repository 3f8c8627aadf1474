"""The benchmarks' own variables: one list, refused when mistyped, checked against their uses.

``bench.variables.KNOWN`` must hold every ``PROMOTER_BENCH_*`` name bench/, CI
(``.ci/run``) and the Makefile use, and no other; ``python -m bench.bench_table`` and
``python -m bench.run`` (``make bench``), and every other benchmark a module's ``__main__``
starts, started with a name of the family the benchmarks do not read end at their start
with exit 2, naming the closest known name, before anything is measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.variables import FAMILY, KNOWN, refusal

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PROMOTER_BENCH_[A-Z0-9_]*[A-Z0-9]")
# spelled apart: the search of the uses below finds neither
TYPO, UNKNOWN = "PROMOTER_BENCH_" + "BUILDR", "PROMOTER_BENCH_" + "ZZZ"


def _used() -> dict[str, set[str]]:
    """Each family name written in a file of bench/, CI or the Makefile, with its files."""
    files = [*sorted((ROOT / "bench").rglob("*.py")), ROOT / ".ci" / "run", ROOT / "Makefile"]
    found: dict[str, set[str]] = {}
    for path in files:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_list_holds_every_name_bench_ci_and_the_makefile_use_and_no_other() -> None:
    used = _used()
    assert {"PROMOTER_BENCH_DIR", "PROMOTER_BENCH_BUILDER"} <= set(used)
    assert {name: used[name] for name in sorted(set(used) - KNOWN)} == {}
    assert sorted(KNOWN - set(used)) == []
    assert all(name.startswith(FAMILY) for name in KNOWN)


def test_a_mistyped_or_unknown_member_is_refused_with_the_closest_name() -> None:
    assert refusal({"PROMOTER_BENCH_DIR": "/srv", "PROMOTER_BENCH_KEEP": "1"}) is None
    assert refusal({"PROMOTER_TEST_DATABASE": "sqlite", "HOME": "/root"}) is None
    said = refusal({TYPO: "1", "promoter_bench_kep": "1", UNKNOWN: ""})
    assert said == (
        f"the benchmarks do not read {TYPO} (did you mean PROMOTER_BENCH_BUILDER?); "
        f"{UNKNOWN}; promoter_bench_kep (did you mean PROMOTER_BENCH_KEEP?): unset or "
        "correct it, or a run believed to measure something would not"
    )


@pytest.mark.parametrize("module", ["bench.bench_table", "bench.run", "bench.statements"])
def test_a_benchmark_started_with_a_mistyped_member_ends_at_its_start(
    tmp_path: Path, module: str
) -> None:
    """Before anything is measured: no directory made where ``PROMOTER_BENCH_DIR`` says,
    no row printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env |= {TYPO: "1", "PROMOTER_BENCH_DIR": str(tmp_path)}
    argv = [sys.executable, "-m", module, "--rounds", "1"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"bench: the benchmarks do not read {TYPO} (did you mean PROMOTER_BENCH_BUILDER?)" in (
        done.stderr
    )
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def _entry_points() -> list[Path]:
    return [
        path
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    ]


def test_every_benchmark_a_module_starts_refuses_a_mistyped_member_first() -> None:
    """``python -m bench.rows_run_small`` with ``PROMOTER_BENCH_DIR`` mistyped measured the
    default disk: each module's ``__main__`` asks ``stop_on_unknown`` before its ``main``."""
    late = []
    for path in _entry_points():
        text = path.read_text(encoding="utf-8")
        block = text.split('if __name__ == "__main__":\n', 1)[1]
        main = text.split("\ndef main(", 1)[-1].split("\ndef ", 1)[0]  # or its main asks
        if not block.lstrip().startswith("stop_on_unknown()") and "stop_on_unknown()" not in main:
            late.append(str(path.relative_to(ROOT)))
    assert len(_entry_points()) >= 20
    assert late == []
