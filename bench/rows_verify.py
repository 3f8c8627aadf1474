"""The verification rows: a 10 000-change bundle's first submission, and ``/healthz``.

``verification`` times the first ``POST /v1/bundles`` of the bundle to a fresh daemon
(a client process of its own, started before it is timed) over re-hashing every blob
plus JCS of the bundle (``verify_10k``); on a second fresh daemon the same submission
runs beside a process polling ``/healthz`` back to back, whose largest latency is
``healthz_during_verify_10k``. ``creates`` makes the bundle's changes.
Deliberately not here: the other rows and the table (``bench.bench_table``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rfc8785

from bench import documents as bd
from bench import workload as wl
from bench.harness import Table, alternate, daemon
from promoter.client.sync import PromoterClient
from promoter.domain.canonical import sha256_hex
from promoter.domain.models import blob_path


def creates(count: int, size: int) -> list[wl.Step]:
    rng = random.Random(11)
    return [
        wl.Step(f"verify/d{i // 100:03d}/c{i:05d}.txt", None, wl.random_text(rng, size))
        for i in range(count)
    ]


def _plain_blob_store(blobs_root: Path, blobs: list[bytes]) -> None:
    """Blob files in the store's layout, written without fsync (set-up, not measured)."""
    for data in blobs:
        target = blobs_root.parent / blob_path(sha256_hex(data))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o444)


_PROBE = """
import json, statistics, sys, threading, time, httpx
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
seen = []
with httpx.Client(base_url=sys.argv[1], timeout=60) as client:
    client.get("/healthz").raise_for_status()
    print("ready", flush=True)
    while not stop.is_set():
        started = time.perf_counter()
        client.get("/healthz").raise_for_status()
        seen.append(time.perf_counter() - started)
print(json.dumps({"max_ms": 1000 * max(seen, default=0), "polls": len(seen),
                  "median_ms": 1000 * statistics.median(seen or [0])}), flush=True)
"""


