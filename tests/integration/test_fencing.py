"""Fencing a dead host and handing its operations to a daemon that reaches the same worktree.

Two daemons on one ledger (the suite's PostgreSQL database, else one SQLite file), with
distinct host ids, sharing one worktree and one state directory on this machine (the
replacement on the same machine, protocol: hosts#fencing: B is started with
``replaces_host`` naming A, whose state directory it is). Host A runs with a one-second owner
lease, so once its heartbeat stops its leases run out without a setting on B: the test
waits for the condition the daemons report (``lease_expired``), never for a time.

Checked: a live host, an executor or orchestrator token, an unknown host and a host not
configured for the repository are all refused and change nothing; a host killed at a fault
point mid-promotion is fenced to B, which recovers the operation exactly (one receipt, the
exact bytes, no temp left); a host that was hung (SIGSTOP) while it was fenced continues
and writes nothing (``host_fenced``), and a new process of the fenced host refuses every
write and renews no lease. Through the API and the CLI. On PostgreSQL also: a fence
started while a transaction that checked the epoch is open waits for its commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from promoter.client.wire import tls_context
from promoter.engine.fencing import Registration, guard
from promoter.engine.operation.rollback import rollback_id
from promoter.errors import HostFenced
from promoter.store import hosts, write_queue
from promoter.store.db import Database
from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.watch import Watch

# several daemons a test, each a process: seconds alone
pytestmark = pytest.mark.slow

V1, V2 = b"one\n", b"two\n"
W1, W2 = b"left\n", b"right\n"
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    ("src/app.txt", V1, V2),
    ("src/lib.txt", W1, W2),
]
SHORT_LEASE = {"PROMOTER_OWNER_LEASE_SECONDS": "1"}
_LEASE = {
    "run_id": "run_1",
    "attempt": 1,
    "generation": 1,
    "resume_epoch": 0,
    "fence": 7,
    "expires_at": "2099-01-01T00:00:00Z",
}


class Ledger:
    """The test's shared database, worktree and state directory, and its daemons."""

    def __init__(
        self, tmp_path: Path, url: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self.tmp = tmp_path
        self.url = (
            url or os.environ.get("PROMOTER_DATABASE_URL") or f"sqlite:///{tmp_path / 'ledger.db'}"
        )
        self.repo = init_repo(tmp_path / "work", files or {"src/app.txt": V1, "src/lib.txt": W1})
        self.state = tmp_path / "state"
        self.started: list[DaemonProcess] = []

    def daemon(
        self,
        name: str,
        *,
        repos: dict[str, Path] | None = None,
        faults: str = "",
        env: dict[str, str] | None = None,
        state: Path | None = None,
    ) -> DaemonProcess:
        extra = {
            "PROMOTER_HOST_ID": f"host-{name}",
            "PROMOTER_DATABASE_URL": self.url,
            # one state directory, a signing key of each host's own (the ledger refuses
            # a key two hosts publish)
            "PROMOTER_SIGNING_KEY_DIR": str(self.state.parent / f"signing-{name}"),
        }
        if state is None and name != "a":  # A's replacement, on A's state directory
            extra["PROMOTER_REPLACES_HOST"] = "host-a"
        daemon = DaemonProcess(
            state or self.state,
            {"work": self.repo} if repos is None else repos,
            faults=faults,
            extra_env={**extra, **(env or {})},
        )
        self.started.append(daemon)
        return daemon

    def close(self) -> None:
        for daemon in self.started:
            with contextlib.suppress(ProcessLookupError):
                daemon.proc.send_signal(signal.SIGCONT)
            daemon.kill()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    shared = Ledger(tmp_path)
    try:
        yield shared
    finally:
        shared.close()


PERSONS = {"src/app.txt": V1, "src/lib.txt": W1, "notes/mine.txt": b"the person's notes\n"}


@pytest.fixture
def fleet(tmp_path: Path, database_url: str) -> Iterator[Ledger]:
    """A ledger on a PostgreSQL cluster the module started itself (``database_url``)."""
    shared = Ledger(tmp_path, database_url, PERSONS)
    try:
        yield shared
    finally:
        shared.close()


def _promote_in_background(daemon: DaemonProcess, request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {}

    def post() -> None:
        try:
            with daemon.client() as orch:
                response = orch.post("/v1/promotions", json=request)
                answer["status"], answer["body"] = response.status_code, response.json()
        except httpx.HTTPError as exc:
            answer["error"] = repr(exc)

    thread = threading.Thread(target=post)
    thread.start()
    answer["thread"] = thread
    return answer


def _operation_id(daemon: DaemonProcess) -> str:
    with daemon.client("operator") as operator:
        (listed,) = operator.get("/v1/operations").json()["operations"]
    return str(listed["operation_id"])


def _hosts(daemon: DaemonProcess) -> dict[str, dict[str, Any]]:
    with daemon.client("operator") as operator:
        return {h["host_id"]: h for h in operator.get("/v1/hosts").json()["hosts"]}


def _until_leases_expired(daemon: DaemonProcess, host: str, operation_id: str) -> None:
    """Until ``daemon`` reports the host lease and the operation's owner lease of ``host``
    run out (a condition the ledger reports, bounded; no time is assumed)."""
    deadline = time.monotonic() + 60
    with daemon.client("operator") as operator:
        while True:
            owner = operator.get(f"/v1/operations/{operation_id}").json()["owner"]
            hosts = {h["host_id"]: h for h in operator.get("/v1/hosts").json()["hosts"]}
            if owner["lease_expired"] and hosts[host]["lease_expired"]:
                return
            assert time.monotonic() < deadline, "the leases never ran out"
            time.sleep(0.05)


@contextlib.contextmanager
def _writers_held(url: str) -> Iterator[None]:
    """The ledger held against writers while the block runs: on SQLite the writers' queue
    and its write lock, on PostgreSQL the tables a fence writes, locked in EXCLUSIVE mode
    (which waits for every transaction that wrote them, or holds a host's row shared, to
    end). Inside the block no daemon is in the middle of such a transaction, nor holds the
    queue while it waits for one."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        # the writers' queue first (promoter.store.write_queue): a writer stopped holding it
        # while it waited for SQLite's lock would keep every other writer out
        queue = os.open(path + write_queue.SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        connection = sqlite3.connect(path, timeout=60, isolation_level=None)
        try:
            deadline = time.monotonic() + 60  # as SQLite's own wait below
            while True:  # polling a lock a writer holds for a transaction, not pacing
                try:
                    fcntl.flock(queue, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "the writers' queue was never free"
                    time.sleep(0.005)
            connection.execute("BEGIN IMMEDIATE")
            yield
            connection.execute("ROLLBACK")
        finally:
            connection.close()
            os.close(queue)
        return
    database = Database(url, 60.0)
    with database.session() as session:
        session.execute(text("LOCK TABLE hosts, host_fences, operations IN EXCLUSIVE MODE"))
        yield
        session.rollback()


def _hang(ledger: Ledger, daemon: DaemonProcess) -> None:
    """SIGSTOP ``daemon`` between two of its transactions, as a hung host with no
    transaction open (a host stopped inside one holds its locks: on SQLite that stops every
    writer of the ledger until it is killed). Returns once every thread of it is stopped."""
    with _writers_held(ledger.url):
        daemon.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{daemon.proc.pid}/task")
        deadline = time.monotonic() + 60
        while not all(_state(task) in "tT" for task in tasks.iterdir()):
            assert time.monotonic() < deadline, "the daemon never stopped"
            time.sleep(0.005)


def _state(task: Path) -> str:
    """The one-letter state of a thread (``T``: stopped by a signal)."""
    with contextlib.suppress(FileNotFoundError):
        return (task / "stat").read_text().rpartition(")")[2].split()[0]
    return "T"  # a thread that ended holds nothing


def _fence(daemon: DaemonProcess, role: str, host: str, to: str) -> httpx.Response:
    with daemon.client(role) as client:
        return client.post(f"/v1/hosts/{host}/fence", json={"to": to})


def _cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    token = daemon.state_dir / "credentials" / "operator.token"
    argv = [sys.executable, "-m", "promoter.cli.main", *args, "--url", daemon.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    return subprocess.run(
        [*argv, "--token-file", str(token)], capture_output=True, text=True, env=env, timeout=120
    )


def _tree(repo: Path) -> dict[str, str]:
    """Every file of the worktree outside .git with the sha256 of its bytes."""
    return {
        str(path.relative_to(repo)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(repo.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(repo).parts
    }


def _listing(repo: Path) -> dict[str, str]:
    """Every name in the worktree outside .git: ``dir`` for a directory, else the sha256
    of the file's bytes (``link:<target>`` for a symlink)."""
    found: dict[str, str] = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo)
        if rel.parts[0] == ".git":
            continue
        if path.is_symlink():
            found[str(rel)] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            found[str(rel)] = "dir"
        else:
            found[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _exact_new(repo: Path) -> None:
    assert (repo / "src/app.txt").read_bytes() == V2
    assert (repo / "src/lib.txt").read_bytes() == W2
    assert sorted(_tree(repo)) == ["src/app.txt", "src/lib.txt"]  # no temp, nothing else


def test_a_killed_host_is_fenced_only_when_dead_and_b_recovers_its_promotion_exactly(
    ledger: Ledger,
) -> None:
    pause = Pause(ledger.tmp, "after_journal")
    a = ledger.daemon("a", faults=pause.spec, env=SHORT_LEASE)
    b = ledger.daemon("b")
    c = ledger.daemon("c", repos={}, state=ledger.tmp / "state-c")  # guards no repository
    request = prepare_promotion(a, ledger.repo, CHANGES)
    answer = _promote_in_background(a, request)
    pause.reached()  # A journaled its plan and holds the repository lock
    operation_id = _operation_id(b)

    # a live host is never fenced: B's own leases run (its heartbeat), A's too
    live = _fence(a, "operator", "host-b", "host-a")
    assert (live.status_code, live.json()["code"]) == (409, "host_live"), live.text
    assert live.json()["host"] == "host-b"
    refused = _fence(b, "orchestrator", "host-a", "host-b")
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    with b.executor("run_1") as executor:
        refused = executor.post("/v1/hosts/host-a/fence", json={"to": "host-b"})
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")

    a.kill()  # SIGKILL at the fault point: its leases are no longer renewed
    answer["thread"].join()
    assert "error" in answer
    _until_leases_expired(b, "host-a", operation_id)

    unknown = _fence(b, "operator", "host-a", "host-nobody")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "host_unknown")
    unknown = _fence(b, "operator", "host-nobody", "host-b")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "host_unknown")
    itself = _fence(b, "operator", "host-a", "host-a")
    assert (itself.status_code, itself.json()["code"]) == (409, "handover_refused")
    elsewhere = _fence(b, "operator", "host-a", "host-c")
    assert (elsewhere.status_code, elsewhere.json()["code"]) == (409, "handover_refused")
    with b.client() as orch:
        (guarded,) = orch.get("/v1/repositories").json()["repositories"]
    assert elsewhere.json()["repositories"] == [guarded["repository_identity"]]
    before = _hosts(b)["host-a"]
    assert (before["status"], before["epoch"], before["fences"]) == ("active", 1, [])
    with b.client() as orch:
        seen = orch.get(f"/v1/operations/{operation_id}").json()
        assert (seen["status"], seen["owner"]["host"]) == ("in_progress", "host-a")
    assert _tree(ledger.repo) == {
        "src/app.txt": hashlib.sha256(V1).hexdigest(),
        "src/lib.txt": hashlib.sha256(W1).hexdigest(),
    }

    fenced = _cli(b, "hosts", "fence", "host-a", "--to", "host-b", "--json")
    assert fenced.returncode == 0, fenced.stderr
    result = json.loads(fenced.stdout)
    assert {k: result[k] for k in ("host", "epoch", "to", "fenced_by", "operations")} == {
        "host": "host-a",
        "epoch": 2,
        "to": "host-b",
        "fenced_by": "operator",
        "operations": [operation_id],
    }
    after = _hosts(c)["host-a"]
    assert (after["status"], after["epoch"], after["fenced_to"]) == ("fenced", 2, "host-b")
    assert [(f["epoch"], f["to"], f["by"], f["operations"]) for f in after["fences"]] == [
        (2, "host-b", "operator", [operation_id])
    ]
    again = _cli(b, "hosts", "fence", "host-b", "--to", "host-c")  # B is live
    assert (again.returncode, again.stderr.split("]")[0]) == (75, "error [host_live")

    with b.client() as orch:
        handed = orch.get(f"/v1/operations/{operation_id}").json()
        assert (handed["status"], handed["code"]) == ("needs_recovery", "host_fenced")
        assert handed["owner"]["host"] == "host-b"
        done = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert done.status_code == 200, done.text
        view = done.json()
        assert (view["status"], view["owner"]["host"]) == ("completed", "host-b")
        receipt = orch.get(f"/v1/operations/{operation_id}/receipt")
        assert receipt.status_code == 200
        assert json.loads(receipt.content)["operation_id"] == operation_id
        assert view["receipt_sha256"] == json.loads(receipt.content)["receipt_sha256"]
        assert [s["status"] for s in view["steps"]] == ["completed", "completed"]
        assert view["events_verified"]
    _exact_new(ledger.repo)


