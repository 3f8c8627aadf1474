"""S7: a database restarted under a promotion, a rollback or a restore strands nothing.

Each test pauses the operation at a named fault point, stops the database, lets the
operation go on into the outage, and starts the database again only once the attempt
is retrying its put-back (the fault point ``database_retry``, reached before each
wait of ``promoter.store.outage``). Each ends exact (``completed``, or rolled back,
with exact bytes) without restarting the daemon. PostgreSQL is a throwaway cluster the
module makes itself (``tests.support.own_postgres``, one fresh database per test); on
SQLite the outage is a lock: another connection holds the database file exclusively.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from promoter.engine.operation.rollback import rollback_id
from promoter.engine.operation.runner import runner
from promoter.engine.operation.watchdog import sweep
from promoter.engine.ownership import Heartbeat
from tests.support.daemon import Daemon, running_daemon
from tests.support.own_postgres import OwnPostgres, binaries
from tests.support.pause import Pause, specs
from tests.support.promotion import operation_view, promote, submit, tree_bytes

# a database stopped and started a test: seconds alone
pytestmark = pytest.mark.slow

BIN = binaries()
needs_postgres = pytest.mark.skipif(BIN is None, reason="no PostgreSQL initdb installed here")

FILES = {"src/app.py": b"print('v1')\n", "src/util.py": b"def f():\n    return 1\n"}
NEW = {"src/app.py": b"print('v2')\n", "src/util.py": b"def f():\n    return 2\n"}
CHANGES = [(path, FILES[path], NEW[path]) for path in FILES]
pytestmark = [pytestmark, pytest.mark.repo("lab", FILES)]


def _as_files(files: dict[str, bytes]) -> dict[str, tuple[bytes, int]]:
    return {path: (data, 0o644) for path, data in sorted(files.items())}


def _sqlite(tmp_path: Path) -> str:
    """A SQLite ledger of the test's own, whatever database the suite runs on."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def _faults(monkeypatch: pytest.MonkeyPatch, *pauses: Pause) -> None:
    monkeypatch.setenv(faults.ENV, specs(*pauses))
    faults.reset()


class Call:
    """One HTTP request run in a thread of its own (it waits through the outage)."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self._send = send
        self.answer: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.answer = self._send()

    def result(self) -> httpx.Response:
        self._thread.join(120)
        assert self.answer is not None, "the request never answered"
        return self.answer


def _outage(
    point: Pause, retry: Pause, stop: Callable[[], None], start: Callable[[], None]
) -> float:
    """Paused at ``point``: the database goes away, the operation goes on; once it retries
    its put-back the database comes back. Returns when the database answered again."""
    point.reached()
    stop()
    point.release()
    retry.reached()
    start()
    back = time.monotonic()
    retry.release()
    return back


def _promotion(daemon: Daemon, repo: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
    return bundle, receipt


def _completed(daemon: Daemon, operation_id: str) -> dict[str, Any]:
    view = operation_view(daemon, operation_id)
    assert view["status"] == "completed", view
    with daemon.orchestrator() as orch:
        receipt = orch.get(f"/v1/operations/{operation_id}/receipt")
    assert receipt.status_code == 200, receipt.text
    assert receipt.json()["operation_id"] == operation_id
    return view


@needs_postgres
@pytest.mark.parametrize(
    "point",
    [
        "after_journal",
        "after_temps_journaled",
        "after_replace",
        "after_readback",
        "before_receipt",
    ],
)
def test_a_promotion_the_database_left_mid_write_completes_once_it_is_back(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Files written, the database gone: the attempt puts the operation back
    (``needs_recovery``) as soon as the database answers and, with ``auto_recover``,
    recovers it by the usual table: the waiting request answers ``completed``."""
    with running_daemon(
        tmp_path / "s", {"lab": repo}, database_url=database_url, auto_recover=True
    ) as daemon:
        bundle, receipt = _promotion(daemon, repo)
        paused, retry = Pause(tmp_path, point), Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)
        call = Call(lambda: promote(daemon, bundle, receipt))
        back = _outage(paused, retry, cluster.stop, cluster.start)
        answer = call.result()
        took = time.monotonic() - back
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        view = _completed(daemon, answer.json()["operation_id"])
        print(f"\n[S7] promotion at {point}: database back -> completed in {took:.3f} s")
    assert [a["status"] for a in view["attempts"]] == ["completed"]
    assert [e["kind"] for e in view["events"]].count("outcome") == 1  # one receipt
    assert view["events_verified"] is True
    assert tree_bytes(repo) == _as_files(NEW)
    assert not daemon.services.live.now()