@contextmanager
def healthz_probe(url: str) -> Iterator[Callable[[], dict[str, float]]]:
    """A separate process polling ``/healthz`` (so it does not share this process's GIL)
    from entry until the returned callable is called, which answers its latencies."""
    probe = subprocess.Popen(
        [sys.executable, "-c", _PROBE, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert probe.stdin is not None and probe.stdout is not None
    try:
        if probe.stdout.readline().strip() != "ready":
            raise RuntimeError("the /healthz probe did not start")

        def finish() -> dict[str, float]:
            assert probe.stdin is not None and probe.stdout is not None
            probe.stdin.write("stop\n")
            probe.stdin.flush()
            figures: dict[str, float] = json.loads(probe.stdout.readline())
            return figures

        yield finish
    finally:
        probe.kill()
        probe.wait(60)


_SUBMIT = """
import json, sys, time
from promoter.client.sync import PromoterClient
bundle = json.loads(open(sys.argv[3], encoding="utf-8").read())
with PromoterClient(sys.argv[1], sys.argv[2], timeout=3600) as executor:
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    executor.submit_bundle(bundle)
    print(json.dumps(time.perf_counter() - started), flush=True)
"""


@contextmanager
def submitter(url: str, token: str, document: Path) -> Iterator[Callable[[], float]]:
    """A separate process holding the bundle ``document``, ready to submit it: the returned
    callable has it submit and answers the seconds its client took (encoding included).

    A client in the daemon's own interpreter would stall the daemon's event loop while it
    encodes the 10 000-change body (one C call holding the lock) and bill that to
    ``/healthz``; a deployed daemon never shares its interpreter with a client.
    """
    client = subprocess.Popen(
        [sys.executable, "-c", _SUBMIT, url, token, str(document)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        if client.stdout.readline().strip() != "ready":
            raise RuntimeError("the submitting client did not start")

        def submit() -> float:
            assert client.stdin is not None and client.stdout is not None
            client.stdin.write("go\n")
            client.stdin.flush()
            answer = client.stdout.readline()
            if not answer.strip():
                raise RuntimeError("the submitting client failed")
            seconds: float = json.loads(answer)
            return seconds

        yield submit
    finally:
        client.kill()
        client.wait(60)


def _submission(
    here: Path, source: wl.Source, creates: list[wl.Step], *, probed: bool
) -> dict[str, float]:
    """One first submission of the ``creates`` bundle to a fresh daemon in ``here``: its
    seconds, and with ``probed`` the ``/healthz`` figures of a probe polling meanwhile."""
    (here / "state" / "audit").mkdir(parents=True)
    repo = wl.copy_repo(source.path, here / "repo")
    _plain_blob_store(
        here / "state" / "audit" / "blobs", [s.new for s in creates if s.new is not None]
    )
    with daemon(here / "state", repo) as (url, services):
        identity = services.registry.by_name(bd.REPO_NAME).identity
        grant = bd.grant_document(
            identity, source.base_commit, source.base_tree, max_changes=len(creates) + 10
        )
        with PromoterClient(url, services.tokens["orchestrator"], timeout=3600) as orch:
            registered = orch.register_grant(grant)
            token = orch.mint_executor_token(bd.RUN_ID)["token"]
        document = here / "bundle.json"
        bundle = bd.bundle_document(grant, registered["grant_sha256"], bd.step_changes(creates))
        document.write_text(json.dumps(bundle))
        figures: dict[str, float] = {}
        # the probe and the submitting client are processes of their own, started (and
        # stopped) outside the time taken; neither shares the daemon's interpreter lock
        os.sync()
        started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            probe = stack.enter_context(healthz_probe(url)) if probed else None
            submit = stack.enter_context(submitter(url, token, document))
            figures["seconds"] = submit()
            if probe is not None:
                figures.update(probe())
        figures["with_start"] = time.perf_counter() - started  # the processes' starts too
    return figures


def verification(
    table: Table, work: Path, round_no: int, source: wl.Source, creates: list[wl.Step]
) -> None:
    """The submission alone and, on a daemon of its own, beside a back-to-back probe.

    ``verify_10k`` is the submission alone: the probe's polls each take the interpreter
    lock from the verifying worker (about 0.2 ms a poll, over 1000 polls a submission), so
    a probed submission measures the probe's load as much as the verification. That
    figure is kept (``verify_10k.beside_probe``), and ``/healthz`` is measured there.
    """
    here = work / f"verify{round_no}"
    alone = here / "alone"
    blobs = [s.new for s in creates if s.new is not None]
    figures: dict[str, dict[str, float]] = {}
    bundle: dict[str, Any] = {}

    def baseline() -> None:
        for data in blobs:
            sha256_hex((alone / "state" / "audit" / blob_path(sha256_hex(data))).read_bytes())
        sha256_hex(rfc8785.dumps(bundle))

    order = [("alone", False), ("probed", True)]
    for name, probed in order if round_no % 2 == 0 else order[::-1]:
        figures[name] = _submission(here / name, source, creates, probed=probed)
    bundle.update(json.loads((alone / "bundle.json").read_text()))
    seconds = alternate(round_no, [("baseline", baseline)])
    table.add("verify_10k", figures["alone"]["seconds"] / seconds["baseline"])
    table.note("verify_10k.seconds", figures["alone"]["seconds"])
    table.note("verify_10k.baseline_seconds", seconds["baseline"])
    table.note("verify_10k.beside_probe", figures["probed"]["seconds"] / seconds["baseline"])
    table.note("verify_10k.beside_probe_seconds", figures["probed"]["seconds"])
    table.note("verify_10k.seconds_with_probe_start", figures["probed"]["with_start"])
    table.add("healthz_during_verify_10k", figures["probed"]["max_ms"])
    table.note("healthz_during_verify_10k.median_ms", figures["probed"]["median_ms"])
    table.note("healthz_during_verify_10k.polls", figures["probed"]["polls"])
    # kept until the run ends (see the module docstring: deleted inodes)