def test_a_handover_to_a_host_without_the_state_directory_says_so_not_421(
    ledger: Ledger,
) -> None:
    """B guards the worktree but was started on a state directory of its own: the fenced
    host's bundle is not there. Its recovery says what to do, and never sends the caller
    to the fenced host (a stopped one would hold the request unanswered)."""
    pause = Pause(ledger.tmp, "after_journal")
    a = ledger.daemon("a", faults=pause.spec, env=SHORT_LEASE)
    b = ledger.daemon("b", state=ledger.tmp / "state-b")
    request = prepare_promotion(a, ledger.repo, CHANGES)
    answer = _promote_in_background(a, request)
    pause.reached()
    operation_id = _operation_id(b)
    a.kill()
    answer["thread"].join()
    _until_leases_expired(b, "host-a", operation_id)
    assert _fence(b, "operator", "host-a", "host-b").status_code == 200
    before = _listing(ledger.repo)

    with b.client("operator") as operator:
        refused = operator.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert (refused.status_code, refused.json()["code"]) == (409, "not_recoverable")
        assert "location" not in refused.headers
        detail = refused.json()["detail"]
        assert "state directory of host host-a" in detail
        assert "replaces_host" in detail
        still = operator.get(f"/v1/operations/{operation_id}").json()
        assert (still["status"], still["owner"]["host"]) == ("needs_recovery", "host-b")
    assert _listing(ledger.repo) == before


