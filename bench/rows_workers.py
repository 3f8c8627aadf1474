"""The speed table's row for ``promoter serve --workers``: 2 workers against 1, same load.

Per round, two daemons in processes of their own, as deployed (``promoter serve``, SQLite
ledger), each guarding ``REPOSITORIES`` copies of a ``bench.workload`` source: one with
``--workers 1``, one with ``--workers 2``, in an order that rotates with the round. Each
is driven by ``CLIENTS`` threads, client ``n`` promoting into repository ``n`` only:
1-file flows in one request (``PromoterClient.promote_with_evidence`` with ``wait``, the
orchestrator's token and the run's), one untimed flow each, then ``FLOWS`` each, all
threads released together; timed from the release to the last thread's end. Grants,
lease and executor token are set up untimed.

Row: ``promotions_workers_2_over_1``: the 2-worker daemon's time for the same promotions
over the 1-worker daemon's (goal ≤ 0.625: at least 1.6 times the promotions a second).
Details: each daemon's promotions a second, and the processor milliseconds a flow of the
clients (this process, in the timed span) and of the daemon (its process and workers,
read from ``/proc``). Both daemons run on this machine with the clients, which take
their share of its cores.

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import resource
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import documents as bd
from bench import workload as wl
from bench.harness import Table, served_process, tree_cpu_seconds
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex

GOALS = {"promotions_workers_2_over_1": (0.625, "x")}
LABELS = {
    "promotions_workers_2_over_1": "promotions, 8 clients x 8 repos: 2 workers' time / 1's",
}
CLIENTS = 8
REPOSITORIES = 8
FLOWS = 6


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rate(here: Path, source: wl.Source, workers: int, round_no: int) -> dict[str, float]:
    """Promotions a second of ``CLIENTS`` threads against a ``--workers workers`` daemon,
    and the processor seconds a flow of the clients (this process) and of the daemon."""
    here.mkdir()
    repos = {f"r{n}": wl.copy_repo(source.path, here / f"r{n}") for n in range(REPOSITORIES)}
    with ExitStack() as stack:
        state = here / "state"
        url, pid = stack.enter_context(served_process(state, repos, workers))
        token = (state / "credentials" / "orchestrator.token").read_text().strip()
        orch = stack.enter_context(PromoterClient(url, token, timeout=600))
        identities = {str(r["name"]): str(r["repository_identity"]) for r in orch.repositories()}
        grants: list[dict[str, Any]] = []
        for n in range(CLIENTS):
            grant = bd.grant_document(
                identities[f"r{n % REPOSITORIES}"],
                source.base_commit,
                source.base_tree,
                max_changes=10,
                grant_id=f"grt_w{n}",
            )
            registered = orch.register_grant(grant)
            grants.append({**grant, "grant_sha256": registered["grant_sha256"]})
        executor = str(orch.mint_executor_token(bd.RUN_ID)["token"])
        orch.set_lease(bd.WORKFLOW, bd.STAGE, bd.lease_document())
        start = threading.Barrier(CLIENTS + 1)
        errors: list[BaseException] = []

        def client(n: int) -> None:
            try:
                with PromoterClient(url, token, timeout=600) as mine:
                    for flow in range(FLOWS + 1):
                        if flow == 1:
                            start.wait()
                        data = b"client %d flow %d round %d workers %d\n" % (
                            n,
                            flow,
                            round_no,
                            workers,
                        )
                        change = {
                            "path": f"w{n}-{flow}.txt",
                            "operation": "create",
                            "old": bd.state_of(None),
                            "new": bd.state_of(data),
                        }
                        grant = grants[n]
                        bundle = bd.bundle_document(grant, grant["grant_sha256"], [change])
                        done = mine.promote_with_evidence(
                            bundle,
                            [(sha256_hex(data), len(data), data)],
                            bd.FENCE,
                            executor_token=executor,
                            wait=True,
                        )
                        if done["operation"].get("status") != "completed":
                            raise AssertionError(f"the promotion ended {done['operation']}")
            except BaseException as exc:
                errors.append(exc)
                start.abort()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        clients_cpu, daemon_cpu = _own_cpu_seconds(), tree_cpu_seconds(pid)
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        clients_cpu = _own_cpu_seconds() - clients_cpu
        daemon_cpu = tree_cpu_seconds(pid) - daemon_cpu
        if errors:
            raise errors[0]
    flows = CLIENTS * FLOWS
    return {
        "per_second": flows / elapsed,
        "client_cpu_ms": 1000 * clients_cpu / flows,
        "daemon_cpu_ms": 1000 * daemon_cpu / flows,
    }


def promotions_workers(table: Table, work: Path, round_no: int, source: wl.Source) -> None:
    counts = (1, 2) if round_no % 2 == 0 else (2, 1)
    rates = {n: _rate(work / f"workers-{n}-{round_no}", source, n, round_no) for n in counts}
    table.add("promotions_workers_2_over_1", rates[1]["per_second"] / rates[2]["per_second"])
    for n, name in ((1, "1_worker"), (2, "2_workers")):
        for key, value in rates[n].items():
            table.note(f"promotions_workers.{key}_{name}", value)
