"""A rollback is one pass: targets classified, writes journaled before the first, temps
staged in groups, every directory synced once, outcomes journaled once
(``promoter.engine.operation.rollback``).

Through the real server: the flushes of a rollback do not grow with its targets beyond
one fsync per written temp where no group sync is offered (the durable commits are the
same for 2 targets and for 6, the directories synced once each); the targets about to be
written back are journaled as such before the first is written (so a resumed rollback
says ``restored`` for what the stopped one wrote); a target someone else put back to its
old bytes is still ``already_old`` when the rollback is resumed; a failed directory sync
stops the rollback before any receipt, and the resumed one syncs those directories
itself; a temp that fails in its group is written again on its own, and says why when
that fails too."""

from __future__ import annotations

import errno
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from promoter.domain.status import StepStatus
from promoter.engine.operation.rollback import rollback_id
from promoter.fs import flush
from promoter.store import step_rows
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.promotion import completed, operation_view, tree_bytes

FILES = {f"src/f{i}.txt": f"old {i}\n".encode() for i in range(6)}
FILES["docs/guide.md"] = b"# guide\n"


def _changes(paths: list[str]) -> list[tuple[str, bytes | None, bytes | None]]:
    return [(p, FILES[p], FILES[p].replace(b"old", b"new") + b"!") for p in paths]


pytestmark = pytest.mark.repo("lab", FILES)


def _promoted(daemon: Daemon, repo: Path, changes: list[Any], **grant: Any) -> str:
    return completed(daemon, repo, changes, name="lab", **grant)


def _rollback(daemon: Daemon, op_id: str) -> httpx.Response:
    with daemon.operator() as op:
        return op.post(f"/v1/operations/{op_id}/rollback")


