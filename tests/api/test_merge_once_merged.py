"""A merge asked again once the promotion it made is being written or has completed
(protocol: runs#how-a-merge-is-made).

A promotion refused ``target_drift`` is merged into a new bundle whose promotion (OP2) is
held; approved, OP2 writes the merged bytes. Asked again after that, the merge read the
worktree, which now holds OP2's result, and made a second bundle, the original's other
changes carried over against old states the worktree no longer held, held for approval
again; approved, it completed writing nothing, a second receipt for nothing. Now the merge
is refused at once (``operation_conflict``) naming OP2 and its status, before the
worktree is read: nothing made, nothing stored, no event; so is the merge of any other
operation of the same original bundle (a merge refused on drift, merged in turn). A held
OP2 stays idempotent; a refused or rejected OP2 leaves the merge open. Races with OP2's
attempt are played with pauses: the merge's bundle then never writes over OP2's result.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter import faults
from tests.api.test_merge_drifted import AGENT, BASE, EXTRA, MERGED, PERSON, _drifted, _merge
from tests.support.cli import cli
from tests.support.daemon import Daemon
from tests.support.flows import sha
from tests.support.pause import Pause
from tests.support.promotion import git_dir_digest, operation_view, tree_bytes, unchanged

pytestmark = pytest.mark.repo(files={"README.md": b"# project\n", "src/app.py": BASE})


@pytest.fixture(autouse=True)
def _fresh_fault_counts() -> Iterator[None]:
    """Fault points count their hits per process: none left over for the next test."""
    faults.reset()
    yield
    faults.reset()


@contextmanager
def _paused_at(
    point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]
) -> Iterator[list[Any]]:
    """``call`` in a thread of its own, paused at the fault point ``point``: yields, once it
    is there (the point no longer set for what the body asks), the list its answer lands
    in; released and joined on the way out."""
    pause = Pause(tmp_path, point)
    monkeypatch.setenv(faults.ENV, pause.spec)
    answers: list[Any] = []
    worker = threading.Thread(target=lambda: answers.append(call()))
    worker.start()
    try:
        pause.reached()
        monkeypatch.delenv(faults.ENV)
        yield answers
    finally:
        pause.release()
        worker.join(120)


def _decide(daemon: Daemon, operation_id: str, decision: str) -> dict[str, Any]:
    with daemon.operator() as op:
        answer = op.post(f"/v1/operations/{operation_id}/{decision}", json={"wait": True})
    return dict(answer.json())


def _merged_and_completed(daemon: Daemon, repo: Path) -> tuple[str, str]:
    """The drifted operation and OP2, its merged promotion, approved and completed."""
    operation_id = _drifted(daemon, repo, PERSON)
    merged = _merge(daemon, operation_id)
    assert merged.status_code == 201, merged.text
    held = str(merged.json()["promotion"]["operation_id"])
    approved = _decide(daemon, held, "approve")
    assert (approved["status"], approved["code"]) == ("completed", None), approved
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    return operation_id, held


def _everything(daemon: Daemon, repo: Path, *operation_ids: str) -> tuple[Any, ...]:
    """What a refused merge must leave as it was: the worktree, ``.git``, the stored
    documents and blobs, the merged operations' events, and every operation."""
    with daemon.operator() as op:
        operations = op.get("/v1/operations").json()["operations"]
    return (
        tree_bytes(repo),
        git_dir_digest(repo),
        tree_bytes(daemon.state_dir / "audit"),
        [unchanged(operation_view(daemon, op_id)) for op_id in operation_ids],
        sorted((o["operation_id"], o["status"]) for o in operations),
    )


def _inodes(repo: Path) -> list[tuple[int, int]]:
    """Each target's inode and change time: a file put in place again, even with the
    same bytes, changes them."""
    found = [os.lstat(repo / "src" / name) for name in ("app.py", "extra.py")]
    return [(s.st_ino, s.st_ctime_ns) for s in found]


def _refused(answer: httpx.Response, operation_id: str, merged: str, status: str) -> str:
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["code"] == "operation_conflict"
    assert (problem["operation_id"], problem["merged_operation_id"], problem["merged_status"]) == (
        operation_id,
        merged,
        status,
    )
    return str(problem["detail"])


def test_merge_asked_again_after_its_merged_promotion_completed_is_refused_and_makes_nothing(
    daemon: Daemon, repo: Path
) -> None:
    operation_id, held = _merged_and_completed(daemon, repo)
    before = _everything(daemon, repo, operation_id)
    answer = _merge(daemon, operation_id)
    detail = _refused(answer, operation_id, held, "completed")
    assert detail == (
        f"operation {operation_id} was merged into {held}, which completed: its changes "
        f"are in the worktree; nothing is left to merge (promoter ops show {held})"
    )
    assert _everything(daemon, repo, operation_id) == before
    merged_into = operation_view(daemon, operation_id)["merged_into"]
    assert [(m["operation_id"], m["status"]) for m in merged_into] == [(held, "completed")]


