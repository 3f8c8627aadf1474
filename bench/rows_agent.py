"""The speed table's row for an agent-sized change in one request, against ``git apply``.

The repository is ``bench.rows_run_small``'s generated click-like project (166 Python
files of 1-40 KB in a few directories), made once a run (``make_source``). Per round,
against one daemon in this process on a copy of it (grant, executor token and lease set
up once, untimed), ``FLOWS`` changes of 5 to 17 files (``SIZES``, after one untimed of
10) alternate pair by pair with the same change applied on an identical copy, the
order of each pair rotating with the flow and the round (an ``os.sync`` before each):

- ``one``: the change in ONE request (``PromoterClient.promote_with_evidence``: the
  bundle's frame and every blob's, old and new contents, since verification and a
  rollback read both; the promotion with ``wait``). The change is mixed as
  ``bench.rows_fixed.agent_change`` mixes it: tracked files with a block of 20-60 lines
  rewritten (no file twice in a round) and new files of 20-60 lines in a new directory
  (``agent_steps``: about 70 % modified, 30 % created);
- ``apply``: ``git apply`` of the same change as a patch (``rows_fixed.agent_patch``)
  plus ``sync``.

Row ``flow_agent_one_request``: the p50 of ``one`` over the p50 of ``apply``. Details:
both p50s in milliseconds, the median of the pairs' own ratios, the processor time of a
flow outside the calling thread (the daemon's threads and its git children, the running
``git cat-file`` included: ``bench.harness.cpu_since``;
``flow_agent_one_request.daemon_cpu_ms_per_flow``) and of the whole process
(``….cpu_ms_per_flow``, client included) beside ``git apply`` + ``sync``'s
(``….apply_cpu_ms_per_flow``), the flushes a flow makes (fsync, fdatasync, ``syncfs``,
durable SQLite commits: ``promoter.fs.flush``'s counter), the git processes it starts and
the files a change holds (``….files_per_change``, the median of ``SIZES``).

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from bench import documents as bd
from bench import rows_fixed, rows_run_small
from bench import workload as wl
from bench.harness import Table, cpu_mark, cpu_since, daemon
from promoter.client.evidence import split_blobs
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex
from promoter.fs import flush
from promoter.git import runner

ROW = "flow_agent_one_request"
GOALS: dict[str, tuple[float, str]] = {ROW: (4.0, "x")}
LABELS = {ROW: "agent-sized change, 1 request, vs git apply + sync"}
SIZES = (5, 17, 9, 13, 7, 15, 11)  # files of the timed changes 1..FLOWS; change 0 has 10
FLOWS = len(SIZES)
KINDS = ("fsync", "fdatasync", "syncfs", "sqlite_commit")


def make_source(work: Path) -> wl.Source:
    """The click-like project of ``bench.rows_run_small`` as a ``bench.workload.Source``
    (no patch: each change makes its own)."""
    repo = rows_run_small.make_repo(work)
    commit = wl.git(repo, "rev-parse", "HEAD").decode().strip()
    tree = wl.git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    return wl.Source(repo, work / "unused.patch", commit, tree)


def size_of(n: int) -> int:
    return 10 if n == 0 else SIZES[n - 1]


def agent_steps(n: int, round_no: int, base: dict[str, bytes]) -> list[wl.Step]:
    """Change ``n`` of a round: ``size_of(n)`` files, about 30 % of them created in a new
    directory, the rest tracked files with a block rewritten that no earlier change of
    the round touched."""
    size = size_of(n)
    created = max(1, size * 3 // 10)
    modified = size - created
    first = sum(size_of(k) - max(1, size_of(k) * 3 // 10) for k in range(n))
    paths = sorted(base)
    if first + modified > len(paths):
        raise ValueError(f"{len(paths)} base files are too few for the agent-sized changes")
    steps: list[wl.Step] = []
    for index in range(first, first + modified):
        path = paths[index]
        old = base[path].splitlines(keepends=True)
        count = min(len(old), rows_fixed._line_count(index))
        start = (7 * index) % (len(old) - count + 1)
        block = rows_fixed._lines(count, f"{path}, change {n}, round {round_no}")
        new = b"".join(old[:start] + block + old[start + count :])
        steps.append(wl.Step(path, base[path], new))
    for k in range(created):
        lines = rows_fixed._lines(rows_fixed._line_count(n * 5 + k + 3), f"new {k}, change {n}")
        steps.append(wl.Step(f"src/clicklike/agent_{n}/new_{k}.py", None, b"".join(lines)))
    return sorted(steps, key=lambda step: step.path.encode())


def _flushes() -> dict[str, int]:
    made = flush.flushes()
    return {kind: int(made[kind]) for kind in KINDS}


def flow_agent_one_request(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    here = work / f"agent-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    bare = wl.copy_repo(source.path, here / "bare")
    base = wl.tree_files(source.path)
    changes = {n: agent_steps(n, round_no, base) for n in range(FLOWS + 1)}
    with ExitStack() as stack:
        url, services = stack.enter_context(daemon(here / "state", ours))
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity,
            source.base_commit,
            source.base_tree,
            max_changes=max(SIZES),
            grant_id="grt_agent_one",
        )
        orch = stack.enter_context(
            PromoterClient(url, services.tokens["orchestrator"], timeout=600)
        )
        registered = orch.register_grant(grant)
        token = str(orch.mint_executor_token(bd.RUN_ID)["token"])
        orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())

        def one(n: int) -> None:
            steps = changes[n]
            bundle = bd.bundle_document(grant, registered["grant_sha256"], bd.step_changes(steps))
            contents = {b for s in steps for b in (s.old, s.new) if b is not None}
            blobs = [(sha256_hex(b), len(b), b) for b in sorted(contents)]
            if split_blobs(blobs)[1]:
                raise AssertionError("a blob would be stored before the request")
            done = orch.promote_with_evidence(
                bundle, blobs, bd.FENCE, executor_token=token, wait=True
            )
            if done["operation"].get("status") != "completed":
                raise AssertionError(f"the promotion ended {done['operation']}")

        def apply(n: int) -> None:
            patch = here / f"agent{n}.patch"
            patch.write_bytes(rows_fixed.agent_patch(changes[n]))
            subprocess.run(["git", "apply", str(patch)], cwd=bare, check=True)
            os.sync()

        one(0)  # untimed: connections, folders and statements made
        apply(0)
        timed: dict[str, list[float]] = {"one": [], "apply": []}
        cpu: dict[str, list[float]] = {"one": [], "apply": []}
        daemon_cpu: list[float] = []
        flushes = dict.fromkeys(KINDS, 0)
        spawned_before = runner.spawned()
        for n in range(1, FLOWS + 1):
            pair = [("one", one), ("apply", apply)]
            turn = (n + round_no) % 2
            for name, call in pair[turn:] + pair[:turn]:
                os.sync()
                before = _flushes()
                mark = cpu_mark()
                mine = time.thread_time()
                started = time.perf_counter()
                call(n)
                timed[name].append(time.perf_counter() - started)
                mine = time.thread_time() - mine
                used = cpu_since(mark)
                cpu[name].append(used)
                if name == "one":
                    daemon_cpu.append(used - mine)
                    after = _flushes()
                    for kind in KINDS:
                        flushes[kind] += after[kind] - before[kind]
        spawned = runner.spawned() - spawned_before
    target = dict(base)
    for steps in changes.values():
        target.update({s.path: s.new for s in steps if s.new is not None})
    wl.check_tree(ours, target, f"{ROW} (promoter)")
    wl.check_tree(bare, target, f"{ROW} (git apply)")
    one_p50, apply_p50 = statistics.median(timed["one"]), statistics.median(timed["apply"])
    table.add(ROW, one_p50 / apply_p50)
    pairs = [a / b for a, b in zip(timed["one"], timed["apply"], strict=True)]
    table.note(f"{ROW}.pair_ratio_median", statistics.median(pairs))
    table.note(f"{ROW}.p50_ms", 1000 * one_p50)
    table.note(f"{ROW}.apply_p50_ms", 1000 * apply_p50)
    table.note(f"{ROW}.daemon_cpu_ms_per_flow", 1000 * statistics.median(daemon_cpu))
    table.note(f"{ROW}.cpu_ms_per_flow", 1000 * statistics.median(cpu["one"]))
    table.note(f"{ROW}.apply_cpu_ms_per_flow", 1000 * statistics.median(cpu["apply"]))
    table.note(f"{ROW}.files_per_change", statistics.median(SIZES))
    table.note(f"{ROW}.git_per_flow", spawned / FLOWS)
    for kind in KINDS:
        table.note(f"{ROW}.{kind}_per_flow", flushes[kind] / FLOWS)
    table.note(f"{ROW}.flushes_per_flow", sum(flushes.values()) / FLOWS)
