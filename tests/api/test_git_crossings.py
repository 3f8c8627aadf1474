"""How many git processes one promotion attempt starts.

Counts, with the runner's own counter (``promoter.git.runner.counting``), every git
process the attempt's thread starts from the moment the attempt begins until it has
ended, through the real server. The read-back under the lock needs three facts, whatever
the bundle's size and the repository's: HEAD with its commit and tree (read from its
files, no process: git told the commit's tree when the grant was registered), the tree
entries of the targets and their leading directories (already known from the bundle's
verification: no process; one ``ls-tree`` otherwise), and their index entries (one
process). The count is pinned here so that a change that adds a git process says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from promoter.config import RepositoryConfig
from promoter.engine.operation import promote, views
from promoter.engine.snapshots import capture as snapshots
from promoter.fs import inotify
from promoter.git import runner
from tests.gitutil import git
from tests.support.daemon import Daemon, running_daemon
from tests.support.promotion import promote as request_promotion
from tests.support.promotion import submit

V1, V2 = b"print('v1')\n", b"print('v2')\n"
# the tree entries were read (and remembered) when the bundle was verified
READ_BACK = ["ls-files"]


@contextmanager
def counting_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The git subcommands of each promotion attempt started inside the block."""
    attempts: list[list[str]] = []
    real_run = promote.run

    def run(*args: Any, **kwargs: Any) -> None:
        with runner.counting() as record:
            attempts.append(record)
            real_run(*args, **kwargs)

    monkeypatch.setattr(promote, "run", run)
    yield attempts


def test_a_promotion_attempt_starts_one_git_process(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bundle, receipt = submit(
        daemon,
        repo,
        identity,
        [("src/app.py", V1, V2), ("src/new/deeper/made.txt", None, b"new\n")],
    )
    before = runner.spawned()
    with counting_attempts(monkeypatch) as attempts:
        view = request_promotion(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    assert attempts == [READ_BACK]
    assert runner.spawned() - before >= len(READ_BACK)


def test_the_count_does_not_grow_with_the_bundle(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes: list[Any] = [("src/app.py", V1, V2)]
    changes += [(f"gen/d{i % 7}/f{i:03d}.txt", None, b"%d\n" % i) for i in range(120)]
    _, bundle, receipt = submit(daemon, repo, identity, changes)
    with counting_attempts(monkeypatch) as attempts:
        view = request_promotion(daemon, bundle, receipt).json()
    assert view["status"] == "completed", view
    assert attempts == [READ_BACK]


def test_a_drifted_promotion_is_refused_after_the_same_one(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
    (repo / "src" / "app.py").write_bytes(b"someone else's\n")
    with counting_attempts(monkeypatch) as attempts:
        view = request_promotion(daemon, bundle, receipt).json()
    assert view["status"] == "refused", view
    assert attempts == [READ_BACK]


def test_with_snapshots_the_post_snapshot_updates_only_the_targets(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = RepositoryConfig(path=repo, snapshots=True, snapshot_watch=False)
    with running_daemon(tmp_path / "snap-state", {"work": config}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        _, bundle, receipt = submit(daemon, repo, identity, [("src/app.py", V1, V2)])
        with counting_attempts(monkeypatch) as attempts:
            view = request_promotion(daemon, bundle, receipt).json()
        assert view["status"] == "completed", view
        done = views.operation_view(daemon.services.db, view["operation_id"]).wire()
        # the limited post capture is the tree a full capture of the worktree gives now
        full = snapshots.capture(daemon.services, "work", "check")["tree"]
        assert done["post_snapshot"] == full != done["pre_snapshot"]
    (attempt,) = attempts
    assert attempt[: len(READ_BACK)] == READ_BACK
    captures = attempt[len(READ_BACK) :]
    # The pre snapshot is a full capture (the shadow's index starts empty, so every file
    # is added); the post snapshot brings only the target up to date and writes the tree.
    pre = ["add", "ls-files", "ls-files", "update-index", "write-tree", "update-ref"]
    post = ["update-index", "ls-files", "write-tree", "update-ref"]
    assert captures == pre + post, " ".join(captures)


@pytest.mark.skipif(not inotify.available(), reason="inotify is not available here")
def test_watched_snapshots_read_only_what_changed(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pre snapshot is a full capture; after it, git looks only at changed paths.

    The post snapshot lists and hashes the paths the watch saw change (the target and
    promoter's temp file) into a private index and edits the pre tree; the next
    promotion's pre snapshot, with nothing changed since, starts no capture command at
    all (only the ref that keeps the tree).
    """
    config = RepositoryConfig(path=repo, snapshots=True)
    with running_daemon(tmp_path / "snap-state", {"work": config}) as daemon:
        identity = daemon.services.registry.by_name("work").identity
        trees = []
        with counting_attempts(monkeypatch) as attempts:
            for round_no, (old, new) in enumerate([(V1, V2), (V2, V1)]):
                if round_no:
                    git(repo, "commit", "-qam", "next base")
                changes = [("src/app.py", old, new)]
                grant_id, workflow_id = f"grt_r{round_no}", f"wf_r{round_no}"
                _, bundle, receipt = submit(
                    daemon, repo, identity, changes, grant_id=grant_id, workflow_id=workflow_id
                )
                view = request_promotion(daemon, bundle, receipt).json()
                assert view["status"] == "completed", view
                done = views.operation_view(daemon.services.db, view["operation_id"]).wire()
                full = snapshots.capture(daemon.services, "work", "check")["tree"]
                assert done["post_snapshot"] == full != done["pre_snapshot"]
                trees.append((done["pre_snapshot"], done["post_snapshot"]))
    assert trees[1][0] == trees[0][1]  # the commit between them changed no file
    first, second = attempts
    # the watch starts with the ignored directories (none here, so no check-ignore)
    watch_start = ["ls-files"]
    full_pre = ["add", "ls-files", "ls-files", "update-index", "write-tree", "update-ref"]
    watched_post = ["ls-files", "update-index", "ls-files", "cat-file", "update-ref"]
    assert first[len(READ_BACK) :] == watch_start + full_pre + watched_post, " ".join(first)
    assert second[len(READ_BACK) :] == ["update-ref", *watched_post], " ".join(second)


def test_a_path_promoted_again_under_the_same_index_is_not_asked_again(
    daemon: Daemon, repo: Path, identity: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index entries of a path are remembered while the index file is the same.

    The user puts the file back between the promotions (the index is not written); the
    second attempt answers the index look-up from memory. After ``git add`` the index
    is another file, and the look-up asks git again and sees the staged entry.
    """
    views = []
    with counting_attempts(monkeypatch) as attempts:
        for round_no in range(3):
            if round_no == 2:
                (repo / "src" / "app.py").write_bytes(V2)
                git(repo, "add", "src/app.py")
            (repo / "src" / "app.py").write_bytes(V1)
            changes = [("src/app.py", V1, V2)]
            grant_id, workflow_id = f"grt_again{round_no}", f"wf_again{round_no}"
            _, bundle, receipt = submit(
                daemon, repo, identity, changes, grant_id=grant_id, workflow_id=workflow_id
            )
            views.append(request_promotion(daemon, bundle, receipt).json())
    assert [view["status"] for view in views] == ["completed", "completed", "refused"]
    assert views[2]["code"] == "target_drift", views[2]  # the staged entry differs
    assert [attempt[:2] for attempt in attempts] == [READ_BACK, [], READ_BACK]
