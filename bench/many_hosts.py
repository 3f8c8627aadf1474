"""Many hosts on one PostgreSQL ledger: how they start together, and promotions per second.

Everything runs against a throwaway PostgreSQL cluster (``tests.support.own_postgres``:
its own ``initdb``/``pg_ctl`` on a free loopback port; the machine's server is never
used), each round on a database of its own made for it.

- ``starts``: N ``promoter serve`` processes (N = 3 and 8 by default), each with its own
  state directory, ``--host-id`` and repository, started together on an EMPTY database
  (no prior migration: every one migrates at start, under the migration lock). A daemon
  counts as up when it printed ``promoter: ready on URL`` and its ``GET /healthz``
  answers 200. Reported per round: how many of N came up, the seconds from the first
  ``Popen`` to the first and to the last ready daemon, the schema revision and how many
  hosts the ledger registered.
- ``throughput``: 1, 2 and 3 daemons on one database, each guarding its own repository,
  share a fixed number of one-file flows (60 by default), one driving thread a daemon,
  all threads at once (each round runs every count, in an order rotating with the
  round). A flow is grant, lease, blob, bundle (verified) and promotion
  (``wait``: answered when completed), each creating one new small file. Timed in two
  phases over all threads: ``prepare`` (grant to verified bundle) and ``promote`` (the
  promotion requests); reported as flows and promotions per second, the median of the
  rounds. Every daemon runs on this one machine: they share its CPU (and the database's),
  so each round also records the machine's load average (1 minute) before and after it:
  other work on a shared machine moves these figures more than the daemon count may.

Run: ``python -m bench.many_hosts [--json FILE] [--rounds R] [--flows F] [--starts N…]
[--daemons N…]`` (``--starts`` with no count: throughput only). It reports, it does not
gate. Deliberately not here: any assertion about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.variables import stop_on_unknown
from tests.support.flows import init_repo, make_bundle, make_grant, sha, ts
from tests.support.own_postgres import OwnPostgres, binaries, own_postgres

_UP_WITHIN = 180.0  # seconds a daemon may take to come up before it counts as not up
_FENCE = 7


@dataclass
class Host:
    """One ``promoter serve`` process this bench started, and what it printed."""

    host_id: str
    state_dir: Path
    repo: Path
    proc: subprocess.Popen[bytes]
    url: str = ""
    ready_at: float | None = None
    log: list[str] = field(default_factory=list)

    def token(self, role: str) -> str:
        return (self.state_dir / "credentials" / f"{role}.token").read_text().strip()

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
        )


def _database(cluster: OwnPostgres, name: str) -> str:
    """A new empty database on the throwaway cluster; its SQLAlchemy URL."""
    admin = cluster.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return cluster.url.rsplit("/", 1)[0] + "/" + name


def _ledger(url: str) -> tuple[str | None, int]:
    """The schema revision and the number of registered hosts of the database at ``url``."""
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as connection:
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        hosts = connection.execute("SELECT count(*) FROM hosts").fetchone()
    return (str(revision[0]) if revision else None, int(hosts[0]) if hosts else 0)


def _spawn(host_id: str, state_dir: Path, repo: Path, url: str) -> Host:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [sys.executable, "-m", "promoter.cli.main", "serve", "--state-dir", str(state_dir)]
    argv += ["--port", "0", "--repo", f"lab={repo}", "--database-url", url]
    argv += ["--host-id", host_id, "--log-format", "text"]
    argv += ["--workers", "1"]  # one process a host: hosts, not cores, are measured
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return Host(host_id, state_dir, repo, proc)


def _watch(host: Host) -> None:
    """Read the daemon's stderr: note when it is ready, then drain it (the pipe never fills)."""
    assert host.proc.stderr is not None
    for raw in host.proc.stderr:
        line = raw.decode(errors="replace").rstrip()
        if not host.url and line.startswith("promoter: ready on "):
            host.ready_at = time.monotonic()
            host.url = line.removeprefix("promoter: ready on ")
        elif len(host.log) < 200:
            host.log.append(line)


@contextmanager
def _hosts(work: Path, url: str, count: int, prefix: str) -> Iterator[tuple[list[Host], float]]:
    """``count`` daemons started together on ``url``, each with its own state directory,
    host id and repository; yields them and the moment the first was started. Every one
    is stopped on leaving (SIGTERM, then SIGKILL after 60 s), by its own process."""
    repos = [init_repo(work / f"repo{i}", {"README.md": b"# lab\n"}) for i in range(count)]
    started = time.monotonic()
    hosts = [_spawn(f"{prefix}-{i}", work / f"state{i}", repos[i], url) for i in range(count)]
    watchers = [threading.Thread(target=_watch, args=(h,), daemon=True) for h in hosts]
    for watcher in watchers:
        watcher.start()
    try:
        deadline = time.monotonic() + _UP_WITHIN
        for host in hosts:
            while host.ready_at is None and host.proc.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)  # waiting for a child's output line: no fault point there
        yield hosts, started
    finally:
        for host in hosts:
            if host.proc.poll() is None:
                host.proc.terminate()
        for host in hosts:
            try:
                host.proc.wait(60)
            except subprocess.TimeoutExpired:
                host.proc.kill()
                host.proc.wait(30)


