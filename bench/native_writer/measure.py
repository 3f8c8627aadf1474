"""What a native writer fed the plan over a pipe would take: a measured prototype.

``python -m bench.native_writer.measure --sizes 115,1150,11500 --rounds 3`` builds
``writer.c`` (this folder) with the machine's ``gcc`` into a temporary folder and, per
size of the bench workload (``bench.workload.make_workload``: that many files, about as
many changes), times side by side on identical copies, in an order that rotates with
the round (each variant after a ``sync``, the median of the rounds):

- ``promoter``: promoter's own promotion of the same bundle, in this process
  (``bench.prepared``, in the requesting thread), a daemon's first promotion as the
  table's ``promote_*`` rows; its apply phase (the temps, the replaces, the removals and
  the directories' sync: what the writer would own), its read-backs, evidence re-check,
  plan's transaction and receipt are also timed apart, in processor time of the
  promoting thread (``PHASES``);
- ``native``: the plan framed in Python (from the digests the journal already holds),
  the writer spawned with the worktree's root descriptor, the plan written to its stdin,
  the directories it made read and the go-ahead byte sent once it says the temps are
  staged, its result lines read and parsed (what promoter would journal), with one
  ``syncfs`` per group of 64 temps and one for the directories (promoter's path on
  ext4, XFS and btrfs);
- ``native_fsync``: the same with an fsync per temp and per touched directory;
- ``native_inline``: as ``native``, the new bytes inline in the plan, not a blob path;
- ``bare``: ``bench.workload.bare_loop``; ``git_apply``: ``git apply`` + ``sync``.

Every copy is checked byte for byte against the target (``check_tree``) after the
rounds, and then read back by the writer ('R' records: each target read and hashed
through the held chain, compared with its expected sha256), timed apart: what moving
promoter's read-backs into the writer would take. Processor time is reported beside
wall time: the writer's own (``os.wait4``), the Python side's that frames the plan and
reads the results (``RUSAGE_SELF``), a git child's (``RUSAGE_CHILDREN``). The spawn
alone (an empty plan) is timed as well. The load average is printed with every size.
Trees stay until the run ends (see ``bench.bench_table``: deleted inodes).

Deliberately not here: anything promoter ships or runs. The writer is a bench prototype
(docs/decisions/native-writer-prototype.md); nothing in ``promoter`` imports this.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import prepared as pp
from bench import workload as wl
from bench.variables import stop_on_unknown
from promoter.api import gc_policy
from promoter.engine.operation import driver, outcome, promote

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "writer.c"
GROUP = 64  # temps per syncfs, as promoter's group
FILE_MODE = 0o100644
ZERO = bytes(32)

# label -> (owner, attribute): promoter's phases timed apart in the promoting thread's
# processor time. "apply" is what the writer would own (the temps written, synced and
# named, then the replaces, removals and the directories' sync); the others stay in
# Python as built (the read-backs could move too: reading and hashing leaves).
PHASES: dict[str, tuple[tuple[Any, str], ...]] = {
    "apply": ((promote, "stage_temps"), (driver.Driver, "place_all")),
    "read_backs": ((promote, "read_back"), (outcome, "read_targets")),
    "evidence": ((promote, "recheck_evidence"),),
    "plan_journal": ((promote, "_journal"),),
    "receipt": ((outcome, "complete"),),
}


def build(work: Path) -> tuple[Path, float]:
    """``writer.c`` compiled with the machine's gcc (-O2, libcrypto): the binary, seconds."""
    binary = work / "writer"
    started = time.perf_counter()
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(binary), str(SOURCE), "-lcrypto"],
        check=True,
        timeout=300,
    )
    return binary, time.perf_counter() - started


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One change as the journal holds it: op, path, temp name, digests, blob (or bytes)."""

    op: bytes
    path: bytes
    temp: bytes
    old_sha: bytes
    new_sha: bytes
    blob: bytes | None
    data: bytes | None


def write_blobs(folder: Path, workload: wl.Workload) -> dict[bytes, Path]:
    """Every new blob of the workload as a read-only file named by its sha256."""
    folder.mkdir()
    found: dict[bytes, Path] = {}
    for step in workload.steps:
        if step.new is None:
            continue
        digest = hashlib.sha256(step.new).digest()
        path = folder / digest.hex()
        if digest not in found:
            path.write_bytes(step.new)
            path.chmod(0o444)
            found[digest] = path
    return found


def changes_of(workload: wl.Workload, blobs: dict[bytes, Path]) -> list[Change]:
    """The plan's rows (untimed: the digests and temp names are the journal's already)."""
    rows: list[Change] = []
    for seq, step in enumerate(workload.steps):
        old = hashlib.sha256(step.old).digest() if step.old is not None else ZERO
        new = hashlib.sha256(step.new).digest() if step.new is not None else ZERO
        op = {"create": b"C", "modify": b"M", "delete": b"D"}[step.operation]
        temp = f".promoter-tmp-{seq:06d}-{new.hex()[:8] or 'gone'}".encode()
        blob = os.fsencode(blobs[new]) if step.new is not None else None
        rows.append(Change(op, step.path.encode(), temp, old, new, blob, step.new))
    return rows


def frame(rows: list[Change], grouped: bool, inline: bool = False) -> bytes:
    """The plan in the writer's framing (see writer.c); ``inline``: the new bytes in the
    plan itself rather than a blob file's path."""
    parts = [b"PNW1", struct.pack("<II", 1 if grouped else 0, GROUP)]
    head = struct.Struct("<cI")
    for seq, row in enumerate(rows):
        old_mode = 0 if row.old_sha == ZERO else FILE_MODE
        new_mode = 0 if row.new_sha == ZERO else FILE_MODE
        parts += [
            head.pack(row.op, seq),
            struct.pack("<H", len(row.path)),
            row.path,
            struct.pack("<H", len(row.temp)),
            row.temp,
            struct.pack("<II", old_mode, new_mode),
            row.old_sha,
            row.new_sha,
        ]
        if row.blob is None or row.data is None:
            parts.append(b"N")
        elif inline:
            parts += [b"I", struct.pack("<Q", len(row.data)), row.data]
        else:
            parts += [b"B", struct.pack("<H", len(row.blob)), row.blob]
    parts.append(b"E")
    return b"".join(parts)


