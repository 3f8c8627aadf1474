"""Partitions simulated on one machine: one host loses the ledger while another takes over.

Host A reaches PostgreSQL only through a forwarder the test owns
(``tests.support.forwarder``); host B reaches it directly. Both share the person's
worktree and one state directory (the replacement on the same machine of
protocol: hosts#fencing), on a PostgreSQL cluster the module starts itself
(``database_url``). A is paused at a fault point of a large promotion (after its plan;
at the end of its first group of temps; after every replace), then its link is cut (reset, or a silent black hole) or
stalled (its bytes held until the heal). Once B reports A's leases run out, the operator
fences A to B; A goes on while still partitioned, and once its traffic met the partition
(after a reset, its attempt logged its wait for the ledger; else the forwarder swallowed
or held what A sent next, its heartbeat's or its attempt's) the link heals.

Checked, for each point and each kind of partition: from the fence on nothing of A's
appears in the worktree (an inotify watch of every directory from the fence until A
answered: no name made, no byte written; removals only of A's own temps and directories;
every name left holds the bytes it held at the fence); B cannot take the operation while
A holds its lock, and takes it once A stands down; A answers ``host_fenced`` (409) and
is not ready from then on; the promotion ends ``completed`` once, attempt 1, with the
exact bytes, and the person's own files (tracked, untracked, unsaved) byte-identical
throughout; a new process of A is not ready until an operator admits the host and it
starts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter.client.wire import tls_context
from tests.support.flows import init_repo
from tests.support.forwarder import Forwarder
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.watch import Watch

# two daemons, a fence and a restart a test: seconds alone
pytestmark = pytest.mark.slow

OLD, NEW = b"one\n", b"two\n"
PERSONS = {
    "src/app.txt": OLD,
    "src/lib.txt": b"left\n",
    "notes/mine.txt": b"the person's notes\n",
}
UNSAVED = b"the person's unsaved, untracked work\n"
BIG = 130  # new files in new directories: three groups of temps (TEMPS_TOGETHER = 64)
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [("src/app.txt", OLD, NEW)] + [
    (f"gen/d{i // 50}/f{i:04d}.txt", None, b"file %d\n" % i) for i in range(BIG)
]
SHORT_LEASE = {"PROMOTER_OWNER_LEASE_SECONDS": "1"}
_BOUND = 120.0


class Fleet:
    """The person's worktree, the shared state directory, and the test's daemons."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.repo = init_repo(tmp / "work", PERSONS)
        (self.repo / "scratch.txt").write_bytes(UNSAVED)
        self.state = tmp / "state"
        self.started: list[DaemonProcess] = []

    def daemon(self, name: str, url: str, *, faults: str = "", **env: str) -> DaemonProcess:
        daemon = DaemonProcess(
            self.state,
            {"work": self.repo},
            faults=faults,
            extra_env={
                "PROMOTER_HOST_ID": f"host-{name}",
                "PROMOTER_DATABASE_URL": url,
                "PROMOTER_SIGNING_KEY_DIR": str(self.tmp / f"signing-{name}"),
                # A's replacement shares A's state directory
                **({} if name == "a" else {"PROMOTER_REPLACES_HOST": "host-a"}),
                **env,
            },
        )
        self.started.append(daemon)
        return daemon

    def close(self) -> None:
        for daemon in self.started:
            daemon.kill()


@pytest.fixture
def fleet(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    shared = Fleet(tmp_path, database_url)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def forwarder(database_url: str, fleet: Fleet) -> Iterator[Forwarder]:
    """Host A's link to the ledger; closed after the daemons are (``fleet`` first)."""
    with Forwarder.to(database_url) as link:
        yield link


def _listing(repo: Path) -> dict[str, str]:
    """Every name in the worktree outside .git: ``dir`` for a directory, else the sha256
    of the file's bytes."""
    found: dict[str, str] = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo)
        if rel.parts[0] == ".git":
            continue
        found[str(rel)] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


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