@pytest.mark.parametrize("point", ["after_journal", "after_temps_journaled"])
def test_a_fenced_host_that_returns_writes_nothing(ledger: Ledger, point: str) -> None:
    """A hung host (SIGSTOP) is fenced while stopped; continued, its attempt stops with
    ``host_fenced`` before its first worktree write (paused after its plan), or before
    its first target is replaced (paused with its temps staged: it removes them, as its
    own, and says so). A new process of the host starts fenced: it is not ready
    (``/readyz`` 503, with the reason), refuses promotions, recoveries, grants, leases,
    runs, blobs and bundles (409 ``host_fenced``) and renews no lease."""
    pause = Pause(ledger.tmp, point)
    a = ledger.daemon("a", faults=pause.spec, env=SHORT_LEASE)
    b = ledger.daemon("b")
    request = prepare_promotion(a, ledger.repo, CHANGES)
    answer = _promote_in_background(a, request)
    pause.reached()
    operation_id = _operation_id(b)
    _hang(ledger, a)  # hung: no heartbeat, the repository lock still held
    _until_leases_expired(b, "host-a", operation_id)
    fenced = _fence(b, "operator", "host-a", "host-b")
    assert fenced.status_code == 200, fenced.text
    assert fenced.json()["operations"] == [operation_id]

    a.proc.send_signal(signal.SIGCONT)
    pause.release()
    answer["thread"].join()
    assert answer["status"] == 409 and answer["body"]["code"] == "host_fenced", answer
    assert answer["body"]["to_host"] == "host-b"
    assert (ledger.repo / "src/app.txt").read_bytes() == V1  # no target was replaced
    assert (ledger.repo / "src/lib.txt").read_bytes() == W1
    assert sorted(_tree(ledger.repo)) == ["src/app.txt", "src/lib.txt"]  # no temp left
    assert answer["body"]["worktree"] == (
        "removed its 2 temp files and 0 directories"
        if point == "after_temps_journaled"
        else "nothing written"
    )
    with b.client() as orch:
        left = orch.get(f"/v1/operations/{operation_id}").json()
        assert (left["status"], left["owner"]["host"]) == ("needs_recovery", "host-b")
        assert [s["status"] for s in left["steps"]] == ["pending", "pending"]
    a.logged("is fenced")
    assert _hosts(b)["host-a"]["lease_until"] is None  # its heartbeat renews nothing
    a.kill()

    back = ledger.daemon("a", env=SHORT_LEASE)  # a new process with host id A
    assert any("was fenced at" in line for line in back.log)
    with back.client() as orch:
        again = orch.post("/v1/promotions", json=request)
        assert (again.status_code, again.json()["code"]) == (409, "host_fenced"), again.text
        recover = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert (recover.status_code, recover.json()["code"]) == (409, "host_fenced")
        seen = orch.get(f"/v1/operations/{operation_id}").json()  # reads are served
        assert (seen["status"], seen["owner"]["host"]) == ("needs_recovery", "host-b")
        grant = orch.get("/v1/grants/grt_test1").json()
        refused = [
            orch.post("/v1/grants", json={**grant, "grant_id": "grt_other", "grant_sha256": ""}),
            orch.put("/v1/leases/wf_1/implement", json={**_LEASE, "fence": 8}),
        ]
        with back.executor("run_1") as executor:
            blob = b"new bytes\n"
            refused += [
                executor.put(f"/v1/blobs/sha256/{hashlib.sha256(blob).hexdigest()}", content=blob),
                executor.post("/v1/blobs:batchUpdate", content=b""),
                executor.post("/v1/bundles", json={"schema": "PatchBundleV1"}),
            ]
        for answer_ in refused:
            assert (answer_.status_code, answer_.json()["code"]) == (409, "host_fenced"), (
                answer_.request.url,
                answer_.text,
            )
            assert answer_.json()["to_host"] == "host-b"
    ready = httpx.get(f"{back.url}/readyz", verify=tls_context(back.url))
    assert ready.status_code == 503, ready.text
    assert ready.json()["checks"] == {
        "database": True,
        "state_dir_writable": True,
        "host_active": False,
    }
    assert "host-a was fenced at" in ready.json()["reason"]
    assert "promoter hosts admit host-a" in ready.json()["reason"]
    scraped = httpx.get(f"{back.url}/metrics", verify=tls_context(back.url)).text.splitlines()
    assert {"promoter_host_fenced 1.0", "promoter_host_epoch 2.0"} <= set(scraped)
    listed = _cli(back, "hosts", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    row = {h["host_id"]: h for h in json.loads(listed.stdout)}["host-a"]
    assert (row["status"], row["epoch"], row["lease_until"]) == ("fenced", 2, None)
    assert row["this_host"] is True

    with b.client() as orch:
        done = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7}).json()
        assert (done["status"], done["owner"]["host"]) == ("completed", "host-b")
    _exact_new(ledger.repo)


