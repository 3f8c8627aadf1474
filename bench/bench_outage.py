"""The outage benchmark: how long after a database's return does a promotion complete?

A throwaway PostgreSQL cluster (``tests.support.own_postgres``), a daemon on it with
``auto_recover``, and a promotion of ``files`` small files paused after its journal;
the database is stopped, the promotion goes on (every file written) and fails to record
its outcome; the database stays down ``down`` seconds after that first failure, then is
started again. Reported per outage length: ``return_to_completed_s``, from the moment
``pg_ctl start`` returned (the database answers) to the waiting request's answer
``completed`` (the put-back's next try, then recovery by the usual table). One machine,
one daemon; it reports, it does not gate. Run: ``python -m bench.bench_outage``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.variables import stop_on_unknown
from promoter import faults
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.own_postgres import OwnPostgres, binaries, own_postgres
from tests.support.pause import Pause
from tests.support.promotion import promote, submit


def _database(cluster: OwnPostgres, name: str) -> str:
    admin = cluster.url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return cluster.url.rsplit("/", 1)[0] + "/" + name


def one(cluster: OwnPostgres, work: Path, files: int, down: float) -> dict[str, Any]:
    old = {f"d{i % 10}/f{i}.txt": f"old {i}\n".encode() for i in range(files)}
    repo = init_repo(work / "repo", old)
    url = _database(cluster, f"outage_{int(down * 1000)}")
    with running_daemon(work / "state", {"lab": repo}, database_url=url, auto_recover=True) as d:
        identity = d.services.registry.by_name("lab").identity
        changes = [(path, data, data + b"new\n") for path, data in old.items()]
        _, bundle, receipt = submit(d, repo, identity, changes)
        paused = Pause(work, "after_journal")
        failed = Pause(work, "database_retry")
        failed.release()  # a marker only: the first retry announces itself and goes on
        os.environ[faults.ENV] = f"{paused.spec},{failed.spec}"
        faults.reset()
        answer: list[httpx.Response] = []
        thread = threading.Thread(target=lambda: answer.append(promote(d, bundle, receipt)))
        thread.start()
        try:
            paused.reached()
            cluster.stop()
            paused.release()
            failed.reached()  # the outcome could not be recorded: the outage begins to count
            time.sleep(down)  # the outage's length (a benchmark's parameter, not a sync)
            cluster.start()
            back = time.monotonic()
            thread.join(300)
            took = time.monotonic() - back
        finally:
            os.environ.pop(faults.ENV, None)
        status = answer[0].json()["status"] if answer else "no answer"
    return {"files": files, "down_s": down, "status": status, "return_to_completed_s": took}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--down", type=float, nargs="*", default=[0.0, 1.0, 3.0, 10.0, 30.0])
    args = parser.parse_args()
    bin_dir = binaries()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL initdb installed here")
    with own_postgres(bin_dir) as cluster, tempfile.TemporaryDirectory() as scratch:
        print("files  down_s  status      return_to_completed_s")
        for index, down in enumerate(args.down):
            row = one(cluster, Path(scratch) / str(index), args.files, down)
            print(
                f"{row['files']:5d}  {row['down_s']:6.1f}  {row['status']:10s}  "
                f"{row['return_to_completed_s']:.3f}"
            )


if __name__ == "__main__":
    stop_on_unknown()  # a mistyped PROMOTER_BENCH_* name: nothing measured
    main()