def _until_leases_expired(daemon: DaemonProcess, host: str, operation_id: str) -> None:
    """Until ``daemon`` reports the host lease and the operation's owner lease of ``host``
    run out (a condition the ledger reports; bounded, no time assumed)."""
    deadline = time.monotonic() + _BOUND
    with daemon.client("operator") as operator:
        while True:
            owner = operator.get(f"/v1/operations/{operation_id}").json()["owner"]
            hosts = {h["host_id"]: h for h in operator.get("/v1/hosts").json()["hosts"]}
            if owner["lease_expired"] and hosts[host]["lease_expired"]:
                return
            assert time.monotonic() < deadline, "the leases never ran out"
            time.sleep(0.05)


def _is_own(path: str, operation_id: str, at_fence: dict[str, str]) -> bool:
    """Whether ``path`` is one of the promotion's temps, or a directory it made (one of
    the new files' directories)."""
    name = Path(path).name
    made_dir = at_fence.get(path) == "dir" and path.split("/")[0] == "gen"
    return name.startswith(f".promoter-tmp-{operation_id}-") or made_dir


def _stood_down(answer: dict[str, Any]) -> None:
    """A's answer to its promotion: ``host_fenced``, the operation handed to B; whether
    A learnt of the fence at an epoch check or, having lost the ledger first, when it
    came to put the operation back."""
    assert answer.get("status") == 409, answer
    body = answer["body"]
    assert (body["code"], body["to_host"]) == ("host_fenced", "host-b"), answer


def _until_logged(daemon: DaemonProcess, text: str) -> None:
    """Until ``daemon`` logged a line holding ``text`` (its own word that it got there)."""
    deadline = time.monotonic() + _BOUND
    while not any(text in line for line in daemon.log):
        assert time.monotonic() < deadline, f"the daemon never logged {text!r}"
        time.sleep(0.02)