BIG = 300  # new files in new directories: five groups of temps (TEMPS_TOGETHER = 64)


def test_a_host_stopped_while_staging_temps_and_fenced_makes_nothing_after_the_fence(
    fleet: Ledger,
) -> None:
    """F1: host A promotes a large change and is stopped (SIGSTOP) inside its temp staging,
    its second group of temps half named; the operator fences A to B. B's recovery meets
    A's repository lock and names the stopped process that holds it. A, continued, sees
    the fence before its next group: no temp, directory or name of it appears after the
    fence (an inotify watch from the fence until A answers sees nothing made or written),
    and it removes the temps and directories it made before (its own: journaled names,
    its inode and bytes) and says so. The person's files are byte-identical; B recovers
    exactly."""
    scratch = fleet.repo / "scratch.txt"
    scratch.write_bytes(b"the person's unsaved, untracked work\n")
    changes: list[tuple[str, bytes | None, bytes | None]] = [("src/app.txt", V1, V2)]
    changes += [(f"gen/d{i // 50}/f{i:04d}.txt", None, b"file %d\n" % i) for i in range(BIG)]
    pause = Pause(fleet.tmp, "after_temp_write", nth=70)  # 64 named, then 6 of the second group
    a = fleet.daemon("a", faults=pause.spec, env=SHORT_LEASE)
    b = fleet.daemon("b", env={"PROMOTER_LOCK_TIMEOUT": "1"})
    request = prepare_promotion(a, fleet.repo, changes)
    original = _listing(fleet.repo)
    answer = _promote_in_background(a, request)
    pause.reached()
    operation_id = _operation_id(b)
    _hang(fleet, a)  # stopped mid-staging: no heartbeat, the repository lock held
    before_fence = _listing(fleet.repo)
    made = sorted(set(before_fence) - set(original))
    assert sum(Path(n).name.startswith(".promoter-tmp-") for n in made) == 70, made
    _until_leases_expired(b, "host-a", operation_id)
    fenced = _fence(b, "operator", "host-a", "host-b")
    assert fenced.status_code == 200, fenced.text
    assert fenced.json()["operations"] == [operation_id]
    watch = Watch(fleet.repo, closes=False)  # every name made, write or removal from now

    with b.client() as orch:  # A's lock: the stopped holder is named, nothing is written
        held = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
    assert (held.status_code, held.json()["code"]) == (409, "lock_unavailable"), held.text
    assert held.json()["holder"] == {"pid": a.proc.pid, "host": "host-a", "state": "stopped"}
    assert f"kill -CONT {a.proc.pid}" in held.json()["detail"]
    assert _listing(fleet.repo) == before_fence

    a.proc.send_signal(signal.SIGCONT)
    pause.release()
    answer["thread"].join()
    assert answer["status"] == 409 and answer["body"]["code"] == "host_fenced", answer
    written, removed = watch.events()
    assert written == []  # no name made and no byte written after the fence, even for a while
    assert set(removed) <= set(made)  # removals only of what A made before it
    after = _listing(fleet.repo)
    assert sorted(set(after) - set(before_fence)) == []  # nothing of A's after the fence
    assert after == original  # and what it made before is gone: the person's bytes as they were
    assert scratch.read_bytes() == b"the person's unsaved, untracked work\n"
    dirs = [n for n in made if before_fence[n] == "dir"]
    assert answer["body"]["worktree"] == (
        f"removed its 70 temp files and {len(dirs)} directories"  # those named before the fence
    ), answer["body"]
    a.logged("removed its 70 temp files")  # the line is there: it says nothing else
    assert not any("nothing written" in line for line in a.log)

    with b.client() as orch:
        done = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["owner"]["host"]) == ("completed", "host-b")
    expected = {**original, "src/app.txt": hashlib.sha256(V2).hexdigest(), "gen": "dir"}
    for path, _, new in changes[1:]:
        assert new is not None
        expected[path] = hashlib.sha256(new).hexdigest()
        expected[str(Path(path).parent)] = "dir"
    assert _listing(fleet.repo) == expected  # exact: no temp of anyone's left