def _healthy(host: Host) -> bool:
    if not host.url:
        return False
    try:
        return httpx.get(host.url + "/healthz", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def starts_round(cluster: OwnPostgres, work: Path, count: int, round_no: int) -> dict[str, Any]:
    url = _database(cluster, f"starts_{count}_{round_no}")
    with _hosts(work, url, count, f"host-s{count}r{round_no}") as (hosts, started):
        up = [h for h in hosts if _healthy(h)]
        times = sorted(h.ready_at - started for h in up if h.ready_at is not None)
        failed = [
            {"host_id": h.host_id, "exit": h.proc.poll(), "log": h.log[-5:]}
            for h in hosts
            if h not in up
        ]
    revision, registered = _ledger(url)
    return {
        "n": count,
        "round": round_no,
        "up": len(up),
        "first_up_s": times[0] if times else None,
        "all_up_s": times[-1] if len(up) == count else None,
        "revision": revision,
        "hosts_registered": registered,
        "failed": failed,
    }


def _flow(host: Host, orch: httpx.Client, identity: str, repo: Path, name: str) -> dict[str, Any]:
    """Grant, lease, blob and verified bundle of one new file; the promotion request body."""
    grant = make_grant(
        repo, identity, grant_id=f"grt_{name}", run_id=f"run_{host.host_id}", workflow_id=name
    )
    answer = orch.post("/v1/grants", json=grant)
    if answer.status_code != 201:
        raise RuntimeError(f"grant {name}: {answer.status_code} {answer.text}")
    lease = {
        "run_id": grant["executor_run_id"],
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": _FENCE,
        "expires_at": ts(timedelta(hours=1)),
    }
    answer = orch.put(f"/v1/leases/{name}/implement", json=lease)
    if answer.status_code != 200:
        raise RuntimeError(f"lease {name}: {answer.status_code} {answer.text}")
    data = f"flow {name}\n".encode()
    change: tuple[str, bytes | None, bytes | None] = (f"flows/{name}.txt", None, data)
    bundle = make_bundle(grant, [change])
    return {"grant": grant, "bundle": bundle, "data": data}


def _drive(host: Host, flows: int, barrier: threading.Barrier, out: dict[str, Any]) -> None:
    """One daemon's thread: ``flows`` flows prepared, then promoted, one after another,
    each phase begun together with the other threads (``barrier``)."""
    try:
        with host.client(host.token("orchestrator")) as orch:
            repository = orch.get("/v1/repositories").json()["repositories"][0]
            identity, repo = repository["repository_identity"], host.repo
            run_id = f"run_{host.host_id}"
            answer = orch.post(
                "/v1/executor-tokens", json={"executor_run_id": run_id, "ttl_seconds": 3600}
            )
            with host.client(answer.json()["token"]) as ex:
                barrier.wait()
                begun = time.monotonic()
                requests = []
                for i in range(flows):
                    made = _flow(host, orch, identity, repo, f"{host.host_id}_{i}")
                    ex.put(f"/v1/blobs/sha256/{sha(made['data'])}", content=made["data"])
                    answer = ex.post("/v1/bundles", json=made["bundle"])
                    if answer.status_code != 201:
                        raise RuntimeError(f"bundle: {answer.status_code} {answer.text}")
                    receipt = answer.json()["verification_receipt"]["receipt_sha256"]
                    requests.append(
                        {
                            "bundle_id": made["bundle"]["bundle_id"],
                            "verification_receipt_sha256": receipt,
                            "fence": _FENCE,
                            "wait": True,
                        }
                    )
                out["prepare_end"] = time.monotonic()
                out["prepare_begin"] = begun
            barrier.wait()
            begun = time.monotonic()
            statuses: dict[str, int] = {}
            for body in requests:
                answer = orch.post("/v1/promotions", json=body)
                status = answer.json().get("status", f"http {answer.status_code}")
                statuses[status] = statuses.get(status, 0) + 1
            out["promote_begin"], out["promote_end"] = begun, time.monotonic()
            out["statuses"] = statuses
            expected = {
                f"{host.host_id}_{i}.txt": f"flow {host.host_id}_{i}\n" for i in range(flows)
            }
            written = {p.name: p.read_text() for p in (host.repo / "flows").iterdir()}
            out["worktree_exact"] = written == expected
    except BaseException as exc:
        out["error"] = repr(exc)
        barrier.abort()
        raise


def throughput_round(
    cluster: OwnPostgres, work: Path, daemons: int, flows: int, round_no: int
) -> dict[str, Any]:
    url = _database(cluster, f"throughput_{daemons}_{round_no}")
    load_before = os.getloadavg()[0]
    with _hosts(work, url, daemons, f"host-t{daemons}r{round_no}") as (hosts, _):
        if not all(_healthy(h) for h in hosts):
            raise RuntimeError("a daemon did not come up: " + repr([h.log[-5:] for h in hosts]))
        shares = [flows // daemons + (1 if i < flows % daemons else 0) for i in range(daemons)]
        barrier = threading.Barrier(daemons)
        results: list[dict[str, Any]] = [{} for _ in hosts]
        threads = [
            threading.Thread(target=_drive, args=(h, n, barrier, r))
            for h, n, r in zip(hosts, shares, results, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"throughput round failed: {errors}")
    prepare = max(r["prepare_end"] for r in results) - min(r["prepare_begin"] for r in results)
    promote = max(r["promote_end"] for r in results) - min(r["promote_begin"] for r in results)
    statuses: dict[str, int] = {}
    if not all(r["worktree_exact"] for r in results):
        statuses["worktree differs"] = 1
    for r in results:
        for status, n in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    return {
        "daemons": daemons,
        "round": round_no,
        "flows": flows,
        "prepare_s": prepare,
        "promote_s": promote,
        "flows_per_s": flows / (prepare + promote),
        "promotions_per_s": flows / promote,
        "statuses": statuses,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def _machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} cores, {cpu}".strip()


def _shared() -> str:
    return f"one machine, {os.cpu_count()} cores: daemons share the CPU"


def _postgres_version(cluster: OwnPostgres) -> str:
    admin = cluster.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flows", type=int, default=60)
    parser.add_argument("--starts", type=int, nargs="*", default=[3, 8])
    parser.add_argument("--daemons", type=int, nargs="*", default=[1, 2, 3])
    args = parser.parse_args()
    bin_dir = binaries()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL initdb installed here")
    report: dict[str, Any] = {"machine": _machine(), "starts": [], "throughput": []}
    with own_postgres(bin_dir) as cluster, tempfile.TemporaryDirectory() as scratch:
        report["postgresql"] = _postgres_version(cluster)
        print(f"machine: {report['machine']}; PostgreSQL {report['postgresql']} (throwaway)")
        print("starts on an empty database (every daemon migrates at start)")
        print("   N  round  up       first_up_s  all_up_s  revision  hosts")
        for count in args.starts:
            for round_no in range(args.rounds):
                work = Path(scratch) / f"starts{count}_{round_no}"
                row = starts_round(cluster, work, count, round_no)
                report["starts"].append(row)
                print(
                    f"{count:4d}  {round_no:5d}  {row['up']} of {count:<3d}  "
                    f"{_fmt(row['first_up_s']):>10s}  {_fmt(row['all_up_s']):>8s}  "
                    f"{row['revision']!s:>8s}  {row['hosts_registered']:5d}"
                )
                for failure in row["failed"]:
                    print(f"        not up: {failure}")
        if args.daemons:
            print(
                f"throughput: {args.flows} one-file flows split across the daemons "
                f"({_shared()})"
            )
            print("daemons  round  prepare_s  promote_s  flows/s  promotions/s  load  statuses")
        for round_no in range(args.rounds):
            # each round runs every daemon count, in an order that rotates with the round,
            # so that a slower spell of a shared machine does not fall on one count alone
            shift = round_no % max(len(args.daemons), 1)
            for daemons in args.daemons[shift:] + args.daemons[:shift]:
                work = Path(scratch) / f"throughput{daemons}_{round_no}"
                row = throughput_round(cluster, work, daemons, args.flows, round_no)
                report["throughput"].append(row)
                print(
                    f"{daemons:7d}  {round_no:5d}  {row['prepare_s']:9.2f}  "
                    f"{row['promote_s']:9.2f}  {row['flows_per_s']:7.2f}  "
                    f"{row['promotions_per_s']:12.2f}  "
                    f"{row['load_before']:.1f}->{row['load_after']:.1f}  {row['statuses']}"
                )
    if args.starts:
        print("starts summary")
    for count in args.starts:
        rows = [r for r in report["starts"] if r["n"] == count]
        full = [r["all_up_s"] for r in rows if r["all_up_s"] is not None]
        ups = ", ".join(f"{r['up']} of {count}" for r in rows)
        all_up = f"{statistics.median(full):.2f}" if full else "-"
        print(f"  N = {count}: {ups} up; median time until all up {all_up} s")
    medians: dict[str, dict[str, float]] = {}
    for daemons in args.daemons:
        rows = [r for r in report["throughput"] if r["daemons"] == daemons]
        loads = [r[k] for r in rows for k in ("load_before", "load_after")]
        medians[str(daemons)] = {
            "flows_per_s": statistics.median(r["flows_per_s"] for r in rows),
            "promotions_per_s": statistics.median(r["promotions_per_s"] for r in rows),
            "load_min": min(loads),
            "load_max": max(loads),
        }
    report["throughput_medians"] = medians
    if medians:
        print(f"medians ({_shared()})")
    for daemons, median in medians.items():
        print(
            f"  {daemons} daemon(s): {median['flows_per_s']:.2f} flows/s, "
            f"{median['promotions_per_s']:.2f} promotions/s "
            f"(load average {median['load_min']:.1f} to {median['load_max']:.1f})"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
