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

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from bench import documents as bd
from bench import workload as wl
from bench.harness import Table, _cpu_times, daemon
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex
from promoter.fs import flush
from promoter.git import runner

GOALS = {"flow_1": (10.0, "x")}
LABELS = {"flow_1": "1-file flow p50 (upload + submit + promote) vs bare 1-file write"}
FLOWS = 7


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
