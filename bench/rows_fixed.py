"""The speed table's rows for the fixed cost of a change: a 1-file flow, an agent-sized one.

- ``flow_1``: the median time of a 1-file flow (``PUT`` of its blob, ``POST /v1/bundles``,
  ``POST /v1/promotions`` with ``wait``) against a daemon in this process; its ratio over
  the median of a bare durable write of one file (temp, fsync, rename, parent fsync:
  ``bench.workload.bare_loop``) on an identical copy, the two alternating flow by flow
  (``FLOWS`` pairs a round, after one untimed flow). The grant, the executor token and
  the lease are set up once, untimed: what every change then pays is timed. The ratio is
  a detail (``flow_1.over_bare_write``), not a row judged against a goal: its goal of
  10× was retired for the rows against the serving stack's own floor
  (``bench.rows_one_request``), which the stack alone makes unreachable. Details: the
  medians in milliseconds (``flow_1.p50_ms``, ``flow_1.bare_p50_ms``), the slowest flow
  (``flow_1.max_ms``), and what does not depend on the machine's load: the
  flushes a flow makes (``flow_1.fsync_per_flow``, ``flow_1.syncfs_per_flow``,
  ``flow_1.sqlite_commit_per_flow``: ``promoter.fs.flush``'s counter), the git processes
  it starts (``flow_1.git_per_flow``) and the processor time of this process and its
  git children, user plus system, client included (``flow_1.cpu_ms_per_flow``).

- ``flow_10``: the same for an agent-sized change mixed as a commit mixes it
  (``agent_change``: ``AGENT_MODIFIED`` tracked files with a block of 20-60 lines
  rewritten, ``AGENT_CREATED`` new files of 20-60 lines in a new directory; the old
  and new contents uploaded in one framed batch, the bundle submitted, the promotion with
  ``wait``), over ``git apply`` of the same change as a patch (``agent_patch``) plus
  ``sync`` on an identical copy. Each change of a round modifies files no earlier one
  touched, so every bundle's old states are the base commit's.
- ``flow_10_promotion``: the promotion alone of the same changes (``POST
  /v1/promotions`` with ``wait``, timed inside each flow) over the same ``git apply`` +
  ``sync``. Details of both: the medians in milliseconds, the processor time (user plus
  system, of this process with its daemon threads and of its git children) of a flow
  (``flow_10.cpu_ms_per_flow``) and of a promotion and of ``git apply`` + ``sync`` per
  change in microseconds (``flow_10_promotion.cpu_us_per_change``,
  ``flow_10_promotion.apply_cpu_us_per_change``), and the flushes and git processes of
  a flow.

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import difflib
import os
import statistics
import subprocess
import time
from pathlib import Path

from bench import documents as bd
from bench import workload as wl
from bench.harness import Table, _cpu_times, daemon, upload
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex
from promoter.fs import flush
from promoter.git import runner

GOALS = {"flow_10": (4.0, "x"), "flow_10_promotion": (2.0, "x")}
LABELS = {
    "flow_10": "10-file change p50 (upload + submit + promote) vs git apply + sync",
    "flow_10_promotion": "the same, promotion alone, vs git apply + sync",
}
FLOWS = 7
AGENT_MODIFIED, AGENT_CREATED = 7, 3  # an agent-sized change, as a commit mixes them
AGENT_FILES = AGENT_MODIFIED + AGENT_CREATED


def flow_1(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    here = work / f"flow1-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    bare = wl.copy_repo(source.path, here / "bare")
    with daemon(here / "state", ours) as (url, services):
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity, source.base_commit, source.base_tree, max_changes=10, grant_id="grt_flow1"
        )
        orch_token = services.tokens["orchestrator"]
        with PromoterClient(url, orch_token, timeout=600) as orch:
            registered = orch.register_grant(grant)
            token = orch.mint_executor_token(bd.RUN_ID)["token"]
            orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
            with orch.with_token(token) as executor:

                def flow(n: int) -> None:
                    data = b"flow %d of round %d\n" % (n, round_no)
                    change = {
                        "path": f"flow1-{n}.txt",
                        "operation": "create",
                        "old": bd.state_of(None),
                        "new": bd.state_of(data),
                    }
                    bundle = bd.bundle_document(grant, registered["grant_sha256"], [change])
                    executor.put_blob(sha256_hex(data), data)
                    submitted = executor.submit_bundle(bundle)
                    receipt = submitted["verification_receipt"]["receipt_sha256"]
                    done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                    if done.get("status") != "completed":
                        raise AssertionError(f"the promotion ended {done.get('status')}: {done}")

                def bare_write(n: int) -> None:
                    step = wl.Step(f"flow1-{n}.txt", None, b"flow %d of round %d\n" % (n, round_no))
                    wl.bare_loop(bare, [step])

                flow(0)  # untimed: the folders and statements every later flow finds made
                bare_write(0)
                timed: dict[str, list[float]] = {"flow": [], "bare": []}
                cpu = 0.0
                flushes_before, spawned_before = flush.flushes(), runner.spawned()
                for n in range(1, FLOWS + 1):
                    pair = [("flow", flow), ("bare", bare_write)]
                    for name, call in pair[(n + round_no) % 2 :] + pair[: (n + round_no) % 2]:
                        os.sync()
                        user, system = _cpu_times()
                        started = time.perf_counter()
                        call(n)
                        timed[name].append(time.perf_counter() - started)
                        if name == "flow":
                            after_user, after_system = _cpu_times()
                            cpu += (after_user - user) + (after_system - system)
                flushes = flush.flushes() - flushes_before
                spawned = runner.spawned() - spawned_before
    flow_p50, bare_p50 = statistics.median(timed["flow"]), statistics.median(timed["bare"])
    table.note("flow_1.over_bare_write", flow_p50 / bare_p50)  # a retired goal: no row
    table.note("flow_1.p50_ms", 1000 * flow_p50)
    table.note("flow_1.bare_p50_ms", 1000 * bare_p50)
    table.note("flow_1.max_ms", 1000 * max(timed["flow"]))
    table.note("flow_1.cpu_ms_per_flow", 1000 * cpu / FLOWS)
    table.note("flow_1.git_per_flow", spawned / FLOWS)
    for kind in ("fsync", "fdatasync", "syncfs", "sqlite_commit"):
        table.note(f"flow_1.{kind}_per_flow", flushes[kind] / FLOWS)


def agent_change(n: int, round_no: int, base: dict[str, bytes]) -> list[wl.Step]:
    """Change ``n`` of a round: ``AGENT_MODIFIED`` base files with a block of 20-60 lines
    rewritten (no file twice in a round) and ``AGENT_CREATED`` new files of 20-60 lines."""
    paths = sorted(base)
    if len(paths) < AGENT_MODIFIED * (FLOWS + 1):
        raise ValueError(f"{len(paths)} base files are too few for the agent-sized changes")
    steps: list[wl.Step] = []
    for k in range(AGENT_MODIFIED):
        index = n * AGENT_MODIFIED + k
        path = paths[index]
        old = base[path].splitlines(keepends=True)
        count = min(len(old), _line_count(index))
        start = (7 * index) % (len(old) - count + 1)
        block = _lines(count, f"{path}, change {n}, round {round_no}")
        steps.append(
            wl.Step(path, base[path], b"".join(old[:start] + block + old[start + count :]))
        )
    for k in range(AGENT_CREATED):
        lines = _lines(_line_count(n * AGENT_CREATED + k + 3), f"new {k}, change {n}")
        steps.append(wl.Step(f"agent{n}/new{k}.py", None, b"".join(lines)))
    return sorted(steps, key=lambda step: step.path.encode())


def _line_count(index: int) -> int:
    """Between 20 and 60 lines, varying with ``index``."""
    return 20 + (13 * index) % 41


def _lines(count: int, what: str) -> list[bytes]:
    return [f"    line {i} of {what}\n".encode() for i in range(count)]


def agent_patch(steps: list[wl.Step]) -> bytes:
    """``git diff`` of ``steps`` (creations and modifications of text files)."""
    out: list[bytes] = []
    for step in steps:
        path = step.path.encode()
        assert step.new is not None
        out.append(b"diff --git a/%s b/%s\n" % (path, path))
        if step.old is None:
            out.append(b"new file mode 100644\n")
        old = step.old.splitlines(keepends=True) if step.old is not None else []
        out += difflib.diff_bytes(
            difflib.unified_diff,
            old,
            step.new.splitlines(keepends=True),
            b"/dev/null" if step.old is None else b"a/" + path,
            b"b/" + path,
        )
    return b"".join(out)


def flow_10(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    here = work / f"flow10-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    bare = wl.copy_repo(source.path, here / "bare")
    base = wl.tree_files(source.path)
    changes = {n: agent_change(n, round_no, base) for n in range(FLOWS + 1)}
    with daemon(here / "state", ours) as (url, services):
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity,
            source.base_commit,
            source.base_tree,
            max_changes=AGENT_FILES,
            grant_id="grt_flow10",
        )
        with PromoterClient(url, services.tokens["orchestrator"], timeout=600) as orch:
            registered = orch.register_grant(grant)
            token = orch.mint_executor_token(bd.RUN_ID)["token"]
            orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
            with orch.with_token(token) as executor:
                promotion: list[tuple[float, float]] = []  # (wall, processor) seconds

                def flow(n: int) -> None:
                    steps = changes[n]
                    bundle = bd.bundle_document(
                        grant, registered["grant_sha256"], bd.step_changes(steps)
                    )
                    # old and new contents, one framed batch: verification reads both
                    upload(executor, [b for s in steps for b in (s.old, s.new) if b is not None])
                    submitted = executor.submit_bundle(bundle)
                    receipt = submitted["verification_receipt"]["receipt_sha256"]
                    cpu_before, started = sum(_cpu_times()), time.perf_counter()
                    done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                    wall = time.perf_counter() - started
                    promotion.append((wall, sum(_cpu_times()) - cpu_before))
                    if done.get("status") != "completed":
                        raise AssertionError(f"the promotion ended {done.get('status')}: {done}")

                def apply(n: int) -> None:
                    patch = here / f"agent{n}.patch"
                    patch.write_bytes(agent_patch(changes[n]))
                    subprocess.run(["git", "apply", str(patch)], cwd=bare, check=True)
                    os.sync()

                flow(0)  # untimed, as in flow_1
                apply(0)
                promotion.clear()
                timed: dict[str, list[float]] = {"flow": [], "apply": []}
                cpu: dict[str, list[float]] = {"flow": [], "apply": []}
                flushes_before, spawned_before = flush.flushes(), runner.spawned()
                for n in range(1, FLOWS + 1):
                    pair = [("flow", flow), ("apply", apply)]
                    for name, call in pair[(n + round_no) % 2 :] + pair[: (n + round_no) % 2]:
                        os.sync()
                        cpu_before, started = sum(_cpu_times()), time.perf_counter()
                        call(n)
                        timed[name].append(time.perf_counter() - started)
                        cpu[name].append(sum(_cpu_times()) - cpu_before)
                flushes = flush.flushes() - flushes_before
                spawned = runner.spawned() - spawned_before
    target = wl.tree_files(source.path)
    for steps in changes.values():
        target.update({s.path: s.new for s in steps if s.new is not None})
    wl.check_tree(ours, target, "flow_10 (promoter)")
    wl.check_tree(bare, target, "flow_10 (git apply)")
    flow_p50, apply_p50 = statistics.median(timed["flow"]), statistics.median(timed["apply"])
    promotion_p50 = statistics.median(wall for wall, _ in promotion)
    table.add("flow_10", flow_p50 / apply_p50)
    table.add("flow_10_promotion", promotion_p50 / apply_p50)
    table.note("flow_10.p50_ms", 1000 * flow_p50)
    table.note("flow_10.apply_p50_ms", 1000 * apply_p50)
    table.note("flow_10_promotion.p50_ms", 1000 * promotion_p50)
    # processor time (user + system, this process and its git children), medians
    table.note("flow_10.cpu_ms_per_flow", 1000 * statistics.median(cpu["flow"]))
    table.note("flow_10.apply_cpu_ms_per_flow", 1000 * statistics.median(cpu["apply"]))
    promotion_cpu = statistics.median(used for _, used in promotion)
    table.note("flow_10_promotion.cpu_us_per_change", 1e6 * promotion_cpu / AGENT_FILES)
    apply_cpu = statistics.median(cpu["apply"])
    table.note("flow_10_promotion.apply_cpu_us_per_change", 1e6 * apply_cpu / AGENT_FILES)
    table.note("flow_10.git_per_flow", spawned / FLOWS)
    for kind in ("fsync", "syncfs", "sqlite_commit"):
        table.note(f"flow_10.{kind}_per_flow", flushes[kind] / FLOWS)