# --- running the writer -----------------------------------------------------------------


@dataclass
class Ran:
    """One writer run: its result rows and processor time (seconds)."""

    results: list[tuple[int, str, int]]
    child_user: float
    child_system: float
    python_user: float
    python_system: float


def feed(binary: Path, root: Path, plan: bytes) -> tuple[list[bytes], int, resource.struct_rusage]:
    """Spawn the writer on ``root``'s descriptor, write ``plan``, send the go-ahead once it
    says ``staged``, and read every line it answers: (lines, wait status, its usage)."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    plan_r, plan_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        pid = os.posix_spawn(
            str(binary),
            [str(binary), "--root-fd", "3"],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, plan_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, root_fd, 3),
            ],
        )
    finally:
        os.close(plan_r)
        os.close(out_w)
        os.close(root_fd)
    lines: list[bytes] = []

    def write_plan() -> None:  # in its own thread: the writer answers while it reads
        try:
            view = memoryview(plan)
            while view:
                view = view[os.write(plan_w, view) :]
        except BrokenPipeError:
            pass  # the writer refused early: its answer says why

    writing = threading.Thread(target=write_plan, daemon=True)
    writing.start()
    with os.fdopen(out_r, "rb") as answer:
        try:
            for line in answer:
                lines.append(line)
                if line.startswith(b"staged "):
                    writing.join()
                    # promoter would journal the "dir" lines and check its lock and fence here
                    os.write(plan_w, b"P")
                    break
        except BrokenPipeError:
            pass
        finally:
            writing.join()
            os.close(plan_w)
        lines += answer.read().splitlines(keepends=True)
    _, status, usage = os.wait4(pid, 0)
    return lines, status, usage


def run_writer(
    binary: Path, root: Path, rows: list[Change], grouped: bool, inline: bool = False
) -> Ran:
    """Frame the plan, feed it to the writer, parse its results (what would be journaled)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    lines, status, usage = feed(binary, root, frame(rows, grouped, inline))
    results: list[tuple[int, str, int]] = []
    for line in lines:
        fields = line.split()
        if fields[0] in (b"dir", b"staged", b"synced"):
            continue
        if len(fields) < 3 or fields[2] not in (b"ok", b"already"):
            raise AssertionError(f"the writer refused: {line.decode(errors='replace')}")
        inode = int(fields[3]) if len(fields) > 3 else 0
        results.append((int(fields[0]), fields[1].decode(), inode))
    after = resource.getrusage(resource.RUSAGE_SELF)
    if os.waitstatus_to_exitcode(status) != 0 or not lines or not lines[-1].startswith(b"synced"):
        raise AssertionError(f"the writer ended {status}: {lines[-3:]}")
    if len(results) != len(rows):
        raise AssertionError(f"the writer reported {len(results)} of {len(rows)} changes")
    return Ran(
        results,
        usage.ru_utime,
        usage.ru_stime,
        after.ru_utime - before.ru_utime,
        after.ru_stime - before.ru_stime,
    )


