"""``promoter serve --workers 2``: two processes promoting on one ledger and one state
directory while the person keeps saving files (TESTS.md F4; both database passes).

Eight executor clients, each on its own connection, promote 1-file bundles: half into one
repository (several at once into the same one) and half into another, until both workers
have run promotions (the kernel hands each connection to one of them). Meanwhile the
person saves a file of their own in each worktree again and again. Checked: every
promotion completed exactly once (one ``completed`` operation a bundle, its file holds the
bundle's bytes), the operations were run by the daemon's two worker processes, and every
one of the person's saves is there as last written: 0 lost. A worker holding a
repository's lock keeps the other worker's promotion into it out (``lock_unavailable``
naming the holder). And a worker that dies
stops the other and the daemon, which exits with the worker's status. By default the
daemon starts a worker per usable core, and a console session opened through one is
served on every fresh connection, whichever worker takes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from promoter.api.ui.sessions import COOKIE
from tests.console.support import hidden
from tests.support.flows import init_repo, make_bundle, make_grant
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, upload_blobs

ROUNDS = 6  # promotions a client makes, at most; more if a worker served none yet
CLIENTS = 8
REPOS = ("left", "right")


def _person(worktrees: list[Path], stop: threading.Event, last: dict[Path, bytes]) -> None:
    """Save ``mine.txt`` in each worktree, again and again, until ``stop``."""
    n = 0
    while not stop.wait(0.002):  # a pace, not a synchronization: saves all along the run
        for tree in worktrees:
            data = b"save %d\n" % n
            (tree / "mine.txt").write_bytes(data)
            last[tree / "mine.txt"] = data
        n += 1


def test_two_workers_promote_and_lose_no_save(tmp_path: Path) -> None:
    repos = {name: init_repo(tmp_path / name, {"README": b"hi\n"}) for name in REPOS}
    daemon = DaemonProcess(tmp_path / "state", repos, workers=2)
    try:
        with daemon.client() as orch:
            listed = orch.get("/v1/repositories").json()["repositories"]
            identities = {r["name"]: r["repository_identity"] for r in listed}
            grants: dict[str, dict[str, Any]] = {}
            for name, repo in repos.items():
                grant = make_grant(repo, identities[name], grant_id=f"grt_{name}")
                assert orch.post("/v1/grants", json=grant).status_code == 201
                grants[name] = grant
            lease = {
                "run_id": "run_1",
                "attempt": 1,
                "generation": 1,
                "resume_epoch": 0,
                "fence": 7,
                "expires_at": "2099-01-01T00:00:00Z",
            }
            assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
        with daemon.executor("run_1") as ex:
            token = ex.headers["Authorization"]
        owners: set[int] = set()
        done: dict[str, tuple[Path, bytes]] = {}
        seen = threading.Lock()

        def promote(client_no: int, n: int) -> None:
            name = REPOS[client_no % 2]
            data = b"client %d promotion %d\n" % (client_no, n)
            path = f"c{client_no}-{n}.txt"
            change: list[tuple[str, bytes | None, bytes | None]] = [(path, None, data)]
            bundle = make_bundle(grants[name], change)
            # each promotion on a connection of its own: the kernel picks the worker
            with (
                httpx.Client(
                    base_url=daemon.url, timeout=120, headers={"Authorization": token}
                ) as ex,
                daemon.client() as orch,
            ):
                upload_blobs(ex, [data])
                answer = ex.post("/v1/bundles", json=bundle)
                assert answer.status_code == 201, answer.text
                receipt = answer.json()["verification_receipt"]["receipt_sha256"]
                answer = orch.post(
                    "/v1/promotions",
                    json={
                        "bundle_id": bundle["bundle_id"],
                        "fence": 7,
                        "wait": True,
                        "verification_receipt_sha256": receipt,
                    },
                )
                assert answer.status_code in (200, 201, 202), answer.text
                operation = answer.json()
                assert operation["status"] == "completed", operation
                view = orch.get(f"/v1/operations/{operation['operation_id']}").json()
            with seen:
                owners.add(view["owner"]["pid"])
                done[bundle["bundle_id"]] = (repos[name] / path, data)

        def client(client_no: int) -> None:
            n = 0
            while n < ROUNDS or (len(owners) < 2 and n < 5 * ROUNDS):
                promote(client_no, n)
                n += 1

        stop = threading.Event()
        last: dict[Path, bytes] = {}
        person = threading.Thread(target=_person, args=(list(repos.values()), stop, last))
        person.start()
        try:
            with ThreadPoolExecutor(CLIENTS) as pool:
                for future in [pool.submit(client, c) for c in range(CLIENTS)]:
                    future.result()
        finally:
            stop.set()
            person.join()
        assert len(owners) == 2, owners  # both workers promoted
        assert daemon.proc.pid not in owners  # the parent serves nothing itself
        for path, data in done.values():
            assert path.read_bytes() == data
        with daemon.client("operator") as op:
            listed = op.get("/v1/operations").json()["operations"]
        by_bundle: dict[str, list[str]] = {}
        for operation in listed:
            by_bundle.setdefault(operation["bundle_id"], []).append(operation["status"])
        assert by_bundle == {bundle_id: ["completed"] for bundle_id in done}
        assert len(last) == len(REPOS)
        for path, data in last.items():
            assert path.read_bytes() == data  # the person's last save of each file: 0 lost
    finally:
        assert daemon.stop() == 0


def _workers(pid: int) -> list[int]:
    """The child processes of ``pid`` (its workers), from ``/proc``."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(child) for child in text]
    return sorted(children)