@needs_postgres
def test_an_outage_before_the_plan_delays_the_same_attempt_which_completes(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F2: the database gone before the plan was journaled, back within the bound
    (``outage_retry_seconds``, 600 s here): nothing was written, so the attempt waits for
    it, reads the worktree back and plans again: attempt 1 ends ``completed``, exact
    bytes, one decision and one outcome; no refusal for the orchestrator to notice."""
    with running_daemon(tmp_path / "s", {"lab": repo}, database_url=database_url) as daemon:
        bundle, receipt = _promotion(daemon, repo)
        paused, retry = Pause(tmp_path, "before_journal"), Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)
        call = Call(lambda: promote(daemon, bundle, receipt))
        back = _outage(paused, retry, cluster.stop, cluster.start)
        first = call.result()
        took = time.monotonic() - back
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "completed", first.text
        print(f"\n[F2] database back before the plan -> completed in {took:.3f} s")
        view = _completed(daemon, first.json()["operation_id"])
    assert [(a["attempt"], a["status"], a["code"]) for a in view["attempts"]] == [
        (1, "completed", None)
    ]
    kinds = [e["kind"] for e in view["events"]]
    assert (kinds.count("decision"), kinds.count("action"), kinds.count("outcome")) == (1, 1, 1)
    assert view["events_verified"] is True
    assert tree_bytes(repo) == _as_files(NEW)


@needs_postgres
def test_an_outage_past_the_bound_refuses_with_database_unavailable_and_writes_nothing(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the bound (``outage_retry_seconds = 0``: the first failure is past it) the
    attempt is refused ``database_unavailable`` naming attempt 1, nothing written; the
    waiting request answers 503 with ``Retry-After`` (which the clients retry) and asking
    again runs attempt 2 to ``completed``."""
    with running_daemon(
        tmp_path / "s", {"lab": repo}, database_url=database_url, outage_retry_seconds=0
    ) as daemon:
        bundle, receipt = _promotion(daemon, repo)
        paused, bound = Pause(tmp_path, "before_journal"), Pause(tmp_path, "outage_bound_passed")
        _faults(monkeypatch, paused, bound)
        call = Call(lambda: promote(daemon, bundle, receipt))
        paused.reached()
        cluster.stop()
        paused.release()
        bound.reached()  # gave up; the refusal is recorded once the database answers
        cluster.start()
        bound.release()
        first = call.result()
        assert first.status_code == 503, first.text
        assert first.headers["Retry-After"] == "2"
        problem = first.json()
        assert (problem["code"], problem["attempt"], problem["operation_status"]) == (
            "database_unavailable",
            1,
            "refused",
        )
        operation_id = problem["operation_id"]
        assert "outage_retry_seconds" in problem["detail"]
        assert tree_bytes(repo) == _as_files(FILES)
        refused = operation_view(daemon, operation_id)
        assert (refused["status"], refused["code"], refused["steps"]) == (
            "refused",
            "database_unavailable",
            [],
        )
        assert refused["report"]["error"]["attempt"] == 1
        again = promote(daemon, bundle, receipt)
        assert again.status_code == 200, again.text
        view = _completed(daemon, again.json()["operation_id"])
    assert [(a["attempt"], a["status"], a["code"]) for a in view["attempts"]] == [
        (1, "refused", "database_unavailable"),
        (2, "completed", None),
    ]
    assert tree_bytes(repo) == _as_files(NEW)


@needs_postgres
def test_an_attempt_that_gave_up_is_found_by_the_watchdog_and_recovered(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's case: the attempt could not put its operation back before its bound
    ran out (``outage_retry_seconds = 0``), leaving it ``in_progress`` with its files
    written. The heartbeat no longer renews its lease; the watchdog marks it
    ``needs_recovery``; ``recover`` (409 before) completes it, the daemon never restarted."""
    with running_daemon(
        tmp_path / "s",
        {"lab": repo},
        database_url=database_url,
        outage_retry_seconds=0,
        watchdog_seconds=3600,  # swept by the test, at a known moment
    ) as daemon:
        bundle, receipt = _promotion(daemon, repo)
        # past the host's last epoch check before writing (promoter.engine.fencing), which
        # needs the database: from here the writes go on without it, as in the issue
        paused = Pause(tmp_path, "after_replace")
        _faults(monkeypatch, paused)
        started = promote(daemon, bundle, receipt, wait=False)
        assert started.status_code == 202, started.text
        operation_id = started.json()["operation_id"]
        paused.reached()
        cluster.stop()
        paused.release()
        future = runner(daemon.services).future(operation_id)
        assert future is not None
        with pytest.raises(Exception) as gave_up:
            future.result(60)
        assert getattr(gave_up.value, "code", None) == "database_unavailable"
        cluster.start()
        stranded = operation_view(daemon, operation_id)
        assert stranded["status"] == "in_progress"
        assert tree_bytes(repo) == _as_files(NEW)  # every file written, no receipt
        assert not daemon.services.live.has(operation_id)
        services = daemon.services
        beat = Heartbeat(services.db, services.owner, 60.0, services.live.now).beat()
        assert beat == 0  # a dead attempt's lease is not kept alive
        assert sweep(daemon.services) == [operation_id]
        marked = operation_view(daemon, operation_id)
        assert (marked["status"], marked["code"]) == ("needs_recovery", "attempt_lost")
        assert sweep(daemon.services) == []  # once
        with daemon.orchestrator() as orch:
            answer = orch.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        _completed(daemon, operation_id)
    assert tree_bytes(repo) == _as_files(NEW)


def _promoted(daemon: Daemon, repo: Path) -> str:
    bundle, receipt = _promotion(daemon, repo)
    answer = promote(daemon, bundle, receipt)
    assert answer.json()["status"] == "completed", answer.text
    return str(answer.json()["operation_id"])


def _rollback(daemon: Daemon, operation_id: str) -> httpx.Response:
    with daemon.operator() as op:
        return op.post(f"/v1/operations/{operation_id}/rollback", json={"note": "undo"})


@needs_postgres
@pytest.mark.parametrize(
    "point",
    [
        "rollback_before_journal",
        "rollback_after_step",
        "rollback_before_receipt",
        "rollback_after_receipt",
    ],
)
def test_a_rollback_the_database_left_mid_way_finishes_when_asked_again(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rollback's request answers 503 ``database_unavailable`` once its rollback is
    put back (``needs_recovery``); the client's retry resumes it and the old bytes are
    back exactly."""
    with running_daemon(tmp_path / "s", {"lab": repo}, database_url=database_url) as daemon:
        operation_id = _promoted(daemon, repo)
        paused, retry = Pause(tmp_path, point), Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)
        call = Call(lambda: _rollback(daemon, operation_id))
        _outage(paused, retry, cluster.stop, cluster.start)
        first = call.result()
        assert first.status_code == 503, first.text
        assert first.json()["code"] == "database_unavailable"
        child = operation_view(daemon, rollback_id(operation_id))
        assert child["status"] == "needs_recovery"
        again = _rollback(daemon, operation_id)
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "rolled_back"
        assert (
            operation_view(daemon, rollback_id(operation_id))["status"]
            == operation_view(daemon, operation_id)["status"]
            == "rolled_back"
        )
    assert tree_bytes(repo) == _as_files(FILES)


@needs_postgres
@pytest.mark.parametrize("point", ["after_temp_write", "after_replace", "after_unlink"])
def test_a_restore_the_database_left_mid_way_is_recovered_exactly(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restore's request answers 503 once it is put back; the operator's ``recover``
    finishes it: the worktree is the snapshot's, byte for byte."""
    base = "/v1/repositories/lab/snapshots"
    with running_daemon(tmp_path / "s", {"lab": repo}, database_url=database_url) as daemon:
        with daemon.operator() as op:
            target = op.post(base, json={"label": "good"}).json()["tree"]
            (repo / "src" / "app.py").write_bytes(b"print('broken')\n")
            (repo / "junk.txt").write_bytes(b"junk\n")
            current = op.post(base, json={"label": "broken"}).json()["tree"]
        paused, retry = Pause(tmp_path, point), Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)

        def restore() -> httpx.Response:
            with daemon.operator() as op:
                return op.post(f"{base}/{target}/restore", json={"expected_current_tree": current})

        call = Call(restore)
        _outage(paused, retry, cluster.stop, cluster.start)
        first = call.result()
        assert first.status_code == 503, first.text
        assert first.json()["code"] == "database_unavailable"
        with daemon.operator() as op:
            listed = op.get("/v1/operations", params={"status": "needs_recovery"}).json()
            (restore_op,) = [o["operation_id"] for o in listed["operations"]]
            answer = op.post(f"/v1/operations/{restore_op}/recover", json={"fence": 0})
        assert answer.status_code == 200, answer.text
        assert (answer.json()["kind"], answer.json()["status"]) == ("restore", "completed")
    assert tree_bytes(repo) == _as_files(FILES)


GROUPED = {f"src/g{i:03d}.txt": b"old %d\n" % i for i in range(130)}  # three groups of replaces
GROUPED_NEW = {path: data.replace(b"old", b"new") for path, data in GROUPED.items()}


@needs_postgres
@pytest.mark.repo("lab", GROUPED)
def test_an_epoch_unreadable_between_replace_groups_leaves_needs_recovery_and_nothing_more(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A promotion of 130 files paused after its first group of 64 replaces; the database
    goes away, so the epoch check before the second group cannot read the epoch. Nothing
    more is replaced and no temp is left: 64 files new, 66 old. Once the database is back
    the operation is ``needs_recovery`` (no ``auto_recover``), and its recovery completes
    it exactly: every file new, one receipt."""
    with running_daemon(tmp_path / "s", {"lab": repo}, database_url=database_url) as daemon:
        identity = daemon.services.registry.by_name("lab").identity
        changes = [(path, GROUPED[path], GROUPED_NEW[path]) for path in GROUPED]
        _, bundle, receipt = submit(daemon, repo, identity, changes)
        paused = Pause(tmp_path, "after_replace", nth=64)
        retry = Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)
        call = Call(lambda: promote(daemon, bundle, receipt))
        paused.reached()
        cluster.stop()
        paused.release()
        retry.reached()  # the attempt stopped and waits to put the operation back
        first = sorted(GROUPED)[:64]
        expected = {p: GROUPED_NEW[p] if p in first else GROUPED[p] for p in GROUPED}
        assert tree_bytes(repo) == _as_files(expected)  # nothing more, and no temp
        cluster.start()
        retry.release()
        answer = call.result()
        assert answer.status_code == 200, answer.text
        operation_id = answer.json()["operation_id"]
        assert answer.json()["status"] == "needs_recovery", answer.text
        view = operation_view(daemon, operation_id)
        assert (view["status"], view["code"]) == ("needs_recovery", "database_unavailable")
        assert [a["status"] for a in view["attempts"]] == ["needs_recovery"]
        assert tree_bytes(repo) == _as_files(expected)
        with daemon.operator() as op:
            done = op.post(f"/v1/operations/{operation_id}/recover", json={"fence": 7})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed", done.text
        view = _completed(daemon, operation_id)
    assert [e["kind"] for e in view["events"]].count("outcome") == 1  # one receipt
    assert tree_bytes(repo) == _as_files(GROUPED_NEW)


def test_a_promotion_behind_a_locked_sqlite_file_completes_once_the_lock_is_gone(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite: another connection holds the database file exclusively while the attempt
    records its outcome; the attempt's write ends ``database_busy`` and it retries putting
    the operation back until the lock is gone, then recovers it (``auto_recover``)."""
    with running_daemon(
        tmp_path / "s",
        {"lab": repo},
        database_url=_sqlite(tmp_path),
        auto_recover=True,
        database_busy_timeout=0.2,
    ) as daemon:
        assert daemon.services.db.engine.dialect.name == "sqlite"
        path = daemon.services.db.engine.url.database
        assert path is not None
        bundle, receipt = _promotion(daemon, repo)
        paused, retry = Pause(tmp_path, "after_journal"), Pause(tmp_path, "database_retry")
        _faults(monkeypatch, paused, retry)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        call = Call(lambda: promote(daemon, bundle, receipt))

        def lock() -> None:
            holder.execute("BEGIN EXCLUSIVE")

        def unlock() -> None:
            holder.execute("ROLLBACK")

        try:
            _outage(paused, retry, lock, unlock)
        finally:
            holder.close()
        answer = call.result()
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        view = _completed(daemon, answer.json()["operation_id"])
    assert view["status"] == "completed"
    assert tree_bytes(repo) == _as_files(NEW)


def test_the_daemons_watchdog_recovers_an_attempt_that_gave_up_behind_a_lock(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite, through the daemon's own watchdog thread: the attempt gives up at once
    (``outage_retry_seconds = 0``) while the file is locked; once the lock is gone the
    watchdog marks the operation and ``auto_recover`` completes it. The test follows the
    status by long-polls (each answers on a change), never by sleeping."""
    with running_daemon(
        tmp_path / "s",
        {"lab": repo},
        database_url=_sqlite(tmp_path),
        auto_recover=True,
        database_busy_timeout=0.2,
        outage_retry_seconds=0,
        watchdog_seconds=0.05,
    ) as daemon:
        assert any(t.name == "promoter-watchdog" for t in threading.enumerate())
        path = daemon.services.db.engine.url.database
        assert path is not None
        bundle, receipt = _promotion(daemon, repo)
        paused = Pause(tmp_path, "after_journal")
        _faults(monkeypatch, paused)
        started = promote(daemon, bundle, receipt, wait=False)
        assert started.status_code == 202, started.text
        operation_id = started.json()["operation_id"]
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            paused.reached()
            holder.execute("BEGIN EXCLUSIVE")
            paused.release()
            future = runner(daemon.services).future(operation_id)
            assert future is not None
            with pytest.raises(Exception) as gave_up:
                future.result(60)
            assert getattr(gave_up.value, "code", None) == "database_busy"
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        seen = ["in_progress"]
        with daemon.orchestrator() as orch:
            while seen[-1] != "completed" and len(seen) < 4:
                answer = orch.get(
                    f"/v1/operations/{operation_id}", params={"wait": 60, "status": seen[-1]}
                )
                assert answer.status_code == 200, answer.text
                seen.append(answer.json()["status"])
        assert seen[-1] == "completed", seen
        view = _completed(daemon, operation_id)
    assert view["code"] is None
    assert tree_bytes(repo) == _as_files(NEW)


def _scrape(daemon: Daemon) -> dict[str, float]:
    """``/metrics`` answered (200), as ``{sample: value}`` for promoter's own samples."""
    with daemon.operator() as operator:
        answer = operator.get("/metrics")
    assert answer.status_code == 200, answer.text
    samples: dict[str, float] = {}
    for line in answer.text.splitlines():
        if line.startswith("promoter_") and " " in line:
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _hosts_cli(daemon: Daemon) -> subprocess.CompletedProcess[str]:
    token = daemon.state_dir / "operator.token"
    token.write_text(daemon.operator_token)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    argv = [sys.executable, "-m", "promoter.cli.main", "hosts", "list", "--url", daemon.url]
    return subprocess.run(
        [*argv, "--token-file", str(token)], capture_output=True, text=True, env=env, timeout=120
    )


@needs_postgres
def test_the_operator_sees_through_an_outage(
    tmp_path: Path,
    repo: Path,
    cluster: OwnPostgres,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database stopped: ``/metrics`` still answers, from memory (the database down,
    the outage's seconds growing, the host not fenced, its epoch); ``GET /v1/hosts`` and
    ``promoter hosts list`` show this host's own view, labelled, with its address; each
    failed heartbeat is one line, no traceback. The database back: up again, the outage's
    seconds stop growing, the ledger's list comes back."""
    with running_daemon(
        tmp_path / "s", {"lab": repo}, database_url=database_url, owner_lease_seconds=1.0
    ) as daemon:
        host = daemon.services.owner.host
        seen = _scrape(daemon)
        assert (seen["promoter_database_up"], seen["promoter_host_fenced"]) == (1.0, 0.0)
        assert seen["promoter_host_epoch"] == 1.0
        assert seen["promoter_database_outage_seconds_total"] == 0.0
        with daemon.operator() as operator:
            listed = operator.get("/v1/hosts").json()
        assert (listed["source"], listed["database_up"]) == ("ledger", True)
        ((entry),) = listed["hosts"]
        assert (entry["host_id"], entry["address"], entry["this_host"]) == (
            host,
            daemon.url,
            True,
        )

        cluster.stop()
        down = _scrape(daemon)
        assert (down["promoter_database_up"], down["promoter_host_fenced"]) == (0.0, 0.0)
        assert down["promoter_host_epoch"] == 1.0
        later = _scrape(daemon)
        assert (
            later["promoter_database_outage_seconds_total"]
            > (down["promoter_database_outage_seconds_total"])
        )
        with daemon.operator() as operator:
            answer = operator.get("/v1/hosts")
        assert answer.status_code == 200, answer.text
        alone = answer.json()
        assert (alone["source"], alone["database_up"]) == ("this_host", False)
        assert f"this is {host}'s own view, not the ledger's" in alone["detail"]
        ((mine),) = alone["hosts"]
        assert (mine["host_id"], mine["status"], mine["epoch"]) == (host, "active", 1)
        assert (mine["address"], mine["lease_expired"]) == (daemon.url, None)
        shown = _hosts_cli(daemon)
        assert shown.returncode == 0, shown.stderr
        assert "only this host's own view" in shown.stderr
        assert host in shown.stdout and "unknown" in shown.stdout
        deadline = time.monotonic() + 60
        while not [r for r in caplog.records if "heartbeat failed" in r.getMessage()]:
            assert time.monotonic() < deadline, "the heartbeat never ran into the outage"
            time.sleep(0.05)
        beats = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in beats)
        assert "database_unavailable" in beats[0].getMessage()

        cluster.start()
        back = _scrape(daemon)
        assert back["promoter_database_up"] == 1.0
        again = _scrape(daemon)
        assert (
            again["promoter_database_outage_seconds_total"]
            == (back["promoter_database_outage_seconds_total"])
        )
        assert back["promoter_database_outage_seconds_total"] > 0.0
        with daemon.operator() as operator:
            assert operator.get("/v1/hosts").json()["source"] == "ledger"
