"""The set-up of a run's step: three requests against ``POST /v1/runs``, side by side.

``python -m bench.run_setup [ROUNDS]`` starts ``promoter serve`` in its own process on a
small fresh repository and times, in alternating order round by round, what an
orchestrator does before an executor starts: ``POST /v1/grants``, ``PUT
/v1/leases/{workflow}/{stage}`` and ``POST /v1/executor-tokens`` (three requests), and
the same in one ``POST /v1/runs``. Each round uses new grant ids and a new workflow, so
both sides register, set and mint for real. It prints the medians and the ratio.

Deliberately not here: a row of the speed table, any gating on the figures.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import documents as bd
from bench.harness import daemon_process
from bench.variables import stop_on_unknown
from promoter.client.sync import PromoterClient

ROUNDS = 20


def _repo(path: Path) -> tuple[str, str]:
    path.mkdir()
    (path / "README.md").write_bytes(b"# bench\n")
    for argv in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "base"],
    ):
        subprocess.run(["git", "-C", str(path), *argv], check=True)
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD", "HEAD^{tree}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return out[0], out[1]


def main(rounds: int = ROUNDS) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="run-setup-") as tmp:
        work = Path(tmp)
        commit, tree = _repo(work / "repo")
        with (
            daemon_process(work / "state", work / "repo") as (url, token, identity),
            PromoterClient(url, token, timeout=600) as orch,
        ):

            def grant(name: str) -> dict[str, Any]:
                return bd.grant_document(
                    identity,
                    commit,
                    tree,
                    max_changes=10,
                    grant_id=f"grt_{name}",
                    workflow=f"wf_{name}",
                )

            def three(n: int) -> None:
                document = grant(f"three{n}")
                orch.register_grant(document)
                orch.set_lease(document["workflow_id"], bd.STAGE, bd.lease_document())
                orch.mint_executor_token(bd.RUN_ID, 3600)

            def one(n: int) -> None:
                orch.open_run(grant(f"one{n}"), bd.lease_document(), 3600)

            three(0)  # untimed: the folders and statements every later call finds made
            one(0)
            timed: dict[str, list[float]] = {"three": [], "one": []}
            for n in range(1, rounds + 1):
                pair = [("three", three), ("one", one)]
                for name, call in pair[n % 2 :] + pair[: n % 2]:
                    started = time.perf_counter()
                    call(n)
                    timed[name].append(time.perf_counter() - started)
    three_ms = 1000 * statistics.median(timed["three"])
    one_ms = 1000 * statistics.median(timed["one"])
    return {"three_p50_ms": three_ms, "one_p50_ms": one_ms, "ratio": one_ms / three_ms}


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    figures = main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)
    print(
        f"grant + lease + token, three requests: {figures['three_p50_ms']:.1f} ms p50; "
        f"POST /v1/runs: {figures['one_p50_ms']:.1f} ms p50; ratio {figures['ratio']:.2f}"
    )
