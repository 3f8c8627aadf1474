"""One promotion under cProfile, and where its time goes (``bench_promote --profile``).

The phases and cross-cutting costs are looked up in the profile by (file suffix,
function); the report adds their cumulative seconds and ranks the top functions.
Deliberately not here: the timed runs (``bench.bench_promote``).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import time
from pathlib import Path
from typing import Any

from bench.prepared import finish_promoter, prepare_promoter, promote_once
from bench.workload import Source, Workload, check_tree, copy_repo

# Where the time goes, looked up in the profile by (file suffix, function); cumulative
# seconds of all matches are added up. "~" is the file of builtins.
_Lookup = tuple[tuple[str, str], ...]
PHASES: tuple[tuple[str, _Lookup], ...] = (
    ("whole attempt (promote.run)", (("engine/operation/promote.py", "run"),)),
    ("evidence re-verification", (("engine/verify/authority.py", "recheck_evidence"),)),
    ("authority checks (x2)", (("engine/verify/authority.py", "check_authority"),)),
    ("repository lock", (("fs/lock.py", "acquire"),)),
    ("read-back under the lock", (("engine/operation/preconditions.py", "read_back"),)),
    ("journal: steps + decision + action", (("engine/operation/promote.py", "_journal"),)),
    ("write temps + fsync + journal", (("engine/operation/staging.py", "stage_temps"),)),
    (
        "replaces and unlinks",
        (("engine/operation/apply.py", "place"), ("engine/operation/apply.py", "remove")),
    ),
    ("parent directory fsyncs", (("engine/operation/apply.py", "fsync"),)),
    ("final read-back + receipt (finish)", (("engine/operation/outcome.py", "finish"),)),
    ("  of which receipt + journal", (("engine/operation/outcome.py", "complete"),)),
)
COSTS: tuple[tuple[str, _Lookup], ...] = (
    ("git subprocesses (run_git)", (("git/runner.py", "run_git"),)),
    ("git cat-file --batch", (("git/objects.py", "blob_sha256"),)),
    ("sqlite commits", (("~", "<method 'commit' of 'sqlite3.Connection' objects>"),)),
    ("SQLAlchemy flushes", (("orm/session.py", "flush"),)),
    ("JSON decode (json.loads)", (("json/decoder.py", "raw_decode"),)),
    (
        "pydantic validation",
        (
            (
                "~",
                "<method 'validate_python' of 'pydantic_core._pydantic_core.SchemaValidator' "
                "objects>",
            ),
            (
                "~",
                "<method 'validate_json' of 'pydantic_core._pydantic_core.SchemaValidator' "
                "objects>",
            ),
        ),
    ),
    ("canonical JSON (canonical_bytes)", (("domain/canonical.py", "canonical_bytes"),)),
    ("ledger event hashing", (("store/ledger.py", "event_sha256"),)),
    ("file fsyncs (os.fsync)", (("~", "<built-in method posix.fsync>"),)),
    ("unlinks (os.unlink)", (("~", "<built-in method posix.unlink>"),)),
    ("verify_chain re-walks", (("fs/chain.py", "verify_chain"),)),
    ("leaf reads + hashing (read_leaf)", (("fs/leaf.py", "read_leaf"),)),
    ("blob store re-hash (measure)", (("store/blobs.py", "measure"),)),
    ("blob store reads for temps", (("store/blobs.py", "read"),)),
)

_Key = tuple[str, int, str]
_StatRow = tuple[int, int, float, float, dict[_Key, Any]]


def _stats_table(profiler: cProfile.Profile) -> dict[_Key, _StatRow]:
    stats = pstats.Stats(profiler)
    table: dict[_Key, _StatRow] = stats.stats  # type: ignore[attr-defined]
    return table


def _cumulative(table: dict[_Key, _StatRow], lookup: _Lookup) -> tuple[float, int]:
    seconds, calls = 0.0, 0
    for (filename, _line, name), (_cc, nc, _tt, ct, _callers) in table.items():
        for suffix, func in lookup:
            if name == func and (filename == suffix or filename.endswith(suffix)):
                seconds += ct
                calls += nc
    return seconds, calls


def _where(filename: str, line: int, func: str) -> str:
    if filename == "~":
        return func
    parts = Path(filename).parts
    short = "/".join(parts[-2:])
    return f"{short}:{line}({func})"


def _ranked(table: dict[_Key, _StatRow], *, own: bool, top: int, title: str) -> list[str]:
    lines = [title, f"  {'ncalls':>8} {'tottime':>8} {'cumtime':>8}  function"]
    ranked = sorted(
        table.items(), key=lambda item: item[1][2] if own else item[1][3], reverse=True
    )[:top]
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in ranked:
        lines.append(f"  {nc:8d} {tt:8.3f} {ct:8.3f}  {_where(filename, line, func)}")
    return lines


def profile_promotion(
    work: Path, source: Source, workload: Workload, blob_template: Path, top: int = 15
) -> str:
    """One promotion under cProfile; returns the printable report."""
    here = work / "profile"
    here.mkdir()
    copy = copy_repo(source.path, here / "promoter")
    prepared = prepare_promoter(copy, here / "state", source, workload, blob_template, inline=True)
    profiler = cProfile.Profile()
    os.sync()
    started = time.perf_counter()
    profiler.enable()
    operation_id = promote_once(prepared)
    profiler.disable()
    total = time.perf_counter() - started
    finish_promoter(prepared, operation_id)
    check_tree(copy, workload.target, "promoter (profiled)")
    shutil.rmtree(here)
    table = _stats_table(profiler)
    lines = [f"profile of one promotion (cProfile, in the requesting thread): {total:.3f} s"]
    header = f"  {{:<38}} {'seconds':>8} {'share':>6} {'calls':>7}"
    for title, rows in (("phase", PHASES), ("cross-cutting cost", COSTS)):
        lines.append(header.format(title))
        for label, lookup in rows:
            seconds, calls = _cumulative(table, lookup)
            lines.append(f"  {label:<38} {seconds:8.3f} {seconds / total:6.1%} {calls:7d}")
    lines += _ranked(table, own=False, top=top, title=f"top {top} by cumulative time:")
    lines += _ranked(table, own=True, top=top, title=f"top {top} by own time:")
    return "\n".join(lines)