PLACED = 130  # new files in one directory: three groups of replaces (TEMPS_TOGETHER = 64)


def test_a_host_stopped_while_replacing_and_fenced_replaces_nothing_more(
    tmp_path: Path,
) -> None:
    """A host stopped (SIGSTOP) after its first replace of a large promotion, every temp
    staged, and fenced to B: continued past its host lease, it reads its epoch before its
    next replace, so nothing more lands after the fence; it then removes its remaining
    temps (its own) and answers ``host_fenced``. B's recovery
    confirms what landed and writes the rest: exactly the bundle, no temp left."""
    shared = Ledger(tmp_path)
    try:
        changes: list[tuple[str, bytes | None, bytes | None]] = [
            (f"src/gen{i:03d}.txt", None, b"file %d\n" % i) for i in range(PLACED)
        ]
        pause = Pause(shared.tmp, "after_replace")
        a = shared.daemon("a", faults=pause.spec, env=SHORT_LEASE)
        b = shared.daemon("b")
        request = prepare_promotion(a, shared.repo, changes)
        original = _listing(shared.repo)
        answer = _promote_in_background(a, request)
        pause.reached()
        operation_id = _operation_id(b)
        _hang(shared, a)  # stopped after one replace: no heartbeat, the lock held
        at_fence = _listing(shared.repo)
        placed = [path for path, _, _ in changes if path in at_fence]
        assert placed == ["src/gen000.txt"]
        _until_leases_expired(b, "host-a", operation_id)
        fenced = _fence(b, "operator", "host-a", "host-b")
        assert fenced.status_code == 200, fenced.text

        a.proc.send_signal(signal.SIGCONT)
        pause.release()
        answer["thread"].join()
        assert answer["status"] == 409 and answer["body"]["code"] == "host_fenced", answer
        after = _listing(shared.repo)
        landed = [path for path, _, _ in changes if path in after]
        assert landed == ["src/gen000.txt"]  # the one replaced before the stop, no more
        assert not [n for n in after if ".promoter-tmp-" in n]  # its temps removed
        assert set(after) - set(original) == set(landed)
        assert answer["body"]["worktree"] == (
            "replaced 1 of its targets before it saw the fence; removed its 129 temp files "
            "and 0 directories"
        ), answer["body"]

        with b.client() as orch:
            done = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert done.status_code == 200, done.text
        assert (done.json()["status"], done.json()["owner"]["host"]) == ("completed", "host-b")
        expected = dict(original)
        for path, _, new in changes:
            assert new is not None
            expected[path] = hashlib.sha256(new).hexdigest()
        assert _listing(shared.repo) == expected
    finally:
        shared.close()


