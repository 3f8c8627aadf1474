"""TESTS.md W2, W4, W5: a real daemon killed inside the windows where a user's bytes sit
under promoter's names, restarted, and recovered.

The daemon runs in its own process (``tests.support.process``) with ``PROMOTER_FAULTS``
pausing it where the test plays the user and killing it (``os._exit``, like SIGKILL)
where the window is widest. A fresh daemon on the same state directory recovers; every
byte the user wrote must still be on disk, named in the report, and the status must
never claim ``completed`` over it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from promoter.engine.operation.rollback import rollback_id
from tests.support.flows import init_repo, sha
from tests.support.pause import Pause
from tests.support.process import DaemonProcess, prepare_promotion
from tests.support.promotion import git_dir_digest, tree_bytes

pytestmark = pytest.mark.slow


def _post_in_thread(
    daemon: DaemonProcess, path: str, body: dict[str, Any] | None
) -> threading.Thread:
    def post() -> None:
        role = "operator" if "rollback" in path else "orchestrator"
        with daemon.client(role) as client, contextlib.suppress(httpx.HTTPError):
            client.post(path, json=body)

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def _only_operation(daemon: DaemonProcess, kind: str = "promotion") -> dict[str, Any]:
    with daemon.client("operator") as client:
        listed = client.get("/v1/operations").json()["operations"]
    [found] = [o for o in listed if o["kind"] == kind]
    return dict(found)


def _recover(
    daemon: DaemonProcess, operation_id: str, fence: int = 7, role: str = "orchestrator"
) -> dict[str, Any]:
    with daemon.client(role) as client:
        answer = client.post(f"/v1/operations/{operation_id}/recover", json={"fence": fence})
        assert answer.status_code == 200, answer.text
        with daemon.client("operator") as operator:
            return dict(operator.get(f"/v1/operations/{operation_id}").json())


def _entries(repo: Path) -> list[str]:
    """Every file and directory below ``repo`` outside ``.git``."""
    return sorted(
        p.relative_to(repo).as_posix()
        for p in repo.rglob("*")
        if ".git" not in p.relative_to(repo).parts
    )


def _kill_promotion(
    tmp_path: Path,
    repo: Path,
    faults: str,
    changes: list[tuple[str, bytes | None, bytes | None]],
    saves: tuple[tuple[Pause, bytes], ...] = (),
) -> None:
    """Promote ``changes`` in a daemon that dies at ``faults``, saving ``f.txt`` at each
    pause on the way (an editor-style save)."""
    first = DaemonProcess(tmp_path / "state", {"work": repo}, faults=faults)
    try:
        request = prepare_promotion(first, repo, changes)
        thread = _post_in_thread(first, "/v1/promotions", request)
        for pause, data in saves:
            pause.reached()
            sibling = repo / ".f.txt.save~"
            sibling.write_bytes(data)
            os.rename(sibling, repo / "f.txt")
            pause.release()
        assert first.wait_exit() == 137
        thread.join(60)
    finally:
        first.kill()


def _restart_and_recover(tmp_path: Path, repo: Path) -> tuple[str, dict[str, Any]]:
    """A fresh daemon on the same state recovers the one promotion: (its id, its view)."""
    second = DaemonProcess(tmp_path / "state", {"work": repo})
    try:
        op_id = str(_only_operation(second)["operation_id"])
        return op_id, _recover(second, op_id)
    finally:
        second.stop()


def test_crash_in_swap_back_keeps_user_version(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"f.txt": b"old\n", "other.txt": b"x\n"})
    save = Pause(tmp_path, "before_replace")
    faults = f"{save.spec},before_swap_back=kill"
    changes = [("f.txt", b"old\n", b"new\n")]
    _kill_promotion(tmp_path, repo, faults, changes, ((save, b"the user's save\n"),))
    op_id, view = _restart_and_recover(tmp_path, repo)
    assert view["status"] == "needs_reconciliation"
    kept_as = f".promoter-kept-{op_id}-1-0"
    assert view["report"]["kept"] == [
        {
            "path": "f.txt",
            "kept_as": kept_as,
            "kind": "file",
            "sha256": sha(b"the user's save\n"),
            "size": 16,
        }
    ]
    assert (repo / kept_as).read_bytes() == b"the user's save\n"
    assert (repo / "f.txt").read_bytes() == b"new\n"
    assert _entries(repo) == sorted([kept_as, "f.txt", "other.txt"])
    assert view["receipt_sha256"] is None


def test_user_file_with_temp_prefix_is_never_swept(tmp_path: Path) -> None:
    files = {
        "src/f.txt": b"old\n",
        "src/.promoter-tmp-notes": b"my notes\n",
        "src/.promoter-tmp-0123456789abcdef01234567": b"looks like an old temp\n",
        "src/.promoter-kept-draft": b"my draft\n",
    }
    repo = init_repo(tmp_path / "work", files)
    _kill_promotion(tmp_path, repo, "after_temp_write=kill", [("src/f.txt", b"old\n", b"new\n")])
    _, view = _restart_and_recover(tmp_path, repo)
    assert view["status"] == "completed"
    now = tree_bytes(repo)
    for name, data in files.items():
        if name != "src/f.txt":
            assert now[name][0] == data, name
    assert now["src/f.txt"][0] == b"new\n"
    assert sorted(now) == sorted(files)


def test_crash_after_mkdir_then_recover_and_rollback_leaves_no_directory(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"a.txt": b"a\n"})
    before_entries, git_before = _entries(repo), git_dir_digest(repo)
    _kill_promotion(tmp_path, repo, "after_mkdir=kill@2", [("new/deep/file.txt", None, b"made\n")])
    assert _entries(repo) == ["a.txt", "new", "new/deep"]  # both made, no file yet
    second = DaemonProcess(tmp_path / "state", {"work": repo})
    try:
        op_id = _only_operation(second)["operation_id"]
        view = _recover(second, op_id)
        assert view["status"] == "completed"
        assert view["created_directories"] == ["new", "new/deep"]
        with second.client("operator") as operator:
            rolled = operator.post(f"/v1/operations/{op_id}/rollback").json()
    finally:
        second.stop()
    assert rolled["status"] == "rolled_back"
    assert rolled["removed_directories"] == ["new/deep", "new"]
    assert _entries(repo) == before_entries
    assert git_dir_digest(repo) == git_before


def test_crash_after_rollback_wrote_a_temp_leaves_no_temp(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"f.txt": b"old\n"})
    state = tmp_path / "state"
    first = DaemonProcess(state, {"work": repo}, faults="after_temp_write=kill@2")
    try:
        request = prepare_promotion(first, repo, [("f.txt", b"old\n", b"new\n")])
        with first.client() as client:
            promoted = client.post("/v1/promotions", json=request).json()
        assert promoted["status"] == "completed"
        op_id = promoted["operation_id"]
        thread = _post_in_thread(first, f"/v1/operations/{op_id}/rollback", None)
        assert first.wait_exit() == 137
        thread.join(60)
    finally:
        first.kill()
    assert sorted(p.name for p in repo.iterdir() if p.name != ".git") == [
        f".promoter-tmp-{rollback_id(op_id)}-1-0",
        "f.txt",
    ]
    second = DaemonProcess(state, {"work": repo})
    try:
        child = _only_operation(second, "rollback")
        assert child["status"] == "needs_recovery"
        view = _recover(second, child["operation_id"], fence=0, role="operator")
    finally:
        second.stop()
    assert view["status"] == "rolled_back"
    assert (repo / "f.txt").read_bytes() == b"old\n"
    assert _entries(repo) == ["f.txt"]


def test_crash_right_after_keeping_a_save_still_reports_it(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work", {"f.txt": b"old\n"})
    one, two = Pause(tmp_path, "before_replace"), Pause(tmp_path, "before_swap_back")
    faults = f"{one.spec},{two.spec},after_keep=kill"
    saves = ((one, b"save one\n"), (two, b"save two\n"))
    _kill_promotion(tmp_path, repo, faults, [("f.txt", b"old\n", b"new\n")], saves)
    op_id, view = _restart_and_recover(tmp_path, repo)
    kept_as = f".promoter-kept-{op_id}-1-0"
    assert view["status"] == "needs_reconciliation"
    assert [(k["kept_as"], k["sha256"], k.get("found")) for k in view["report"]["kept"]] == [
        (kept_as, sha(b"save two\n"), True)
    ]
    assert (repo / "f.txt").read_bytes() == b"save one\n"
    assert (repo / kept_as).read_bytes() == b"save two\n"
    assert _entries(repo) == sorted([kept_as, "f.txt"])