def _faulted(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(faults.ENV, spec)
    faults.reset()


def _journaled(daemon: Daemon, operation_id: str) -> list[tuple[str, StepStatus, str | None]]:
    with daemon.services.db.session() as session:
        return [(s.path, s.status, s.detail) for s in step_rows.steps(session, operation_id)]


def test_a_rollback_pays_its_durable_commits_once_whatever_its_size(
    tmp_path: Path,
) -> None:
    """Two rollbacks in the same two directories, of 2 and of 6 modified files: the same
    durable commits, and 4 fsyncs more for the 4 more temps (each temp fsynced before it
    is named; each directory once, not once a target)."""
    counted: list[Counter[str]] = []
    sqlite = True
    for size in (2, 6):
        repo = init_repo(tmp_path / f"lab{size}", FILES)
        paths = ["docs/guide.md", *[f"src/f{i}.txt" for i in range(size - 1)]]
        with running_daemon(tmp_path / f"state{size}", {"lab": repo}, group_sync=False) as daemon:
            # one ledger for both daemons on PostgreSQL: a grant and workflow of its own each
            grant = {"grant_id": f"grt_size{size}", "workflow_id": f"wf_size{size}"}
            op_id = _promoted(daemon, repo, _changes(paths), **grant)
            before = flush.flushes()
            answer = _rollback(daemon, op_id)
            counted.append(flush.flushes() - before)
            sqlite = daemon.services.db.engine.dialect.name == "sqlite"
        assert answer.status_code == 200, answer.text
        assert [t["reason"] for t in json.loads(answer.content)["targets"]] == ["restored"] * size
        assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES
    small, large = counted
    # 2 temps, docs/ and src/, the receipt's temp, its new folder and that folder's
    # parent; the rollback made, its steps, the writes' intent, the outcomes, the
    # receipt's row, the final statuses (PostgreSQL's commits are the server's: none)
    assert small == Counter(fsync=7, sqlite_commit=6 if sqlite else 0), small
    assert (large - small, small - large) == (Counter(fsync=4), Counter()), (small, large)


def test_every_target_to_write_back_is_journaled_before_the_first_is_written(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = ["src/f0.txt", "src/f1.txt", "src/f2.txt"]
    op_id = _promoted(daemon, repo, _changes(paths))
    child = rollback_id(op_id)
    pause = Pause(tmp_path, "rollback_after_step")
    _faulted(monkeypatch, pause.spec)
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(_rollback(daemon, op_id)))
    worker.start()
    try:
        pause.reached()  # the first target (the last promoted) written back, no other
        monkeypatch.delenv(faults.ENV)
        assert (repo / "src" / "f2.txt").read_bytes() == FILES["src/f2.txt"]
        assert (repo / "src" / "f0.txt").read_bytes() != FILES["src/f0.txt"]
        journaled = _journaled(daemon, child)
    finally:
        pause.release()
        worker.join(60)
    assert journaled == [(p, StepStatus.PENDING, "write_old") for p in reversed(paths)]
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert _journaled(daemon, child) == [
        (p, StepStatus.COMPLETED, "restored") for p in reversed(paths)
    ]


def test_a_target_found_old_stays_already_old_when_the_rollback_is_resumed(
    daemon: Daemon, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone put one target back by hand; the rollback stops before its receipt. Resumed,
    it must not claim it restored what it found already old."""
    op_id = _promoted(daemon, repo, _changes(["src/f0.txt", "src/f1.txt"]))
    (repo / "src" / "f1.txt").write_bytes(FILES["src/f1.txt"])
    _faulted(monkeypatch, "rollback_before_receipt=EIO@1")
    stopped = _rollback(daemon, op_id)
    monkeypatch.delenv(faults.ENV)
    assert stopped.status_code == 503, stopped.text
    assert operation_view(daemon, rollback_id(op_id))["status"] == "needs_recovery"
    resumed = _rollback(daemon, op_id)
    assert resumed.status_code == 200, resumed.text
    document = json.loads(resumed.content)
    assert [(t["path"], t["reason"]) for t in document["targets"]] == [
        ("src/f1.txt", "already_old"),
        ("src/f0.txt", "restored"),
    ]
    assert document["status"] == "rolled_back"
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES


def test_a_failed_directory_sync_stops_the_rollback_and_the_resumed_one_syncs_again(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The targets were written back but their names may not be durable: no receipt says
    ``restored`` yet. Asked again, the rollback finds them old, syncs their directories
    itself (one fsync each, the receipt's own besides), then says ``restored``."""
    with running_daemon(tmp_path / "state", {"lab": repo}, group_sync=False) as daemon:
        op_id = _promoted(daemon, repo, _changes(["src/f0.txt", "docs/guide.md"]))
        _faulted(monkeypatch, "after_parent_fsync=EIO@1")
        stopped = _rollback(daemon, op_id)
        monkeypatch.delenv(faults.ENV)
        assert (stopped.status_code, stopped.json()["code"]) == (503, "write_failed")
        assert operation_view(daemon, rollback_id(op_id))["status"] == "needs_recovery"
        assert not (daemon.state_dir / "audit" / "receipts" / "rollback").exists()
        before = flush.flushes()
        resumed = _rollback(daemon, op_id)
        counted = flush.flushes() - before
    assert resumed.status_code == 200, resumed.text
    document = json.loads(resumed.content)
    assert [t["reason"] for t in document["targets"]] == ["restored", "restored"]
    # docs/ and src/; the receipt's temp and folder, and receipts/ for its new folder
    assert counted["fsync"] == 2 + 3, counted
    assert {p: b for p, (b, _) in tree_bytes(repo).items()} == FILES


@pytest.mark.parametrize(
    ("spec", "reasons"),
    [
        ("after_temp_write=EIO@2+", ["restored", "io_error", "io_error"]),
        ("after_temp_write=EIO@2", ["restored", "restored", "restored"]),
    ],
    ids=["fails-again-alone", "succeeds-alone"],
)
def test_a_temp_that_fails_in_its_group_is_written_again_on_its_own(
    daemon: Daemon,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
    reasons: list[str],
) -> None:
    """The three temps are staged as one group; the second one's naming fails, which drops
    it and the third. Each is then written on its own: where that fails too, the target
    says so with its errno; where it succeeds, the target is restored. Never a target
    reported for another's failure, never a temp of promoter's left behind."""
    paths = ["src/f0.txt", "src/f1.txt", "src/f2.txt"]
    op_id = _promoted(daemon, repo, _changes(paths))
    _faulted(monkeypatch, spec)
    answer = _rollback(daemon, op_id)
    monkeypatch.delenv(faults.ENV)
    assert answer.status_code == 200, answer.text
    document = json.loads(answer.content)
    assert [t["path"] for t in document["targets"]] == list(reversed(paths))
    assert [t["reason"] for t in document["targets"]] == reasons
    for target in document["targets"]:
        if target["reason"] == "io_error":
            assert target["error"]["errno"] == errno.EIO
            assert (repo / target["path"]).read_bytes() == _changes([target["path"]])[0][2]
        else:
            assert (repo / target["path"]).read_bytes() == FILES[target["path"]]
    assert sorted(p.name for p in (repo / "src").iterdir()) == [f"f{i}.txt" for i in range(6)]
