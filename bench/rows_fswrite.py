"""The write path's rows of the speed table: peak memory promoting big new files.

- ``rss_promote_4x256mib``: the peak resident set (``VmHWM`` of ``/proc/self/status``, MiB)
  of a child process that opens the state directory and promotes a verified bundle of
  4 new files of 256 MiB each (evidence re-check, staging, writes, read-back), measured
  side by side with the same child that opens the state directory and promotes nothing
  (``rss_promote_4x256mib.idle_mib``: the floor of imports and services). The set-up
  (repository, blobs written chunk by chunk into the store, grant, lease, the bundle's
  first verification) runs in this process and is not measured.

``bench_table`` calls ``rss_promote`` once per round; ``python -m bench.bench_table --rows
rss_promote_4x256mib,promote_1150,promote_115`` runs only these rows (this module does not
import the table: the table imports it). ``python -m bench.rows_fswrite --child ...`` is
the measured child.

Deliberately not here: gating on the figures, and any other row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import documents as bd
from bench import workload as wl
from bench.variables import stop_on_unknown
from promoter.config import RepositoryConfig, load_settings
from promoter.domain.models import blob_path
from promoter.engine.intake import grants
from promoter.engine.intake.bundles import submit_bundle
from promoter.engine.operation import requests, runner, views
from promoter.engine.services import build_services

if TYPE_CHECKING:  # the measured child must not import the daemon's web stack
    from bench.harness import Table

GOALS = {"rss_promote_4x256mib": (150.0, "MiB")}
LABELS = {"rss_promote_4x256mib": "peak RSS promoting 4 x 256 MiB new files"}
FILES, SIZE = 4, 256 << 20
_CHUNK = 1 << 20


def _write_blob(audit: Path, seed: int, size: int) -> tuple[str, int]:
    """A blob of ``size`` pseudo-random bytes written into the store layout in chunks."""
    rng = random.Random(seed)
    (audit / "tmp").mkdir(parents=True, exist_ok=True)
    temp = audit / "tmp" / f"bench-{seed}"
    digest = hashlib.sha256()
    with temp.open("wb") as handle:
        left = size
        while left:
            chunk = rng.randbytes(min(_CHUNK, left))
            digest.update(chunk)
            handle.write(chunk)
            left -= len(chunk)
    target = audit / blob_path(digest.hexdigest())
    target.parent.mkdir(parents=True, exist_ok=True)
    temp.chmod(0o444)
    temp.rename(target)
    return digest.hexdigest(), size


def prepare(here: Path, files: int = FILES, size: int = SIZE) -> tuple[Path, Path, str, str]:
    """A repository and a state directory holding a verified bundle of ``files`` creates.

    Returns (repository, state directory, bundle id, receipt sha256).
    """
    repo, state = here / "repo", here / "state"
    repo.mkdir(parents=True)
    wl.git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_bytes(b"# big files\n")
    wl.git(repo, "add", "-A")
    wl.git(repo, "commit", "-q", "-m", "base")
    base_commit = wl.git(repo, "rev-parse", "HEAD").decode().strip()
    base_tree = wl.git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    blobs = [_write_blob(state / "audit", seed, size) for seed in range(files)]
    settings = load_settings(
        state_dir=state, repositories={bd.REPO_NAME: RepositoryConfig(path=repo)}
    )
    services = build_services(settings)
    try:
        identity = services.registry.by_name(bd.REPO_NAME).identity
        document = bd.grant_document(
            identity,
            base_commit,
            base_tree,
            max_changes=files,
            max_total_bytes=files * size,
            operations=["create"],
            grant_id="grt_bench_rss",
        )
        grant, _ = grants.register_grant(services, document)
        grants.set_lease(services, bd.WORKFLOW, bd.STAGE, bd.lease_document())
        changes = [
            {"path": f"big/f{n}.bin", "operation": "create", "old": bd.state_of(None), "new": s}
            for n, s in enumerate(bd.stored_state(d, b) for d, b in blobs)
        ]
        assert grant.grant_sha256 is not None
        bundle = bd.bundle_document(document, grant.grant_sha256, changes)
        submitted = submit_bundle(services, bundle, run_id=None)
    finally:
        services.close()
    return repo, state, submitted.bundle.bundle_id, submitted.receipt.receipt_sha256


def _peak_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(repo: Path, state: Path, bundle_id: str, receipt: str, *, promote: bool) -> None:
    """The measured process: open the state directory, promote (or not), print the peak."""
    settings = load_settings(
        state_dir=state, repositories={bd.REPO_NAME: RepositoryConfig(path=repo)}
    )
    services = build_services(settings)
    status = "idle"
    try:
        if promote:
            requested = requests.request_promotion(services, bundle_id, receipt, bd.FENCE)
            runner.wait_for(services, requested.operation_id, timeout=3600)
            status = views.operation_view(services.db, requested.operation_id).status
        runner.runner(services).shutdown()
    finally:
        services.close()
    print(json.dumps({"peak_mib": _peak_mib(), "status": status}), flush=True)


def _run_child(prepared: tuple[Path, Path, str, str], *, promote: bool) -> dict[str, Any]:
    repo, state, bundle_id, receipt = prepared
    argv = [sys.executable, "-m", "bench.rows_fswrite", "--child", str(repo), str(state)]
    argv += [bundle_id, receipt, "promote" if promote else "idle"]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=3600)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rss_promote(
    table: Table, work: Path, round_no: int, files: int = FILES, size: int = SIZE
) -> None:
    here = work / f"rss{round_no}"
    prepared = prepare(here, files, size)
    figures: dict[str, dict[str, Any]] = {}
    runs: list[tuple[str, Callable[[], None]]] = [
        ("promote", lambda: figures.__setitem__("promote", _run_child(prepared, promote=True))),
        ("idle", lambda: figures.__setitem__("idle", _run_child(prepared, promote=False))),
    ]
    for _, run in runs[round_no % 2 :] + runs[: round_no % 2]:
        run()
    if figures["promote"]["status"] != "completed":
        raise AssertionError(f"the promotion ended {figures['promote']['status']}")
    for n in range(files):
        if (prepared[0] / f"big/f{n}.bin").stat().st_size != size:
            raise AssertionError(f"big/f{n}.bin does not hold {size} bytes")
    table.add("rss_promote_4x256mib", figures["promote"]["peak_mib"])
    table.note("rss_promote_4x256mib.idle_mib", figures["idle"]["peak_mib"])
    shutil.rmtree(here)


def main(argv: list[str] | None = None) -> int:
    """The measured child (``--child``): ``rss_promote`` starts it, one per promotion."""
    parser = argparse.ArgumentParser(description="The measured child of rss_promote_4x256mib.")
    parser.add_argument("--child", nargs=5, required=True, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    repo, state, bundle_id, receipt, mode = args.child
    child(Path(repo), Path(state), bundle_id, receipt, promote=mode == "promote")
    return 0


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    raise SystemExit(main())
