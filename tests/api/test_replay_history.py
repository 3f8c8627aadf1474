"""Replay a generated history, commit by commit, through executor and host.

A seeded random history of 55 commits (creates in nested new directories, modifies,
deletes, renames as delete + create, exec bits set and cleared, binary, CRLF and empty
files) is replayed into a second repository that starts at commit 0. For each commit
the executor's clone checks out that commit's tree, builds and submits a bundle, and
the host promotes it into the source worktree; then the test, acting as the user,
commits the result so that the next grant's base advances. At every step the source
worktree's tree must equal the commit's tree.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

from promoter.domain.models import GrantV1
from promoter.executor import build_bundle, upload_and_submit
from tests.api.test_executor_end_to_end import tree_of
from tests.gitutil import commit_all, git
from tests.support.daemon import running_daemon
from tests.support.flows import make_grant
from tests.support.promotion import leased_clients
from tests.support.repos import clone

SEED = 20261130
COMMITS = 55
DIRS = ["", "src", "src/pkg", "src/pkg/deep/er", "docs/ünï", "bin", "data/x/y/z", "a b/c"]
EXTENSIONS = [".txt", ".py", ".bin", ".md"]

Files = dict[str, tuple[bytes, bool]]  # path -> (content, executable)


class History:
    """A seeded random history, written into a real repository commit by commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rng = random.Random(SEED)
        self.files: Files = {}
        self.counter = 0
        self.kinds: Counter[str] = Counter()

    def _content(self) -> bytes:
        kind = self.rng.choice(["text", "text", "crlf", "binary", "empty"])
        self.kinds[kind] += 1
        if kind == "empty":
            return b""
        if kind == "binary":
            return self.rng.randbytes(self.rng.randint(1, 6000))
        lines = [f"line {self.rng.random()!r}" for _ in range(self.rng.randint(1, 40))]
        end = "\r\n" if kind == "crlf" else "\n"
        return end.join(lines).encode() + end.encode()

    def _new_path(self) -> str:
        self.counter += 1
        directory = self.rng.choice(DIRS)
        name = f"f{self.counter}{self.rng.choice(EXTENSIONS)}"
        return f"{directory}/{name}" if directory else name

    def _write(self, path: str, data: bytes, executable: bool) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, 0o755 if executable else 0o644)
        self.files[path] = (data, executable)

    def _remove(self, path: str) -> None:
        (self.root / path).unlink()
        del self.files[path]

    def initial(self) -> Files:
        self._write(".gitignore", b"*.tmp\n", False)
        for _ in range(6):
            self._write(self._new_path(), self._content(), self.rng.random() < 0.2)
        return dict(self.files)

    def step(self) -> None:
        touched: set[str] = {".gitignore"}
        for _ in range(self.rng.randint(1, 5)):
            existing = sorted(set(self.files) - touched)
            op = self.rng.choice(["create", "modify", "delete", "rename", "chmod"])
            if op != "create" and len(existing) < 4:
                op = "create"
            self.kinds[op] += 1
            if op == "create":
                path = self._new_path()
                self._write(path, self._content(), self.rng.random() < 0.2)
            else:
                path = self.rng.choice(existing)
                data, executable = self.files[path]
                if op == "modify":
                    new = self._content()
                    self._write(path, new if new != data else data + b"!", executable)
                elif op == "chmod":
                    self._write(path, data, not executable)
                else:
                    self._remove(path)
                    if op == "rename":
                        path = self._new_path()
                        self._write(path, data, executable)
            touched.add(path)


@pytest.mark.slow
def test_generated_history_replays_commit_by_commit(tmp_path: Path) -> None:
    history_repo = tmp_path / "history"
    history_repo.mkdir()
    git(history_repo, "init", "-q", "-b", "main")
    history = History(history_repo)
    initial = history.initial()
    commits = [commit_all(history_repo, "commit 0")]
    for number in range(1, COMMITS + 1):
        history.step()
        commits.append(commit_all(history_repo, f"commit {number}"))
    trees = [git(history_repo, "rev-parse", f"{commit}^{{tree}}") for commit in commits]
    assert len(set(trees)) == len(trees)
    assert {"create", "modify", "delete", "rename", "chmod"} <= set(history.kinds)
    assert {"binary", "crlf", "empty"} <= set(history.kinds)

    source = tmp_path / "source"  # the user's repository, born from commit 0's files only
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    for path, (data, executable) in initial.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
        os.chmod(source / path, 0o755 if executable else 0o644)
    commit_all(source, "the user's first commit")
    assert git(source, "rev-parse", "HEAD^{tree}") == trees[0]

    executor = clone(history_repo, tmp_path / "executor")
    (executor / "scratch.tmp").write_bytes(b"the executor's ignored scratch file\n")
    scratch = tmp_path / "scratch"
    promoted_changes = 0

    with running_daemon(tmp_path / "state", {"source": source}) as daemon:
        identity = daemon.services.registry.by_name("source").identity
        orchestrator, client = leased_clients(daemon, "run_replay", fence=1)
        for number in range(1, COMMITS + 1):
            git(executor, "checkout", "-q", "--detach", commits[number])
            grant = make_grant(
                source, identity, grant_id=f"grt_replay_{number}", run_id="run_replay", fence=1
            )
            orchestrator.register_grant(grant)
            with build_bundle(executor, GrantV1.model_validate(grant)) as built:
                receipt = upload_and_submit(client, built)
            assert receipt.status == "passed", receipt
            assert "scratch.tmp" not in [c["path"] for c in built.bundle["changes"]]
            view = orchestrator.promote(built.bundle_id, receipt.receipt_sha256, 1, wait=True)
            assert view["status"] == "completed", (number, view)
            promoted_changes += built.bundle["change_count"]

            assert tree_of(source, scratch) == trees[number], f"commit {number}"
            commit_all(source, f"the user commits replay {number}")
            assert git(source, "rev-parse", "HEAD^{tree}") == trees[number]
        orchestrator.close()
        client.close()

    assert promoted_changes >= COMMITS
    assert not (source / "scratch.tmp").exists()