def test_a_worker_that_dies_stops_the_daemon_with_its_status(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo", {"README": b"hi\n"})
    daemon = DaemonProcess(tmp_path / "state", {"demo": repo}, workers=2)
    try:
        first, second = _workers(daemon.proc.pid)
        os.kill(first, signal.SIGKILL)
        assert daemon.wait_exit() == 128 + signal.SIGKILL  # as the worker ended
        assert not Path(f"/proc/{second}").exists()  # the other one stopped, and was reaped
        daemon._drain.join(60)  # its stderr read to the end
        assert any("ended with status 137: the others stop" in line for line in daemon.log)
        assert list((tmp_path / "state" / "metrics").iterdir()) == []  # its metrics removed
    finally:
        daemon.kill()


def test_serve_starts_a_worker_per_usable_core_and_each_serves_the_console_session(
    tmp_path: Path,
) -> None:
    repo = init_repo(tmp_path / "repo", {"README": b"hi\n"})
    daemon = DaemonProcess(tmp_path / "state", {"demo": repo}, workers=None)
    cores = len(os.sched_getaffinity(0))
    try:
        assert len(_workers(daemon.proc.pid)) == (cores if cores > 1 else 0)
        with httpx.Client(base_url=daemon.url, timeout=60) as first:
            form = first.get("/ui/login")
            answer = first.post(
                "/ui/login", data={"csrf": hidden(form.text), "token": daemon.token("operator")}
            )
            assert answer.status_code == 303, answer.text
            session_id = first.cookies[COOKIE]
        # each request on a connection of its own: the kernel picks the worker
        for _ in range(4 * cores):
            with httpx.Client(
                base_url=daemon.url, timeout=60, cookies={COOKIE: session_id}
            ) as browser:
                assert browser.get("/ui/operations").status_code == 200
    finally:
        daemon.kill()


def test_a_worker_holding_a_repositorys_lock_keeps_the_other_worker_out(tmp_path: Path) -> None:
    """The two workers of one daemon serialize on the repository's lock: while a promotion
    into ``left`` is held at ``after_journal`` (its lock taken) in one worker, a promotion
    into ``left`` that the other worker takes is refused ``lock_unavailable`` naming the
    holding worker, and writes nothing. Requests are sent until the other worker takes one
    (the kernel picks the worker of each connection: a bounded search, never a wait)."""
    repo = init_repo(tmp_path / "left", {"README": b"hi\n"})
    pause = Pause(tmp_path, "after_journal")  # the first promotion of each worker
    daemon = DaemonProcess(
        tmp_path / "state",
        {"left": repo},
        workers=2,
        faults=pause.spec,
        extra_env={"PROMOTER_LOCK_TIMEOUT": "1"},
    )
    try:
        with daemon.client() as orch:
            (listed,) = orch.get("/v1/repositories").json()["repositories"]
            grant = make_grant(repo, listed["repository_identity"], grant_id="grt_left")
            assert orch.post("/v1/grants", json=grant).status_code == 201
            lease = {
                "run_id": "run_1",
                "attempt": 1,
                "generation": 1,
                "resume_epoch": 0,
                "fence": 7,
                "expires_at": "2099-01-01T00:00:00Z",
            }
            assert orch.put("/v1/leases/wf_1/implement", json=lease).status_code == 200
        with daemon.executor("run_1") as ex:
            token = ex.headers["Authorization"]

        def promote(n: int) -> httpx.Response:
            data = b"promotion %d\n" % n
            bundle = make_bundle(grant, [(f"p{n}.txt", None, data)])
            with (  # fresh connections: the kernel picks the worker of each
                httpx.Client(
                    base_url=daemon.url, timeout=120, headers={"Authorization": token}
                ) as ex,
                daemon.client() as orch,
            ):
                upload_blobs(ex, [data])
                answer = ex.post("/v1/bundles", json=bundle)
                assert answer.status_code == 201, answer.text
                receipt = answer.json()["verification_receipt"]["receipt_sha256"]
                return orch.post(
                    "/v1/promotions",
                    json={
                        "bundle_id": bundle["bundle_id"],
                        "fence": 7,
                        "wait": True,
                        "verification_receipt_sha256": receipt,
                    },
                )

        first: list[httpx.Response] = []
        holder = threading.Thread(target=lambda: first.append(promote(0)))
        holder.start()
        try:
            pause.reached()  # one worker holds left's lock, its plan journaled
            refusals: list[dict[str, Any]] = []
            for n in range(1, 41):  # until the other worker takes one
                refusals.append(promote(n).json())
                error = (refusals[-1].get("report") or {}).get("error") or {}
                if error.get("reason") == "held_by_another_process":
                    break
        finally:
            pause.release()
            holder.join(120)
        assert not holder.is_alive()
        assert [(r["status"], r["code"]) for r in refusals] == [
            ("refused", "lock_unavailable")
        ] * len(refusals), refusals
        done = first[0].json()
        assert done["status"] == "completed", done
        crossed = refusals[-1]
        assert crossed["report"]["error"]["reason"] == "held_by_another_process", refusals
        assert crossed["report"]["error"]["holder"]["pid"] == done["owner"]["pid"]
        assert crossed["owner"]["pid"] != done["owner"]["pid"]  # the other worker
        assert sorted(p.name for p in repo.iterdir() if p.name != ".git") == ["README", "p0.txt"]
    finally:
        assert daemon.stop() == 0


def test_a_promoter_folder_where_serve_starts_never_runs_as_a_worker(tmp_path: Path) -> None:
    """``promoter serve`` typed in a directory holding a ``promoter/`` package (a checkout's
    parent, a worktree an agent's change was promoted into): each worker was started with
    ``python -m``, which puts that directory first on its path, so the folder's code ran as
    the daemon. The workers now run the parent's own package."""
    ran = tmp_path / "hostile-ran"
    hostile = tmp_path / "here"
    (hostile / "promoter").mkdir(parents=True)
    (hostile / "promoter" / "__init__.py").write_text(
        f"open({str(ran)!r}, 'w').write('the folder ran as the daemon')\n"
    )
    repo = init_repo(tmp_path / "repo", {"README": b"hi\n"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    env |= {"PROMOTER_REHEARSE_AT_START": "false", "HOME": str(tmp_path / "home")}
    argv = [str(Path(sys.executable).parent / "promoter"), "serve", "--workers", "2"]
    argv += ["--state-dir", str(tmp_path / "state"), "--port", "0", "--repo", f"r={repo}"]
    daemon = subprocess.Popen(argv, cwd=hostile, env=env, stderr=subprocess.PIPE)
    try:
        assert daemon.stderr is not None
        said = []
        for raw in daemon.stderr:  # ends when the daemon does: never a wait on a clock
            said.append(raw.decode(errors="replace").rstrip())
            if said[-1].startswith("promoter: ready on "):
                break
        assert said[-1].startswith("promoter: ready on "), "\n".join(said[-8:])
        url = said[-1].removeprefix("promoter: ready on ")
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert not ran.exists()