def test_promoter_merge_typed_again_after_the_merge_completed_prints_why_and_exits_75(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    operation_id, held = _merged_and_completed(daemon, repo)
    before = _everything(daemon, repo, operation_id)
    token = tmp_path / "operator.token"
    token.write_text(daemon.operator_token)
    typed = cli("merge", operation_id, "--url", daemon.url, "--token-file", str(token), cwd=repo)
    assert (typed.returncode, typed.stdout) == (75, ""), typed.stderr
    assert typed.stderr == (
        f"error [operation_conflict] operation {operation_id} was merged into {held}, which "
        f"completed: its changes are in the worktree; nothing is left to merge (promoter ops "
        f"show {held})\n"
    )
    assert _everything(daemon, repo, operation_id) == before


def test_merge_asked_while_its_merged_promotion_is_being_written_is_refused(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    approving = _paused_at(
        "before_replace", tmp_path, monkeypatch, lambda: _decide(daemon, held, "approve")
    )
    with approving as answers:  # OP2's attempt holds the lock, its first target not yet placed
        before = _everything(daemon, repo, operation_id)
        detail = _refused(_merge(daemon, operation_id), operation_id, held, "in_progress")
        assert detail == (
            f"operation {operation_id} was merged into {held}, which is in_progress: its "
            f"changes are being written; nothing is left to merge (promoter ops show {held})"
        )
        assert _everything(daemon, repo, operation_id) == before
    [approved] = answers
    assert approved["status"] == "completed", approved
    assert (repo / "src" / "app.py").read_bytes() == MERGED


def test_a_rejected_merged_promotion_leaves_the_merge_open(daemon: Daemon, repo: Path) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    rejected = _decide(daemon, held, "reject")
    assert (rejected["status"], rejected["code"]) == ("refused", "approval_rejected")
    newer = PERSON + b"saved after the rejection\n"
    (repo / "src" / "app.py").write_bytes(newer)
    again = _merge(daemon, operation_id)
    assert again.status_code == 201, again.text
    assert again.json()["paths"][0]["current"]["sha256"] == sha(newer)
    second = again.json()["promotion"]
    assert second["status"] == "awaiting_approval" and second["operation_id"] != held
    approved = _decide(daemon, second["operation_id"], "approve")
    assert approved["status"] == "completed", approved
    assert (repo / "src" / "app.py").read_bytes() == MERGED + b"saved after the rejection\n"


def test_a_merged_promotion_refused_for_drift_leaves_the_merge_open(
    daemon: Daemon, repo: Path
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    newer = PERSON + b"saved before the approval\n"
    (repo / "src" / "app.py").write_bytes(newer)
    refused = _decide(daemon, held, "approve")
    assert (refused["status"], refused["code"]) == ("refused", "target_drift")
    again = _merge(daemon, operation_id)  # the original, not OP2: the same fresh start
    assert again.status_code == 201, again.text
    second = again.json()["promotion"]
    assert second["status"] == "awaiting_approval" and second["operation_id"] != held
    merged_into = operation_view(daemon, operation_id)["merged_into"]
    assert [(m["operation_id"], m["status"]) for m in merged_into] == [
        (held, "refused"),
        (second["operation_id"], "awaiting_approval"),
    ]


def test_merge_of_the_original_once_the_merge_of_its_merge_completed_is_refused(
    daemon: Daemon, repo: Path
) -> None:
    """OP2 refused on drift is merged in turn (from the original bundle again) into OP3,
    which completes: OP's own ``merged_into`` names only OP2, yet OP is refused too."""
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    (repo / "src" / "app.py").write_bytes(PERSON + b"saved before the approval\n")
    refused = _decide(daemon, held, "approve")
    assert (refused["status"], refused["code"]) == ("refused", "target_drift")
    later = _merge(daemon, held).json()["promotion"]["operation_id"]
    approved = _decide(daemon, later, "approve")
    assert approved["status"] == "completed", approved
    before = _everything(daemon, repo, operation_id, held)
    detail = _refused(_merge(daemon, operation_id), operation_id, later, "completed")
    assert detail == (
        f"operation {operation_id}'s original bundle was merged again into {later}, which "
        f"completed: its changes are in the worktree; nothing is left to merge (promoter "
        f"ops show {later})"
    )
    detail = _refused(_merge(daemon, held), held, later, "completed")
    assert detail.startswith(f"operation {held} was merged into {later}, which completed: ")
    assert _everything(daemon, repo, operation_id, held) == before


def test_merge_of_a_stale_merge_once_a_later_merge_completed_is_refused(
    daemon: Daemon, repo: Path
) -> None:
    """OP merged twice (the file moved in between): OP2 held, then OP3; OP2 refused on
    drift, OP3 completed. Merging OP2 starts from the original bundle: refused, naming OP3."""
    operation_id = _drifted(daemon, repo, PERSON)
    first = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    (repo / "src" / "app.py").write_bytes(PERSON + b"saved after the first merge\n")
    second = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    assert second != first
    refused = _decide(daemon, first, "approve")
    assert (refused["status"], refused["code"]) == ("refused", "target_drift")
    approved = _decide(daemon, second, "approve")
    assert approved["status"] == "completed", approved
    before = _everything(daemon, repo, first)
    detail = _refused(_merge(daemon, first), first, second, "completed")
    assert detail.startswith(
        f"operation {first}'s original bundle was merged again into {second}, which completed"
    )
    assert _everything(daemon, repo, first) == before


def test_two_merges_at_once_make_one_bundle_and_one_held_promotion(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operation_id = _drifted(daemon, repo, PERSON)
    paused = _paused_at(
        "merge_inputs_read", tmp_path, monkeypatch, lambda: _merge(daemon, operation_id)
    )
    with paused as first:  # the first merge checked and read the worktree; nothing made yet
        second = _merge(daemon, operation_id)
        assert second.status_code == 201, second.text
    [answer] = first
    assert answer.status_code == 201, answer.text
    assert answer.json() == second.json()
    merged_into = operation_view(daemon, operation_id)["merged_into"]
    held = second.json()["promotion"]["operation_id"]
    assert [(m["operation_id"], m["status"]) for m in merged_into] == [(held, "awaiting_approval")]


def test_merge_that_read_the_worktree_before_its_merged_promotion_completed_writes_nothing(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check passed while OP2 was held; OP2 completes before the merge makes its bundle.
    The merge read the person's bytes, so it makes OP2's own bundle again and answers OP2
    as it stands; nothing new is held and the worktree keeps OP2's result."""
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    paused = _paused_at(
        "merge_inputs_read", tmp_path, monkeypatch, lambda: _merge(daemon, operation_id)
    )
    with paused as late:
        approved = _decide(daemon, held, "approve")
        assert approved["status"] == "completed", approved
    done = (tree_bytes(repo), git_dir_digest(repo))
    [answer] = late
    assert answer.status_code == 201, answer.text
    assert answer.json()["promotion"]["operation_id"] == held
    assert (tree_bytes(repo), git_dir_digest(repo)) == done
    with daemon.operator() as op:
        waiting = op.get("/v1/operations", params={"status": "awaiting_approval"}).json()
    assert waiting["operations"] == []
    assert _refused(_merge(daemon, operation_id), operation_id, held, "completed")


def test_merge_that_checked_before_its_merged_promotion_completed_holds_a_bundle_writing_nothing(
    daemon: Daemon, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check passed while OP2 was held; OP2 completes before the merge reads the
    worktree. The merge then reads OP2's result and makes a second bundle, held: the
    original's other change against its old state. Approved, it writes nothing."""
    operation_id = _drifted(daemon, repo, PERSON)
    held = _merge(daemon, operation_id).json()["promotion"]["operation_id"]
    paused = _paused_at(
        "merge_checked", tmp_path, monkeypatch, lambda: _merge(daemon, operation_id)
    )
    with paused as late:  # the check passed (OP2 held); the worktree not read yet
        approved = _decide(daemon, held, "approve")
        assert approved["status"] == "completed", approved
    [answer] = late
    assert answer.status_code == 201, answer.text
    result = answer.json()
    assert [(p["path"], p["current"]["sha256"]) for p in result["paths"]] == [
        ("src/app.py", sha(MERGED))
    ]
    with daemon.orchestrator() as orch:
        bundle = orch.get(f"/v1/bundles/{result['bundle_id']}").json()
    assert [(c["path"], c["operation"], c["old"]["exists"]) for c in bundle["changes"]] == [
        ("src/extra.py", "create", False)
    ]
    second = result["promotion"]["operation_id"]
    assert result["promotion"]["status"] == "awaiting_approval" and second != held
    done = (tree_bytes(repo), git_dir_digest(repo), _inodes(repo))
    completed = _decide(daemon, second, "approve")
    assert completed["status"] == "completed", completed  # every target already new
    assert (tree_bytes(repo), git_dir_digest(repo), _inodes(repo)) == done
    assert [s["status"] for s in completed["steps"]] == ["completed"]
    assert sha(AGENT) != sha(MERGED)  # src/app.py kept OP2's merge, not the agent's bytes
