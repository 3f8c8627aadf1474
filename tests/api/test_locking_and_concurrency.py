"""Serialization through the repository lock, linked worktrees, concurrent requests (L4)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from promoter.fs.lock import RepoLock
from tests.support.daemon import running_daemon
from tests.support.flows import git, init_repo
from tests.support.promotion import promote, submit

FILES = {"a.txt": b"a1\n", "b.txt": b"b1\n"}


def test_linked_worktree_shares_the_lock_and_waits_for_it(tmp_path: Path) -> None:
    main = init_repo(tmp_path / "main", FILES)
    linked = tmp_path / "linked"
    git(main, "worktree", "add", "-q", "-b", "side", str(linked))
    with running_daemon(tmp_path / "state", {"main": main, "linked": linked}) as daemon:
        main_repo = daemon.services.registry.by_name("main")
        linked_repo = daemon.services.registry.by_name("linked")
        assert main_repo.identity != linked_repo.identity
        assert main_repo.layout.common_dir == linked_repo.layout.common_dir
        _, bundle, receipt = submit(
            daemon,
            linked,
            linked_repo.identity,
            [("a.txt", b"a1\n", b"a2\n")],
            branch="refs/heads/side",
        )
        held = RepoLock(main_repo.layout.common_dir, timeout=5)
        held.acquire()
        try:
            started = promote(daemon, bundle, receipt, wait=False)
            assert started.status_code == 202
            op_id = started.json()["operation_id"]
            with daemon.orchestrator() as orch:
                assert orch.get(f"/v1/operations/{op_id}").json()["status"] == "in_progress"
            assert (linked / "a.txt").read_bytes() == b"a1\n"
        finally:
            held.release()
        finished = promote(daemon, bundle, receipt, wait=True).json()
        assert (finished["operation_id"], finished["status"]) == (op_id, "completed")
        assert (linked / "a.txt").read_bytes() == b"a2\n"
        assert (main / "a.txt").read_bytes() == b"a1\n"


def test_lock_held_past_the_timeout_is_refused_with_nothing_written(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    with running_daemon(tmp_path / "state", {"work": repo}, lock_timeout=0.5) as daemon:
        work = daemon.services.registry.by_name("work")
        _, bundle, receipt = submit(daemon, repo, work.identity, [("a.txt", b"a1\n", b"a2\n")])
        held = RepoLock(work.layout.common_dir, timeout=5)
        held.acquire()
        try:
            view = promote(daemon, bundle, receipt).json()
        finally:
            held.release()
        assert (view["status"], view["code"]) == ("refused", "lock_unavailable")
        assert (repo / "a.txt").read_bytes() == b"a1\n"
        assert promote(daemon, bundle, receipt).json()["status"] == "completed"


def test_concurrent_identical_requests_make_one_operation_and_one_receipt(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        work = daemon.services.registry.by_name("work")
        _, bundle, receipt = submit(daemon, repo, work.identity, [("a.txt", b"a1\n", b"a2\n")])
        answers: list[Any] = []
        gate = threading.Barrier(4)

        def ask() -> None:
            gate.wait()
            answers.append(promote(daemon, bundle, receipt, wait=True).json())

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert {a["operation_id"] for a in answers} == {answers[0]["operation_id"]}
        with daemon.orchestrator() as orch:
            view = orch.get(f"/v1/operations/{answers[0]['operation_id']}").json()
        assert (view["status"], view["attempt"]) == ("completed", 1)
        assert [e["kind"] for e in view["events"]] == ["decision", "action", "outcome"]
        receipts = list((daemon.state_dir / "audit" / "receipts" / "promotion").iterdir())
        assert len(receipts) == 1


def test_two_promotions_on_one_repository_both_complete(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", FILES)
    with running_daemon(tmp_path / "state", {"work": repo}) as daemon:
        work = daemon.services.registry.by_name("work")
        _, first, first_receipt = submit(
            daemon, repo, work.identity, [("a.txt", b"a1\n", b"a2\n")], grant_id="grt_a"
        )
        _, second, second_receipt = submit(
            daemon,
            repo,
            work.identity,
            [("b.txt", b"b1\n", b"b2\n")],
            grant_id="grt_b",
            workflow_id="wf_2",
        )
        results: dict[str, Any] = {}
        threads = [
            threading.Thread(
                target=lambda: results.__setitem__(
                    "a", promote(daemon, first, first_receipt).json()
                )
            ),
            threading.Thread(
                target=lambda: results.__setitem__(
                    "b", promote(daemon, second, second_receipt).json()
                )
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results["a"]["status"] == results["b"]["status"] == "completed"
        assert (repo / "a.txt").read_bytes() == b"a2\n"
        assert (repo / "b.txt").read_bytes() == b"b2\n"
