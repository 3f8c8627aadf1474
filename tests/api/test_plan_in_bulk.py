"""A promotion's plan is journaled in bulk, and durable before the first worktree write.

The plan of a promotion of many changes in several directories, some of them new, is
written by one ``INSERT`` into ``steps`` (every step) and one into ``created_dirs`` (every
directory the writes will make), in the plan's transaction; that transaction is
committed when the ``after_journal`` fault point is reached, before anything in the
worktree changed (protocol: promotion#step-journal: a crash after any write finds the plan).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from promoter import faults
from promoter.store import journal, step_rows
from tests.support.daemon import running_daemon
from tests.support.flows import init_repo
from tests.support.pause import Pause
from tests.support.promotion import promote, submit, tree_bytes
from tests.support.statements import statements

FILES = {f"pkg/d{i % 6}/f{i:03d}.txt": f"old {i}\n".encode() for i in range(90)}
CHANGES: list[tuple[str, bytes | None, bytes | None]] = [
    (p, d, d.replace(b"old", b"new")) for p, d in FILES.items()
]
CHANGES += [(f"fresh/n{i % 3}/deep/x{i}.txt", None, b"x %d\n" % i) for i in range(12)]
NEW_DIRS = ["fresh", *(f"fresh/n{k}" for k in range(3)), *(f"fresh/n{k}/deep" for k in range(3))]


def _inserts(seen: list[str], table: str) -> list[str]:
    return [s for s in seen if s.lstrip().upper().startswith(f"INSERT INTO {table.upper()} ")]


def test_the_plan_is_one_insert_per_table_committed_before_the_first_worktree_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = init_repo(tmp_path / "lab", FILES)
    with running_daemon(tmp_path / "state", {"lab": repo}) as daemon:
        identity = daemon.services.registry.by_name("lab").identity
        _, bundle, receipt = submit(daemon, repo, identity, CHANGES)
        before = tree_bytes(repo)
        paused = Pause(tmp_path, "after_journal")
        monkeypatch.setenv(faults.ENV, paused.spec)
        faults.reset()
        answers: list[Any] = []
        with statements(daemon.services.db.engine) as seen:
            worker = threading.Thread(
                target=lambda: answers.append(promote(daemon, bundle, receipt))
            )
            worker.start()
            try:
                paused.reached()
                at_pause = list(seen)
                # committed: another session reads the whole plan; the worktree is as it was
                with daemon.services.db.session() as session:
                    (operation,) = journal.list_operations(session)
                    steps = step_rows.steps(session, operation.operation_id)
                    dirs = step_rows.created_dirs(session, operation.operation_id)
                assert sorted(s.path for s in steps) == sorted(p for p, _, _ in CHANGES)
                assert sorted(dirs) == sorted(NEW_DIRS)
                assert tree_bytes(repo) == before
            finally:
                paused.release()
                worker.join(120)
        assert answers[0].json()["status"] == "completed", answers[0].text
    assert len(_inserts(at_pause, "steps")) == 1
    assert len(_inserts(at_pause, "created_dirs")) == 1
    assert len(_inserts(seen, "steps")) == 1  # and none after it: the plan is not rewritten
    after = {path: new for path, _, new in CHANGES}
    assert {p: v[0] for p, v in tree_bytes(repo).items()} == after