def read_back(binary: Path, root: Path, expected: dict[bytes, bytes | None]) -> Ran:
    """Every path of ``expected`` read back by the writer ('R' records) and compared with
    its expected sha256 (None: missing), as promoter's final read-back compares them."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    paths = list(expected)
    head = struct.Struct("<cI")
    parts = [b"PNW1", struct.pack("<II", 0, GROUP)]
    for seq, path in enumerate(paths):
        parts += [head.pack(b"R", seq), struct.pack("<H", len(path)), path]
        parts += [struct.pack("<HII", 0, 0, 0), ZERO, ZERO, b"N"]
    parts.append(b"E")
    lines, status, usage = feed(binary, root, b"".join(parts))
    found = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or fields[1] != b"R":
            continue
        want = expected[paths[int(fields[0])]]
        got = bytes.fromhex(fields[3].decode()) if fields[2] == b"file" else None
        if got != want:
            raise AssertionError(f"read back {line!r}, expected {want!r}")
        found += 1
    after = resource.getrusage(resource.RUSAGE_SELF)
    if os.waitstatus_to_exitcode(status) != 0 or found != len(paths):
        raise AssertionError(f"the read-back ended {status}: {found} of {len(paths)}")
    return Ran(
        [],
        usage.ru_utime,
        usage.ru_stime,
        after.ru_utime - before.ru_utime,
        after.ru_stime - before.ru_stime,
    )


# --- the variants -----------------------------------------------------------------------


@contextmanager
def phase_clock(spent: dict[str, float]) -> Iterator[None]:
    """``PHASES``' functions wrapped to add the thread's processor time to ``spent`` by
    label; a call inside another timed call counts for the outer one only."""
    undo: list[tuple[Any, str, Any]] = []
    active: list[str] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if active:
                return original(*args, **kwargs)
            active.append(label)
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - started
                active.pop()

        undo.append((owner, name, original))
        setattr(owner, name, timed_call)

    try:
        for label, functions in PHASES.items():
            for owner, name in functions:
                wrap(owner, name, label)
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


Samples = dict[str, dict[str, list[float]]]  # variant -> measure -> one value a round


def _cpu() -> tuple[float, float, float, float]:
    """(user, system) seconds of this process (all threads), then of its waited children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime, own.ru_stime, kids.ru_utime, kids.ru_stime


