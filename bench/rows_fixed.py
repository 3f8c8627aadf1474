"""The speed table's row for the fixed cost of a change: a 1-file flow.

- ``flow_1``: the median time of a 1-file flow (``PUT`` of its blob, ``POST /v1/bundles``,
  ``POST /v1/promotions`` with ``wait``) against a daemon in this process, over the
  median of a bare durable write of one file (temp, fsync, rename, parent fsync:
  ``bench.workload.bare_loop``) on an identical copy, the two alternating flow by flow
  (``FLOWS`` pairs a round, after one untimed flow). The grant, the executor token and
  the lease are set up once, untimed: what every change then pays is timed.
  Details: the medians in milliseconds (``flow_1.p50_ms``, ``flow_1.bare_p50_ms``), the
  slowest flow (``flow_1.max_ms``), and what does not depend on the machine's load: the
  flushes a flow makes (``flow_1.fsync_per_flow``, ``flow_1.syncfs_per_flow``,
  ``flow_1.sqlite_commit_per_flow``: ``promoter.fs.flush``'s counter), the git processes
  it starts (``flow_1.git_per_flow``) and the processor time of this process and its
  git children, user plus system, client included (``flow_1.cpu_ms_per_flow``).

- ``flow_10``: the same for an agent-sized change of ``AGENT_FILES`` new files of
  ``AGENT_LINES`` lines each (the blobs uploaded in one framed batch, the bundle
  submitted, the promotion with ``wait``), over ``git apply`` of the same change as a
  patch plus ``sync`` on an identical copy. The promotion alone over the same ``git
  apply`` + ``sync`` is a detail (``flow_10.promotion_ratio``), as are the medians in
  milliseconds and the flushes and git processes of a change.

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

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

GOALS = {"flow_1": (10.0, "x"), "flow_10": (4.0, "x")}
LABELS = {
    "flow_1": "1-file flow p50 (upload + submit + promote) vs bare 1-file write",
    "flow_10": "10-file change p50 (upload + submit + promote) vs git apply + sync",
}
FLOWS = 7
AGENT_FILES, AGENT_LINES = 10, 20


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
    table.add("flow_1", flow_p50 / bare_p50)
    table.note("flow_1.p50_ms", 1000 * flow_p50)
    table.note("flow_1.bare_p50_ms", 1000 * bare_p50)
    table.note("flow_1.max_ms", 1000 * max(timed["flow"]))
    table.note("flow_1.cpu_ms_per_flow", 1000 * cpu / FLOWS)
    table.note("flow_1.git_per_flow", spawned / FLOWS)
    for kind in ("fsync", "fdatasync", "syncfs", "sqlite_commit"):
        table.note(f"flow_1.{kind}_per_flow", flushes[kind] / FLOWS)


def _agent_files(n: int, round_no: int) -> dict[str, bytes]:
    lines = [
        b"line %d of file %%d, change %d, round %d\n" % (i, n, round_no) for i in range(AGENT_LINES)
    ]
    return {f"agent{n}/f{k}.py": b"".join(line % k for line in lines) for k in range(AGENT_FILES)}


def _patch(files: dict[str, bytes]) -> bytes:
    """``git diff`` of creating ``files`` (text, one hunk each)."""
    out = []
    for path, data in files.items():
        body = data.splitlines(keepends=True)
        out.append(
            f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1,{len(body)} @@\n".encode()
        )
        out += [b"+" + line for line in body]
    return b"".join(out)


def flow_10(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    here = work / f"flow10-{round_no}"
    here.mkdir()
    ours = wl.copy_repo(source.path, here / "promoter")
    bare = wl.copy_repo(source.path, here / "bare")
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
                promotion: list[float] = []

                def flow(n: int) -> None:
                    files = _agent_files(n, round_no)
                    changes = [
                        {
                            "path": path,
                            "operation": "create",
                            "old": bd.state_of(None),
                            "new": bd.state_of(data),
                        }
                        for path, data in files.items()
                    ]
                    bundle = bd.bundle_document(grant, registered["grant_sha256"], changes)
                    upload(executor, list(files.values()))  # one framed batch
                    submitted = executor.submit_bundle(bundle)
                    receipt = submitted["verification_receipt"]["receipt_sha256"]
                    started = time.perf_counter()
                    done = orch.promote(bundle["bundle_id"], receipt, bd.FENCE, wait=True)
                    promotion.append(time.perf_counter() - started)
                    if done.get("status") != "completed":
                        raise AssertionError(f"the promotion ended {done.get('status')}: {done}")

                def apply(n: int) -> None:
                    patch = here / f"agent{n}.patch"
                    patch.write_bytes(_patch(_agent_files(n, round_no)))
                    subprocess.run(["git", "apply", str(patch)], cwd=bare, check=True)
                    os.sync()

                flow(0)  # untimed, as in flow_1
                apply(0)
                promotion.clear()
                timed: dict[str, list[float]] = {"flow": [], "apply": []}
                flushes_before, spawned_before = flush.flushes(), runner.spawned()
                for n in range(1, FLOWS + 1):
                    pair = [("flow", flow), ("apply", apply)]
                    for name, call in pair[(n + round_no) % 2 :] + pair[: (n + round_no) % 2]:
                        os.sync()
                        started = time.perf_counter()
                        call(n)
                        timed[name].append(time.perf_counter() - started)
                flushes = flush.flushes() - flushes_before
                spawned = runner.spawned() - spawned_before
    for n in range(1, FLOWS + 1):
        for path, data in _agent_files(n, round_no).items():
            if (ours / path).read_bytes() != data or (bare / path).read_bytes() != data:
                raise AssertionError(f"{path} differs after the flows")
    flow_p50, apply_p50 = statistics.median(timed["flow"]), statistics.median(timed["apply"])
    table.add("flow_10", flow_p50 / apply_p50)
    table.note("flow_10.promotion_ratio", statistics.median(promotion) / apply_p50)
    table.note("flow_10.p50_ms", 1000 * flow_p50)
    table.note("flow_10.promotion_p50_ms", 1000 * statistics.median(promotion))
    table.note("flow_10.apply_p50_ms", 1000 * apply_p50)
    table.note("flow_10.git_per_flow", spawned / FLOWS)
    for kind in ("fsync", "syncfs", "sqlite_commit"):
        table.note(f"flow_10.{kind}_per_flow", flushes[kind] / FLOWS)
