"""W8 and P7 through the whole engine: bind mounts and hard links refused at the read-back.

A same-filesystem bind mount inside the worktree (of a directory, or of a single file
at a target) and a delete target with a second hard link are refused by the read-back
under the lock (protocol: promotion#step-read-back, promotion#mount-crossings): the attempt ends
``refused`` with ``path_unsafe``, the preflight says the same, only the decision and outcome events
exist, and not a byte changes in the worktree, in ``.git``, or at the other end of the
mount or link. The mounts are real (``mount --bind``, as root); the test skips when
mounting is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.flows import git
from tests.support.mounts import bind_mount, is_mount_point
from tests.support.promotion import git_dir_digest, promote, submit, tree_bytes

V1 = b"print('v1')\n"
V2 = b"print('v2')\n"
GONE = b"to be deleted\n"


def _preflight(daemon: Daemon, bundle: dict[str, Any]) -> dict[str, Any]:
    with daemon.orchestrator() as orch:
        answer = orch.post(f"/v1/bundles/{bundle['bundle_id']}/preflight", json={"fence": 7})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _assert_refused_unsafe(view: dict[str, Any], pre: dict[str, Any], paths: list[str]) -> None:
    assert (view["status"], view["code"]) == ("refused", "path_unsafe")
    assert (pre["status"], pre["code"]) == ("refused", "path_unsafe")
    error = view["report"]["error"]
    assert (error["code"], error["status"]) == ("path_unsafe", 409)
    assert error["paths"] == paths
    assert error["drift_report"]["unsafe"] == paths
    assert pre["error"]["paths"] == paths
    assert [e["kind"] for e in view["events"]] == ["decision", "outcome"]
    assert view["events"][0]["payload"]["allowed"] is False
    assert view["events"][1]["payload"] == {"status": "refused", "code": "path_unsafe"}


@pytest.mark.parametrize("shape", ["directory", "file"])
def test_same_filesystem_bind_mount_inside_worktree_is_refused_through_the_api(
    shape: str, daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_bytes(V1)  # looks exactly like the authorized old state
    changes = [("src/app.py", V1, V2), ("src/added.py", None, b"new\n")]
    grant, bundle, receipt = submit(daemon, repo, identity, changes)
    source, target = (
        (outside, repo / "src")
        if shape == "directory"
        else (
            outside / "app.py",
            repo / "src/app.py",
        )
    )
    unsafe = ["src/added.py", "src/app.py"] if shape == "directory" else ["src/app.py"]
    repo_before, git_before = tree_bytes(repo), git_dir_digest(repo)
    outside_before = tree_bytes(outside)
    with bind_mount(source, target):
        assert target.stat().st_dev == repo.stat().st_dev  # the attack: same filesystem
        mounted_before = tree_bytes(repo)
        pre = _preflight(daemon, bundle)
        answer = promote(daemon, bundle, receipt)
        assert answer.status_code == 200, answer.text
        view = answer.json()
        assert tree_bytes(repo) == mounted_before
        assert tree_bytes(outside) == outside_before
        assert is_mount_point(target)
    _assert_refused_unsafe(view, pre, unsafe)
    assert tree_bytes(outside) == outside_before
    assert sorted(p.name for p in outside.iterdir()) == ["app.py"]
    assert tree_bytes(repo) == repo_before
    assert git_dir_digest(repo) == git_before


def test_hard_linked_delete_target_is_refused_before_writing(
    daemon: Daemon, repo: Path, identity: str, tmp_path: Path
) -> None:
    (repo / "src/gone.txt").write_bytes(GONE)
    git(repo, "add", "src/gone.txt")
    git(repo, "commit", "-q", "-m", "a file to delete")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(repo / "src/gone.txt", outside / "second-link.txt")
    changes = [("src/app.py", V1, V2), ("src/gone.txt", GONE, None)]
    grant, bundle, receipt = submit(daemon, repo, identity, changes)
    inode = (repo / "src/gone.txt").stat().st_ino
    repo_before, git_before = tree_bytes(repo), git_dir_digest(repo)
    pre = _preflight(daemon, bundle)
    view = promote(daemon, bundle, receipt).json()
    _assert_refused_unsafe(view, pre, ["src/gone.txt"])
    path_report = {p["path"]: p for p in view["report"]["error"]["drift_report"]["paths"]}
    assert path_report["src/gone.txt"]["verdict"] == "unsafe"
    assert path_report["src/gone.txt"]["actual"]["links"] == 2
    assert path_report["src/app.py"]["verdict"] == "old"
    assert tree_bytes(repo) == repo_before  # zero writes: src/app.py is still v1
    assert git_dir_digest(repo) == git_before
    for link in (repo / "src/gone.txt", outside / "second-link.txt"):
        assert link.read_bytes() == GONE
        assert (link.stat().st_ino, link.stat().st_nlink) == (inode, 2)
    assert not list(repo.rglob(".promoter-tmp-*"))