def one_round(
    here: Path,
    round_no: int,
    binary: Path,
    source: wl.Source,
    workload: wl.Workload,
    template: Path,
    rows: list[Change],
    samples: Samples,
) -> None:
    """Every variant once, on its own copy, in an order that rotates with ``round_no``."""
    here.mkdir()
    names = ("promoter", "native", "native_fsync", "native_inline", "bare", "git_apply")
    copies = {name: wl.copy_repo(source.path, here / name) for name in names}
    prepared = pp.prepare_promoter(
        copies["promoter"], here / "state", source, workload, template, inline=True
    )
    done: dict[str, str] = {}
    phase_spent: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    ran: dict[str, Ran] = {}

    def promoter() -> None:
        with phase_clock(phase_spent):
            done["op"] = pp.promote_once(prepared)

    def native(name: str, grouped: bool, inline: bool = False) -> Callable[[], None]:
        copy = copies[name]
        return lambda: ran.__setitem__(name, run_writer(binary, copy, rows, grouped, inline))

    runs: list[tuple[str, Callable[[], None]]] = [
        ("promoter", promoter),
        ("native", native("native", True)),
        ("native_fsync", native("native_fsync", False)),
        ("native_inline", native("native_inline", True, inline=True)),
        ("bare", lambda: wl.bare_loop(copies["bare"], workload.steps)),
        ("git_apply", lambda: wl.git_apply_sync(copies["git_apply"], source.patch)),
    ]
    order = runs[round_no % len(runs) :] + runs[: round_no % len(runs)]
    previous = gc_policy.tune_for_serving()  # the collector as ``promoter serve`` sets it
    try:
        for name, call in order:
            os.sync()
            before = _cpu()
            started = time.perf_counter()
            call()
            wall = time.perf_counter() - started
            spent = [b - a for a, b in zip(before, _cpu(), strict=True)]
            samples[name]["wall"].append(wall)
            samples[name]["cpu"].append(sum(spent))
            samples[name]["cpu_user"].append(spent[0] + spent[2])
            samples[name]["cpu_system"].append(spent[1] + spent[3])
            samples[name]["cpu_children"].append(spent[2] + spent[3])
    finally:
        gc_policy.restore(previous)
    pp.finish_promoter(prepared, done["op"])
    for label, seconds in phase_spent.items():
        samples["promoter"][f"phase_{label}"].append(seconds)
    for name in ("native", "native_fsync", "native_inline"):
        samples[name]["writer_cpu"].append(ran[name].child_user + ran[name].child_system)
        samples[name]["writer_user"].append(ran[name].child_user)
        samples[name]["writer_system"].append(ran[name].child_system)
        samples[name]["python_cpu"].append(ran[name].python_user + ran[name].python_system)
    for name, copy in copies.items():
        wl.check_tree(copy, workload.target, name)
    expected = {
        s.path.encode(): None if s.new is None else hashlib.sha256(s.new).digest()
        for s in workload.steps
    }
    started = time.perf_counter()
    reads = read_back(binary, copies["native"], expected)
    samples["native_read"]["wall"].append(time.perf_counter() - started)
    samples["native_read"]["writer_cpu"].append(reads.child_user + reads.child_system)
    samples["native_read"]["python_cpu"].append(reads.python_user + reads.python_system)


def spawn_only(binary: Path, root: Path, times: int = 21) -> dict[str, float]:
    """An empty plan, ``times`` times: the spawn and the framing's fixed cost (medians)."""
    walls: list[float] = []
    writer: list[float] = []
    python: list[float] = []
    for _ in range(times):
        started = time.perf_counter()
        ran = run_writer_empty(binary, root)
        walls.append(time.perf_counter() - started)
        writer.append(ran.child_user + ran.child_system)
        python.append(ran.python_user + ran.python_system)
    return {
        "wall_ms": 1000 * statistics.median(walls),
        "writer_cpu_ms": 1000 * statistics.median(writer),
        "python_cpu_ms": 1000 * statistics.median(python),
    }


def run_writer_empty(binary: Path, root: Path) -> Ran:
    """``run_writer`` with no changes (the writer still opens, reads and answers)."""
    return run_writer(binary, root, [], True)


