"""``promoter serve --workers 2``: one set of metrics across the workers (TESTS.md F4).

Promotions land on either worker; every scrape of ``/metrics``, each on a connection of
its own (the kernel picks the worker), reports the same sums. The workers' shared
directory is in the state directory while the daemon serves and gone once it stopped;
leftovers of an earlier daemon are removed only when they are promoter's own.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import httpx

from promoter.store import state_temps
from tests.support.flows import init_repo, make_bundle
from tests.support.process import DaemonProcess, granted, promotion_request, upload_blobs

PROMOTIONS = 6
SCRAPES = 16


def _completed(exposition: str) -> float:
    """The sum of ``promoter_promotions_total`` over the completed outcome's codes."""
    total = 0.0
    for line in exposition.splitlines():
        if line.startswith("promoter_promotions_total{") and 'outcome="completed"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _dead_pid() -> int:
    """A process id no process has now (a child started and reaped)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_every_scrape_reports_every_worker_s_promotions(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README": b"hi\n"})
    state = tmp_path / "state"
    leftovers = state / "metrics"
    stale = leftovers / str(_dead_pid())  # a killed daemon's: promoter's own, removed
    stale.mkdir(parents=True)
    (stale / "counter_12.db").write_bytes(b"\0" * 8)
    (stale / "histogram_12.db").write_bytes(b"\0" * 8)
    foreign = leftovers / str(_dead_pid())  # holds a file promoter never writes: kept
    foreign.mkdir()
    (foreign / "notes.txt").write_bytes(b"mine\n")
    named = leftovers / "scratch"  # a name the daemon never gives: kept
    named.mkdir()
    daemon = DaemonProcess(state, {"demo": repo}, workers=2)
    try:
        assert not stale.exists()
        assert (foreign / "notes.txt").read_bytes() == b"mine\n"
        assert named.is_dir()
        assert any(f"kept {foreign}" in line for line in daemon.log), daemon.log
        (shared,) = [p for p in leftovers.iterdir() if state_temps.is_metrics_name(p.name)]
        assert shared.name.split("-")[2] == str(daemon.proc.pid)  # named after the parent
        assert stat.S_IMODE(shared.stat().st_mode) == 0o700
        with daemon.client() as orch:
            grant = granted(orch, repo)
        for n in range(PROMOTIONS):
            data = b"promotion %d\n" % n
            bundle = make_bundle(grant, [(f"f{n}.txt", None, data)])
            with daemon.executor("run_1") as ex:  # connections of their own
                upload_blobs(ex, [data])
                verified = ex.post("/v1/bundles", json=bundle)
                assert verified.status_code == 201, verified.text
            with daemon.client() as orch:
                answer = orch.post("/v1/promotions", json=promotion_request(bundle, verified))
                assert answer.json()["status"] == "completed", answer.text
        names = {p.name for p in shared.iterdir()}
        assert all(re.fullmatch(r"(counter|histogram)_\d+\.db", name) for name in names), names
        token = {"Authorization": f"Bearer {daemon.token('operator')}"}
        seen: set[float] = set()
        requests: list[float] = []
        for _ in range(SCRAPES):
            with httpx.Client(base_url=daemon.url, timeout=60, headers=token) as scraper:
                answer = scraper.get("/metrics")
            assert answer.status_code == 200
            seen.add(_completed(answer.text))
            assert "promoter_host_info{" in answer.text
            assert "promoter_database_up 1.0" in answer.text
            requests.append(
                sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in answer.text.splitlines()
                    if line.startswith("promoter_http_requests_total{")
                    and 'route="/metrics"' in line
                )
            )
        assert seen == {float(PROMOTIONS)}  # the same sum, whichever worker answered
        # each scrape counts the ones before it, whichever worker answered them
        assert requests == [float(n) for n in range(SCRAPES)]
    finally:
        assert daemon.stop() == 0
    assert not shared.exists()
    assert (foreign / "notes.txt").read_bytes() == b"mine\n"
    assert named.is_dir()