def _answered_in_background(
    daemon: DaemonProcess, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``POST path`` as the operator from a thread of its own: ``answer["thread"]`` ends once
    it is answered, with ``status`` and ``body``."""
    answer: dict[str, Any] = {}

    def post() -> None:
        with daemon.client("operator") as op:
            done = op.post(path, json=body) if body is not None else op.post(path)
            answer["status"], answer["body"] = done.status_code, done.json()

    thread = threading.Thread(target=post)
    thread.start()
    answer["thread"] = thread
    return answer


def _stopped_and_fenced(
    shared: Ledger, a: DaemonProcess, b: DaemonProcess, operation_id: str
) -> None:
    """A stopped (SIGSTOP, between two transactions) and, once its leases ran out, fenced
    to B, which takes ``operation_id`` over."""
    _hang(shared, a)  # no heartbeat, the repository lock held
    _until_leases_expired(b, "host-a", operation_id)
    fenced = _fence(b, "operator", "host-a", "host-b")
    assert fenced.status_code == 200, fenced.text
    assert fenced.json()["operations"] == [operation_id]


def _continued(a: DaemonProcess, pause: Pause, answer: dict[str, Any], watch: Watch) -> list[str]:
    """A continued until it answers ``host_fenced``, having made and written nothing since
    the fence (``watch``); the names it removed meanwhile."""
    a.proc.send_signal(signal.SIGCONT)
    pause.release()
    answer["thread"].join()
    assert answer["status"] == 409 and answer["body"]["code"] == "host_fenced", answer
    written, removed = watch.events()
    assert written == []  # no temp, directory or name made and no byte written, even for a while
    return removed


ROLLED = 130  # files a promotion changed and its rollback writes back: three groups of temps


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        # 64 written back, the second group's temps begun, fsynced one by one (no group
        # sync), the first of those fsyncs done and none named
        ("after_temp_fsync", 65),
        ("after_temp_write", 70),  # 64 written back, then 6 temps of the second group named
        ("rollback_after_step", 66),  # the second group's temps named, 2 of them put in place
    ],
)
def test_a_host_stopped_mid_group_of_a_rollback_and_fenced_makes_nothing_after_the_fence(
    tmp_path: Path, point: str, nth: int
) -> None:
    """F1 for a rollback: B promotes 130 changed files; A rolls the promotion back and is
    stopped (SIGSTOP) in the middle of a group of its temps, then fenced to B. Continued,
    A reads its epoch before its next temp, name or replace (its host lease ran out): no
    temp, directory or name of it appears after the fence (an inotify watch from the
    fence until A answers); it removes only temps of its own. B's recovery of the
    rollback ends it exactly: every file's old bytes, no temp left."""
    files = {f"src/gen{i:03d}.txt": b"old %d\n" % i for i in range(ROLLED)}
    shared = Ledger(tmp_path, files=files)
    try:
        changes: list[tuple[str, bytes | None, bytes | None]] = [
            (path, old, old.replace(b"old", b"new")) for path, old in files.items()
        ]
        pause = Pause(shared.tmp, point, nth=nth)
        one_by_one = {"PROMOTER_GROUP_SYNC": "false"} if point == "after_temp_fsync" else {}
        a = shared.daemon("a", faults=pause.spec, env={**SHORT_LEASE, **one_by_one})
        b = shared.daemon("b")
        original = _listing(shared.repo)
        request = prepare_promotion(b, shared.repo, changes)
        with b.client() as orch:
            promoted = orch.post("/v1/promotions", json={**request, "wait": True}).json()
        assert promoted["status"] == "completed", promoted
        promotion = str(promoted["operation_id"])
        child = rollback_id(promotion)
        answer = _answered_in_background(a, f"/v1/operations/{promotion}/rollback")
        pause.reached()
        _stopped_and_fenced(shared, a, b, child)
        at_fence = _listing(shared.repo)
        restored = [path for path in files if at_fence[path] == original[path]]
        assert len(restored) == (66 if point == "rollback_after_step" else 64), restored
        watch = Watch(shared.repo, closes=False)  # every name made, write or removal from now

        removed = _continued(a, pause, answer, watch)
        assert {Path(name).name for name in removed} <= {
            Path(name).name for name in at_fence if ".promoter-tmp-" in name
        }  # removals only of A's own temps
        after = _listing(shared.repo)
        assert after == {n: h for n, h in at_fence.items() if ".promoter-tmp-" not in n}

        with b.client("operator") as op:
            done = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "rolled_back", done.text
        assert _listing(shared.repo) == original  # exact: every old byte, no temp left
    finally:
        shared.close()


RESTORED_WRITES, RESTORED_DELETES = 70, 64  # two groups of writes, one of deletes


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("after_unlink", 2),  # 2 deletes of the first group done
        ("after_temp_write", 66),  # every delete, 64 writes, 2 temps of the second group named
    ],
)
def test_a_host_stopped_mid_group_of_a_restore_and_fenced_makes_nothing_after_the_fence(
    tmp_path: Path, point: str, nth: int
) -> None:
    """F1 for a restore: a snapshot restored over 134 changes (64 files to delete, 70 to
    write back), its host A stopped (SIGSTOP) in the middle of a group of deletes or of
    temps and fenced to B. Continued, A reads its epoch before its next temp, name,
    replace or delete (its host lease ran out): nothing of it appears after the fence (an
    inotify watch from the fence until A answers), nothing more is deleted, it removes
    only temps of its own. B's recovery of the restore ends it exactly: the snapshot."""
    shared = Ledger(
        tmp_path, files={f"src/mod{i:03d}.txt": b"base %d\n" % i for i in range(RESTORED_WRITES)}
    )
    try:
        pause = Pause(shared.tmp, point, nth=nth)
        a = shared.daemon("a", faults=pause.spec, env=SHORT_LEASE)
        b = shared.daemon("b")
        snapshots = "/v1/repositories/work/snapshots"
        with a.client("operator") as op:
            base = op.post(snapshots, json={"label": "base"}).json()["tree"]
        original = _listing(shared.repo)
        extra = [f"gen/new{i:03d}.txt" for i in range(RESTORED_DELETES)]
        (shared.repo / "gen").mkdir()
        for path in extra:
            (shared.repo / path).write_bytes(path.encode() + b"\n")
        for i in range(RESTORED_WRITES):
            (shared.repo / f"src/mod{i:03d}.txt").write_bytes(b"grown %d\n" % i)
        with a.client("operator") as op:
            grown = op.post(snapshots, json={"label": "grown"}).json()["tree"]
        answer = _answered_in_background(
            a, f"{snapshots}/{base}/restore", {"expected_current_tree": grown}
        )
        pause.reached()
        with b.client("operator") as op:
            listed = op.get("/v1/operations", params={"status": "in_progress"}).json()
        (operation_id,) = [str(o["operation_id"]) for o in listed["operations"]]
        _stopped_and_fenced(shared, a, b, operation_id)
        at_fence = _listing(shared.repo)
        gone = [path for path in extra if path not in at_fence]
        assert gone == (extra[:2] if point == "after_unlink" else extra)
        watch = Watch(shared.repo, closes=False)  # every name made, write or removal from now

        removed = _continued(a, pause, answer, watch)
        assert {Path(name).name for name in removed} <= {
            Path(name).name for name in at_fence if ".promoter-tmp-" in name
        }  # removals only of A's own temps
        after = _listing(shared.repo)
        assert [path for path in extra if path not in after] == gone  # nothing more deleted
        assert after == {n: h for n, h in at_fence.items() if ".promoter-tmp-" not in n}

        with b.client("operator") as op:
            done = op.post(f"/v1/operations/{operation_id}/recover", json={"fence": 0})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed", done.text
        assert _listing(shared.repo) == original  # exact: the snapshot, no temp left
    finally:
        shared.close()


FEW = {f"src/few{i}.txt": b"old %d\n" % i for i in range(5)}  # one group of temps