def measure_size(
    work: Path, binary: Path, files: int, rounds: int, size: int = 4096
) -> dict[str, Any]:
    """Every variant ``rounds`` times on a workload of ``files`` files: medians per change."""
    here = work / f"size-{files}"
    for name in ("source", "template", "rounds"):
        (here / name).mkdir(parents=True)
    workload = wl.make_workload(files, size)
    source = wl.make_source(here / "source", workload)
    template, _, _ = pp.make_blob_template(here / "template", workload)
    rows = changes_of(workload, write_blobs(here / "blobs", workload))
    samples: Samples = defaultdict(lambda: defaultdict(list))
    load_before = os.getloadavg()
    for round_no in range(rounds):
        one_round(
            here / "rounds" / str(round_no),
            round_no,
            binary,
            source,
            workload,
            template,
            rows,
            samples,
        )
    load_after = os.getloadavg()
    changes = len(workload.steps)
    return {
        "files": files,
        "changes": changes,
        "counts": workload.counts,
        "rounds": rounds,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "us_per_change": {
            variant: {
                measure: 1e6 * statistics.median(values) / changes
                for measure, values in by_measure.items()
            }
            for variant, by_measure in samples.items()
        },
        "wall_ms": {
            variant: [round(1000 * v, 2) for v in by_measure["wall"]]
            for variant, by_measure in samples.items()
        },
    }


def format_size(result: dict[str, Any]) -> str:
    per = result["us_per_change"]
    lines = [
        f"{result['changes']} changes ({result['counts']}), median of {result['rounds']} "
        f"rounds, load average {result['load_before'][0]} -> {result['load_after'][0]}",
        f"  {'variant':<14} {'wall us/change':>14} {'cpu us/change':>13} {'user':>7} "
        f"{'system':>7}  detail (cpu us/change)",
    ]
    for variant in ("promoter", "native", "native_fsync", "native_inline", "bare", "git_apply"):
        figures = per[variant]
        detail = ""
        if variant == "promoter":
            detail = ", ".join(f"{label} {figures[f'phase_{label}']:.1f}" for label in PHASES)
        elif variant.startswith("native"):
            detail = (
                f"writer {figures['writer_cpu']:.1f} (user {figures['writer_user']:.1f}, "
                f"system {figures['writer_system']:.1f}), python {figures['python_cpu']:.1f}"
            )
        elif variant == "git_apply":
            detail = f"git {figures['cpu_children']:.1f}"
        lines.append(
            f"  {variant:<14} {figures['wall']:14.1f} {figures['cpu']:13.1f} "
            f"{figures['cpu_user']:7.1f} {figures['cpu_system']:7.1f}  {detail}"
        )
    reads = per["native_read"]
    lines.append(
        f"  a read-back of every target by the writer (one read a change): "
        f"{reads['wall']:.1f} us wall, writer {reads['writer_cpu']:.1f} + python "
        f"{reads['python_cpu']:.1f} us cpu a change"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure the native writer prototype.")
    parser.add_argument("--sizes", default="115,1150,11500", help="files of each workload")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    work = Path(
        tempfile.mkdtemp(prefix="promoter-bench-native-", dir=os.environ.get("PROMOTER_BENCH_DIR"))
    )
    try:
        binary, build_seconds = build(work)
        print(
            f"writer built in {build_seconds:.2f} s, {binary.stat().st_size} bytes; "
            f"{os.cpu_count()} CPUs; {wl.filesystem_of(work)}"
        )
        empty = work / "empty"
        empty.mkdir()
        load = os.getloadavg()[0]
        spawn = spawn_only(binary, empty)
        print(
            f"an empty plan (spawn, framing, answer): {spawn['wall_ms']:.2f} ms wall, "
            f"writer {spawn['writer_cpu_ms']:.2f} ms cpu, python {spawn['python_cpu_ms']:.2f} "
            f"ms cpu; load average {load}"
        )
        results: dict[str, Any] = {"build_seconds": build_seconds, "spawn": spawn, "sizes": []}
        for files in (int(s) for s in args.sizes.split(",")):
            result = measure_size(work, binary, files, args.rounds)
            results["sizes"].append(result)
            print(format_size(result), flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        if not os.environ.get("PROMOTER_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    sys.exit(main())