def _cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    token = daemon.state_dir / "credentials" / "operator.token"
    argv = [sys.executable, "-m", "promoter.cli.main", *args, "--url", daemon.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    return subprocess.run(
        [*argv, "--token-file", str(token)], capture_output=True, text=True, env=env, timeout=120
    )


def _ready(daemon: DaemonProcess) -> httpx.Response:
    return httpx.get(f"{daemon.url}/readyz", verify=tls_context(daemon.url), timeout=60)


def _expected(original: dict[str, str]) -> dict[str, str]:
    """The worktree once the promotion completed: the person's files, the new ones."""
    expected = {**original, "src/app.txt": hashlib.sha256(NEW).hexdigest(), "gen": "dir"}
    for path, _, new in CHANGES[1:]:
        assert new is not None
        expected[path] = hashlib.sha256(new).hexdigest()
        expected[str(Path(path).parent)] = "dir"
    return expected


# (fault point, the n-th time): after the plan, before any temp; at the end of the first
# group of temps, before the epoch check of the second; every target replaced, the
# outcome not yet committed
POINTS = [("after_journal", 1), ("after_temp_write", 64), ("after_replaces", 1)]


@pytest.mark.parametrize("how", ["reset", "drop", "stall"])
@pytest.mark.parametrize(("point", "nth"), POINTS)
def test_a_host_partitioned_mid_promotion_writes_nothing_after_its_fence(
    fleet: Fleet, forwarder: Forwarder, database_url: str, point: str, nth: int, how: str
) -> None:
    pause = Pause(fleet.tmp, point, nth)
    a = fleet.daemon(
        "a",
        forwarder.url(database_url),
        faults=pause.spec,
        PROMOTER_DATABASE_CONNECT_TIMEOUT="2",
        # a transaction of A's stalled on the link (its heartbeat's, holding its host's
        # lock shared) is ended by the server soon, as a hung host's is
        PROMOTER_DATABASE_IDLE_TRANSACTION_TIMEOUT="2",
        **SHORT_LEASE,
    )
    b = fleet.daemon("b", database_url, PROMOTER_LOCK_TIMEOUT="1")
    request = prepare_promotion(a, fleet.repo, CHANGES)
    original = _listing(fleet.repo)
    answer = _promote_in_background(a, request)
    pause.reached()
    operation_id = _operation_id(b)

    if how == "stall":
        forwarder.pause()  # A alone loses the ledger: its bytes wait on the link
    else:
        forwarder.cut("reset" if how == "reset" else "drop")
    _until_leases_expired(b, "host-a", operation_id)
    at_fence = _listing(fleet.repo)
    watch = Watch(fleet.repo)
    fenced = _cli(b, "hosts", "fence", "host-a", "--to", "host-b", "--json")
    assert fenced.returncode == 0, fenced.stderr
    assert json.loads(fenced.stdout)["operations"] == [operation_id]

    with b.client() as orch:  # A is alive and holds the lock: B takes nothing yet
        held = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
    assert (held.status_code, held.json()["code"]) == (409, "lock_unavailable"), held.text
    assert held.json()["holder"]["pid"] == a.proc.pid
    assert _listing(fleet.repo) == at_fence

    swallowed, stalled = forwarder.swallowed, forwarder.stalled
    pause.release()  # A goes on, partitioned: it can confirm its epoch with nobody
    if how == "reset":  # A's next transaction fails: it waits for the ledger
        _until_logged(a, f"putting back operation {operation_id}: the database did not answer")
    elif how == "drop":  # A's next transaction goes into the black hole, and waits there
        forwarder.until_swallowed(swallowed)
    else:  # A's next transaction waits on the stalled link
        forwarder.until_stalled(stalled)
    now = _listing(fleet.repo)  # at most its own temps taken back
    assert {p: at_fence[p] for p in now} == now
    forwarder.heal()  # ... and once A's link heals, it learns of the fence
    answer["thread"].join(_BOUND)
    assert not answer["thread"].is_alive()
    _stood_down(answer)
    made, removed = watch.events()
    after = _listing(fleet.repo)

    # nothing of A's after the fence: no name made, no byte written; only its own removed
    assert made == [], made[:10]
    assert all(p not in original and _is_own(p, operation_id, at_fence) for p in removed), removed
    assert set(after) <= set(at_fence)
    assert {p: at_fence[p] for p in after} == after  # no byte changed since the fence
    # what A left (its temps and directories, if it lost the ledger before it learnt of
    # the fence) is its own, for B's recovery; the person's own files are as they were
    promoted = _expected(original) if point == "after_replaces" else {}
    assert all(
        p in original or _is_own(p, operation_id, at_fence) or after[p] == promoted.get(p)
        for p in after
    ), after
    mine = {p: h for p, h in original.items() if p != "src/app.txt"}
    assert {p: after[p] for p in mine} == mine
    assert (
        after["src/app.txt"]
        == hashlib.sha256(NEW if point == "after_replaces" else OLD).hexdigest()
    )
    assert (fleet.repo / "scratch.txt").read_bytes() == UNSAVED

    ready = _ready(a)  # healed, and fenced: not ready, for the rest of its life
    assert ready.status_code == 503, ready.text
    assert ready.json()["checks"] == {
        "database": True,
        "state_dir_writable": True,
        "host_active": False,
    }
    assert "host host-a was fenced off" in ready.json()["reason"]

    with b.client() as orch:
        done = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert done.status_code == 200, done.text
        view = done.json()
        assert (view["status"], view["owner"]["host"], view["attempt"]) == (
            "completed",
            "host-b",
            1,
        )
        assert view["events_verified"]
    with b.client("operator") as operator:
        (listed,) = operator.get("/v1/operations").json()["operations"]
    assert listed["operation_id"] == operation_id  # one operation, one outcome
    assert _listing(fleet.repo) == _expected(original)  # exact: no temp of anyone's left
    assert (fleet.repo / "scratch.txt").read_bytes() == UNSAVED

    # A stays fenced until an operator admits it and it starts again
    a.kill()
    back = fleet.daemon("a", database_url, **SHORT_LEASE)
    assert _ready(back).status_code == 503
    admitted = _cli(b, "hosts", "admit", "host-a", "--json")
    assert admitted.returncode == 0, admitted.stderr
    assert _ready(back).status_code == 503  # this process registered while fenced
    back.kill()
    again = fleet.daemon("a", database_url, **SHORT_LEASE)
    ready = _ready(again)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["host_active"] is True