def _fenced_answer(answer: dict[str, Any], at_fence: dict[str, str], done: str) -> None:
    """The ``host_fenced`` answer of a pass stopped after two temps of its group and fenced:
    the promotion's shape, naming the two temps it removed (its own) and no directory."""
    temps = sorted(name for name in at_fence if ".promoter-tmp-" in name)
    assert len(temps) == 2, at_fence
    body = answer["body"]
    assert (answer["status"], body["code"]) == (409, "host_fenced"), body
    assert body["worktree"] == (
        f"{done} before it saw the fence; removed its 2 temp files and 0 directories"
    )
    assert sorted(body["removed_temps"]) == temps
    assert body["removed_dirs"] == []
    assert "kept" not in body


def test_a_rollback_fenced_before_its_next_temp_answers_the_temps_it_removed(
    tmp_path: Path,
) -> None:
    """A rolls back a promotion of 5 files and is stopped after its second temp, then
    fenced to B. Continued past its lease, it reads its epoch before its third temp and
    stands down: the answer is a fenced promotion's (``worktree``, ``removed_temps``,
    ``removed_dirs``), not a plain 409. The worktree holds the promotion's bytes, no temp;
    B's recovery of the rollback ends it exactly."""
    shared = Ledger(tmp_path, files=FEW)
    try:
        changes: list[tuple[str, bytes | None, bytes | None]] = [
            (path, old, old.replace(b"old", b"new")) for path, old in FEW.items()
        ]
        pause = Pause(shared.tmp, "after_temp_write", nth=2)
        a = shared.daemon("a", faults=pause.spec, env=SHORT_LEASE)
        b = shared.daemon("b")
        original = _listing(shared.repo)
        request = prepare_promotion(b, shared.repo, changes)
        with b.client() as orch:
            promoted = orch.post("/v1/promotions", json={**request, "wait": True}).json()
        assert promoted["status"] == "completed", promoted
        promotion = str(promoted["operation_id"])
        new = _listing(shared.repo)
        child = rollback_id(promotion)
        answer = _answered_in_background(a, f"/v1/operations/{promotion}/rollback")
        pause.reached()
        _stopped_and_fenced(shared, a, b, child)
        at_fence = _listing(shared.repo)
        watch = Watch(shared.repo, closes=False)

        _continued(a, pause, answer, watch)
        _fenced_answer(answer, at_fence, "rolled back 0 of its targets")
        assert _listing(shared.repo) == new  # the promotion's bytes, A's temps gone

        with b.client("operator") as op:
            done = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "rolled_back", done.text
        assert _listing(shared.repo) == original
    finally:
        shared.close()


def test_a_restore_fenced_before_its_next_temp_answers_the_temps_it_removed(
    tmp_path: Path,
) -> None:
    """A restores a snapshot over 5 changed files and is stopped after its second temp,
    then fenced to B. Continued past its lease, it stands down before its third temp with
    a fenced promotion's answer, not a plain 409; the person's grown files as they were,
    no temp; B's recovery of the restore ends it exactly: the snapshot."""
    shared = Ledger(tmp_path, files=FEW)
    try:
        pause = Pause(shared.tmp, "after_temp_write", nth=2)
        a = shared.daemon("a", faults=pause.spec, env=SHORT_LEASE)
        b = shared.daemon("b")
        snapshots = "/v1/repositories/work/snapshots"
        with a.client("operator") as op:
            base = op.post(snapshots, json={"label": "base"}).json()["tree"]
        original = _listing(shared.repo)
        for path, old in FEW.items():
            (shared.repo / path).write_bytes(old.replace(b"old", b"grown"))
        grown_files = _listing(shared.repo)
        with a.client("operator") as op:
            grown = op.post(snapshots, json={"label": "grown"}).json()["tree"]
        answer = _answered_in_background(
            a, f"{snapshots}/{base}/restore", {"expected_current_tree": grown}
        )
        pause.reached()
        with b.client("operator") as op:
            listed = op.get("/v1/operations", params={"status": "in_progress"}).json()
        (operation_id,) = [str(o["operation_id"]) for o in listed["operations"]]
        _stopped_and_fenced(shared, a, b, operation_id)
        at_fence = _listing(shared.repo)
        watch = Watch(shared.repo, closes=False)

        _continued(a, pause, answer, watch)
        _fenced_answer(answer, at_fence, "restored 0 of its targets")
        assert _listing(shared.repo) == grown_files  # nothing replaced, A's temps gone

        with b.client("operator") as op:
            done = op.post(f"/v1/operations/{operation_id}/recover", json={"fence": 0})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed", done.text
        assert _listing(shared.repo) == original
    finally:
        shared.close()


GONE = {**FEW, "gone/only.txt": b"the only file of its directory\n"}
MINE = {"mine.txt": b"the person's untracked notes\n", "src/mine.txt": b"the person's own\n"}


