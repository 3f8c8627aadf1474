"""The flood benchmark: the operator's answers while one executor token floods costly reads.

A real daemon (``promoter serve`` in its own process) holds a bundle of ``files`` text
files of ``lines`` lines each. One executor token asks for the bundle's diff
``concurrency`` times at once, again and again, for ``seconds`` seconds; meanwhile the
operator asks ``GET /v1/operations`` and ``GET /readyz`` in turn. It reports:

- ``operator_max_ms`` / ``operator_median_ms`` / ``operator_count``: the operator's
  answers during the flood (TESTS E3's target: each within 1 s);
- ``flood_ok`` / ``flood_429`` / ``flood_other``: the flood's answers (admitted, refused
  ``429``, anything else or a dropped connection);
- ``ok_per_s``: admitted diffs a second.

Run it with ``python -m bench.bench_flood --concurrency 200 --seconds 10``; it reports,
it does not gate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.variables import stop_on_unknown
from tests.gitutil import commit_all
from tests.support.flows import init_repo
from tests.support.process import DaemonProcess, prepare_promotion


def _changes(files: int, lines: int) -> list[tuple[str, bytes | None, bytes | None]]:
    out: list[tuple[str, bytes | None, bytes | None]] = []
    for n in range(files):
        old = b"".join(b"line %06d of file %d\n" % (i, n) for i in range(lines))
        out.append((f"src/f{n}.txt", old, old.replace(b"line 000100", b"LINE 000100")))
    return out


async def _flood(url: str, token: str, concurrency: int, until: float) -> dict[str, int]:
    counts = {"ok": 0, "429": 0, "other": 0}
    limits = httpx.Limits(max_connections=concurrency + 10)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=120, limits=limits, headers=headers) as client:

        async def worker() -> None:
            while time.monotonic() < until:
                try:
                    answer = await client.get(url)
                except httpx.TransportError:  # a connection the daemon dropped: counted
                    counts["other"] += 1
                    continue
                key = {200: "ok", 429: "429"}.get(answer.status_code, "other")
                counts[key] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return counts


def run(files: int, lines: int, concurrency: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        changes = _changes(files, lines)
        repo = init_repo(root / "work", {path: old for path, old, _ in changes if old})
        commit_all(repo, "base")
        daemon = DaemonProcess(root / "state", {"work": repo})
        try:
            request = prepare_promotion(daemon, repo, changes)
            with daemon.executor("run_1") as executor:
                token = executor.headers["Authorization"].removeprefix("Bearer ")
            url = f"{daemon.url}/v1/bundles/{request['bundle_id']}/diff"
            until = time.monotonic() + seconds
            result: dict[str, int] = {}
            flood = threading.Thread(
                target=lambda: result.update(asyncio.run(_flood(url, token, concurrency, until)))
            )
            flood.start()
            timings: list[float] = []
            with daemon.client("operator") as operator:
                time.sleep(min(1.0, seconds / 4))  # the flood is under way
                while time.monotonic() < until:
                    for path in ("/v1/operations", "/readyz"):
                        started = time.perf_counter()
                        assert operator.get(path).status_code == 200
                        timings.append((time.perf_counter() - started) * 1000)
            flood.join()
        finally:
            daemon.stop()
    return {
        "operator_max_ms": round(max(timings), 1),
        "operator_median_ms": round(statistics.median(timings), 1),
        "operator_count": len(timings),
        "flood_ok": result.get("ok", 0),
        "flood_429": result.get("429", 0),
        "flood_other": result.get("other", 0),
        "ok_per_s": round(result.get("ok", 0) / seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    for key, value in run(args.files, args.lines, args.concurrency, args.seconds).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
