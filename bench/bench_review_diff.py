"""The review-diff benchmark: a bundle diff of two huge blobs, on a daemon process.

A repository holds ``big.txt``, ``size`` MiB of two-byte lines; a bundle changes one line
in its middle. A real daemon (``promoter serve`` in its own process) answers
``GET /v1/bundles/{id}/diff`` ``requests`` times at once while this process asks
``/healthz`` again and again. It reports:

- ``diff_s``: the time until every diff answered;
- ``vmhwm_growth_mib``: the daemon's peak resident memory (``VmHWM``, reset to the current
  size just before the requests) minus its size then;
- ``healthz_max_ms`` / ``healthz_median_ms`` / ``healthz_count``: ``/healthz`` meanwhile.

Run it with ``python -m bench.bench_review_diff --size 256 --requests 1`` (and
``--requests 3``); it reports, it does not gate. The blobs are written and uploaded from
files, in chunks, so this process stays small too.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.variables import stop_on_unknown
from tests.gitutil import commit_all
from tests.support.flows import init_repo, make_bundle, make_grant, ts
from tests.support.process import DaemonProcess

MIB = 1024 * 1024
LINE = b"a\n"


def _write(path: Path, size_mib: int, changed: bool) -> tuple[str, int]:
    """``size_mib`` MiB of two-byte lines (one changed in the middle); (sha256, bytes)."""
    digest = hashlib.sha256()
    block = LINE * (MIB // len(LINE))
    with path.open("wb") as out:
        for index in range(size_mib):
            data = block
            if changed and index == size_mib // 2:
                data = b"b\n" + block[2:]
            out.write(data)
            digest.update(data)
    return digest.hexdigest(), size_mib * MIB


def _state(sha256: str, size: int) -> dict[str, Any]:
    return {
        "exists": True,
        "sha256": sha256,
        "mode": "100644",
        "bytes": size,
        "blob_ref": {"path": f"blobs/sha256/{sha256[:2]}/{sha256}", "sha256": sha256},
    }


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(MIB):
            yield chunk


def _vm(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {name}")


def _bundle(daemon: DaemonProcess, repo: Path, old: Path, new: Path) -> str:
    old_sha, old_size = hashlib.sha256(old.read_bytes()).hexdigest(), old.stat().st_size
    new_sha, new_size = hashlib.sha256(new.read_bytes()).hexdigest(), new.stat().st_size
    with daemon.client() as orch:
        identity = orch.get("/v1/repositories").json()["repositories"][0]["repository_identity"]
        grant = make_grant(repo, identity)
        assert orch.post("/v1/grants", json=grant).status_code == 201
        lease = {
            "run_id": "run_1",
            "attempt": 1,
            "generation": 1,
            "resume_epoch": 0,
            "fence": 7,
            "expires_at": ts(timedelta(hours=1)),
        }
        assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
    change = {
        "path": "big.txt",
        "operation": "modify",
        "old": _state(old_sha, old_size),
        "new": _state(new_sha, new_size),
    }
    bundle = make_bundle(grant, [change])
    with daemon.executor("run_1") as ex:
        for path, sha in ((old, old_sha), (new, new_sha)):
            answer = ex.put(f"/v1/blobs/sha256/{sha}", content=_chunks(path))
            assert answer.status_code in (200, 201), answer.text
        answer = ex.post("/v1/bundles", json=bundle)
        assert answer.status_code == 201, answer.text
    return str(bundle["bundle_id"])


def run(size_mib: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="promoter-bench-diff-") as tmp:
        root = Path(tmp)
        repo = init_repo(root / "work")
        _write(repo / "big.txt", size_mib, changed=False)
        commit_all(repo, "big")
        _write(root / "new.txt", size_mib, changed=True)
        daemon = DaemonProcess(root / "state", {"work": repo})
        try:
            bundle_id = _bundle(daemon, repo, repo / "big.txt", root / "new.txt")
            pid = daemon.proc.pid
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            before = _vm(pid, "VmHWM")
            answers: list[dict[str, Any]] = []

            def ask() -> None:
                with daemon.client("operator") as operator:
                    answer = operator.get(f"/v1/bundles/{bundle_id}/diff")
                    answers.append(answer.json())

            threads = [threading.Thread(target=ask) for _ in range(requests)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            latencies: list[float] = []
            with httpx.Client(base_url=daemon.url, timeout=120) as client:
                while any(t.is_alive() for t in threads):
                    asked = time.perf_counter()
                    assert client.get("/healthz").status_code == 200
                    latencies.append((time.perf_counter() - asked) * 1000)
                    time.sleep(0.05)
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            growth = _vm(pid, "VmHWM") - before
        finally:
            daemon.stop()
    entry = answers[0]["files"][0]
    return {
        "size_mib": size_mib,
        "requests": requests,
        "diff_s": round(elapsed, 2),
        "vmhwm_growth_mib": round(growth / MIB, 1),
        "healthz_count": len(latencies),
        "healthz_median_ms": round(statistics.median(latencies), 1) if latencies else None,
        "healthz_max_ms": round(max(latencies), 1) if latencies else None,
        "summarized": entry["summarized"],
        "new_lines": entry["new_lines"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="MiB per side")
    parser.add_argument("--requests", type=int, default=1, help="diffs at once")
    args = parser.parse_args()
    print(run(args.size, args.requests))


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