@pytest.mark.parametrize("saved", [False, True], ids=["empty", "person_saved_in_it"])
def test_a_rollback_fenced_after_making_a_directory_removes_it_only_when_empty(
    tmp_path: Path, saved: bool
) -> None:
    """A promotion deleted ``gone/only.txt`` (leaving ``gone`` empty) and the person
    removed ``gone``; the rollback makes it again as it stages its temps. A is stopped
    after its second temp and fenced to B; continued, it stands down before its third
    temp: it removes its two temps and ``gone`` (``removed_dirs``), the worktree exactly
    the promotion's, the person's untracked files as they were. When the person saved a file into ``gone`` meanwhile,
    the directory is not empty: it stays, with their file, and is not named. B's recovery
    ends the rollback exactly."""
    shared = Ledger(tmp_path, files=GONE)
    try:
        for path, data in MINE.items():
            (shared.repo / path).write_bytes(data)
        changes: list[tuple[str, bytes | None, bytes | None]] = [
            (path, old, old.replace(b"old", b"new")) for path, old in FEW.items()
        ]
        changes.append(("gone/only.txt", GONE["gone/only.txt"], None))
        pause = Pause(shared.tmp, "after_temp_write", nth=2)
        a = shared.daemon("a", faults=pause.spec, env=SHORT_LEASE)
        b = shared.daemon("b")
        original = _listing(shared.repo)
        request = prepare_promotion(b, shared.repo, changes)
        with b.client() as orch:
            promoted = orch.post("/v1/promotions", json={**request, "wait": True}).json()
        assert promoted["status"] == "completed", promoted
        promotion = str(promoted["operation_id"])
        assert _listing(shared.repo)["gone"] == "dir"  # left, empty: the person removes it
        (shared.repo / "gone").rmdir()
        new = _listing(shared.repo)
        child = rollback_id(promotion)
        answer = _answered_in_background(a, f"/v1/operations/{promotion}/rollback")
        pause.reached()
        made = _listing(shared.repo)
        temps = sorted(name for name in made if ".promoter-tmp-" in name)
        assert made["gone"] == "dir" and len(temps) == 2, made  # the rollback made it
        assert [name for name in made if name.startswith("gone/")] == []  # empty yet
        theirs = b"the person's save in the re-made directory\n"
        if saved:
            (shared.repo / "gone" / "saved.txt").write_bytes(theirs)
        _stopped_and_fenced(shared, a, b, child)
        watch = Watch(shared.repo, closes=False)

        _continued(a, pause, answer, watch)
        body = answer["body"]
        assert (answer["status"], body["code"]) == (409, "host_fenced"), body
        dirs = 0 if saved else 1
        assert body["worktree"] == (
            f"rolled back 0 of its targets before it saw the fence; "
            f"removed its 2 temp files and {dirs} directories"
        )
        assert sorted(body["removed_temps"]) == temps
        assert body["removed_dirs"] == ([] if saved else ["gone"])
        assert "kept" not in body
        if saved:
            saved_sha = hashlib.sha256(theirs).hexdigest()
            assert _listing(shared.repo) == {**new, "gone": "dir", "gone/saved.txt": saved_sha}
            original = {**original, "gone/saved.txt": saved_sha}
        else:
            assert _listing(shared.repo) == new  # the promotion's bytes, A's temps gone
        for path, data in MINE.items():
            assert (shared.repo / path).read_bytes() == data

        with b.client("operator") as op:
            done = op.post(f"/v1/operations/{child}/recover", json={"fence": 0})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "rolled_back", done.text
        assert _listing(shared.repo) == original
        for path, data in GONE.items():
            assert (shared.repo / path).read_bytes() == data
    finally:
        shared.close()


@pytest.mark.postgresql_only
def test_a_fence_never_lands_between_an_epoch_check_and_its_commit() -> None:
    """A transaction that checked the epoch holds the host's lock shared until it commits:
    a fence started meanwhile waits for that commit (seen in ``pg_locks``), and the next
    check after the fence sees the raised epoch."""
    database = Database(os.environ["PROMOTER_DATABASE_URL"], 5.0)
    check = guard(Registration("host-a", 1, False))
    with database.session() as session:
        hosts.register(session, "host-a", [], "2000-01-01T00:00:00Z")
    fenced: list[int] = []

    def fence() -> None:
        with database.session() as session:
            assert hosts.for_update(session, "host-a") is not None
            fenced.append(hosts.fence(session, "host-a", to="host-b", by="op", operations=[])[0])

    with database.session() as attempt:
        check(attempt)  # the attempt goes on: host-a is active at epoch 1
        racer = threading.Thread(target=fence)
        racer.start()
        _until_an_advisory_lock_waits(database, racer)
        assert fenced == []  # the fence waits for the attempt's commit
        attempt.execute(text("SELECT 1"))
    racer.join()
    assert fenced == [2]
    with database.session() as later, pytest.raises(HostFenced):
        check(later)
    database.dispose()


def _until_an_advisory_lock_waits(database: Database, thread: threading.Thread) -> None:
    query = text(  # this test's database only: pg_locks lists every database's waits
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    deadline = time.monotonic() + 60
    with database.engine.connect() as connection:
        while thread.is_alive() and not connection.execute(query).scalar_one():
            assert time.monotonic() < deadline, "the fence neither waited nor ended"
            connection.rollback()
            time.sleep(0.005)


def test_a_fenced_daemon_admitted_again_is_told_to_restart_not_to_be_admitted(
    ledger: Ledger,
) -> None:
    """A fenced host's daemon, its host admitted while it runs, is still not ready (it
    writes nothing until restarted); its ``/readyz`` reason says that it was admitted and
    only a restart is left, not that an operator must admit it (which was done)."""
    a = ledger.daemon("a", env=SHORT_LEASE)
    b = ledger.daemon("b")
    a.kill()
    deadline = time.monotonic() + 60
    while not _hosts(b)["host-a"]["lease_expired"]:
        assert time.monotonic() < deadline, "host-a's lease never ran out"
        time.sleep(0.05)
    fenced = _fence(b, "operator", "host-a", "host-b")
    assert fenced.status_code == 200, fenced.text
    back = ledger.daemon("a", env=SHORT_LEASE)
    before = httpx.get(f"{back.url}/readyz", verify=tls_context(back.url))
    assert before.status_code == 503, before.text
    assert "`promoter hosts admit host-a`" in before.json()["reason"]
    admitted = _cli(b, "hosts", "admit", "host-a")
    assert admitted.returncode == 0, admitted.stderr
    after = httpx.get(f"{back.url}/readyz", verify=tls_context(back.url))
    assert after.status_code == 503, after.text
    assert after.json()["checks"]["host_active"] is False
    assert after.json()["reason"] == (
        "host host-a was fenced off and an operator admitted it again (epoch 2): restart "
        "this daemon to write again"
    )
