"""A post-promotion check cannot make the receipt false (protocol: recovery#post-promotion-check,
catalogue W6).

Each test configures a check command (operator config, an argv list) that attacks the
promotion it follows: it edits a target, creates a file, appends to the user's own dirty
file, deletes an untracked file, rewrites an ignored file, stages or commits. Every one
must end without a receipt, with exactly those paths in ``report.check_changed`` of
``GET /v1/operations/{id}``, and with the check's bytes kept where the check left them.
A clean check completes with a receipt whose read-back is the disk.
"""

from __future__ import annotations

import json
import os
import select
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.config import RepositoryConfig
from tests.support.daemon import Daemon, running_daemon
from tests.support.flows import git, init_repo, sha
from tests.support.promotion import promote, submit

FILES = {
    ".gitignore": b".env\n",
    "src/app.py": b"print('v1')\n",
    "src/util.py": b"def util():\n    return 1\n",
    "docs/old.txt": b"to be deleted\n",
    "outside.txt": b"not in the bundle\n",
}
CHANGES = [
    ("src/app.py", FILES["src/app.py"], b"print('v2')\n"),
    ("src/util.py", FILES["src/util.py"], b"def util():\n    return 2\n"),
    ("docs/old.txt", FILES["docs/old.txt"], None),
    ("fresh/new.txt", None, b"created\n"),
]
DIRTY = FILES["outside.txt"] + b"the user's unsaved work\n"


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "lab", FILES)


def _daemon(tmp_path: Path, repo: Path, check: list[str], **config: Any) -> Iterator[Daemon]:
    repository = RepositoryConfig(path=repo, check_command=check, check_timeout=60, **config)
    with running_daemon(tmp_path / "state", {"lab": repository}) as daemon:
        yield daemon


def _run(daemon: Daemon, repo: Path, **grant: Any) -> dict[str, Any]:
    identity = daemon.services.registry.by_name("lab").identity
    _, bundle, receipt = submit(daemon, repo, identity, CHANGES, **grant)
    answer = promote(daemon, bundle, receipt)
    assert answer.status_code in (200, 201, 202), answer.text
    with daemon.orchestrator() as orch:
        view = orch.get(f"/v1/operations/{answer.json()['operation_id']}")
        assert view.status_code == 200, view.text
        receipt_answer = orch.get(f"/v1/operations/{answer.json()['operation_id']}/receipt")
    document: dict[str, Any] = view.json()
    document["_receipt_status"] = receipt_answer.status_code
    return document


def _paths(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["path"], item["change"]) for item in items]


def _nothing_else(changed: dict[str, Any]) -> None:
    assert changed["git_paths"] == []
    assert changed["index_paths"] == []


def _sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def test_check_that_edits_a_target_fails_closed(tmp_path: Path, lab: Path) -> None:
    for daemon in _daemon(tmp_path, lab, _sh("printf 'tampered\\n' > src/app.py")):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        assert view["_receipt_status"] == 404
        assert view["report"]["check"]["exit_code"] == 0
        changed = view["report"]["check_changed"]
        assert changed["targets"] == [
            {
                "path": "src/app.py",
                "actual": {
                    "exists": True,
                    "kind": "file",
                    "sha256": sha(b"tampered\n"),
                    "mode": "100644",
                    "bytes": 9,
                },
                "expected": {"exists": True, "sha256": sha(b"print('v2')\n"), "mode": "100644"},
            }
        ]
        assert changed["other_paths"] == []
        _nothing_else(changed)
        assert view["detail"] == "the post-promotion check changed 1 path(s): src/app.py"
        assert (lab / "src" / "app.py").read_bytes() == b"tampered\n"
        assert (lab / "src" / "util.py").read_bytes() == b"def util():\n    return 2\n"
        assert not daemon.services.audit.get("promotion", view["operation_id"])


def test_check_that_creates_a_file_is_reported(tmp_path: Path, lab: Path) -> None:
    check = _sh("printf made > build.log && mkdir out && printf r > out/report.txt")
    for daemon in _daemon(tmp_path, lab, check):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        assert view["_receipt_status"] == 404
        changed = view["report"]["check_changed"]
        assert changed["targets"] == []
        assert changed["other_paths"] == [
            {"path": "build.log", "change": "created", "fields": []},
            {"path": "out", "change": "created", "fields": []},
            {"path": "out/report.txt", "change": "created", "fields": []},
        ]
        _nothing_else(changed)
        assert (lab / "build.log").read_bytes() == b"made"
        assert (lab / "out" / "report.txt").read_bytes() == b"r"


def test_check_that_appends_to_a_users_dirty_file_is_reported_and_kept(
    tmp_path: Path, lab: Path
) -> None:
    (lab / "outside.txt").write_bytes(DIRTY)
    for daemon in _daemon(tmp_path, lab, _sh("printf x >> outside.txt")):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        assert view["_receipt_status"] == 404
        changed = view["report"]["check_changed"]
        assert changed["targets"] == []
        assert _paths(changed["other_paths"]) == [("outside.txt", "modified")]
        assert "size" in changed["other_paths"][0]["fields"]
        _nothing_else(changed)
        assert (lab / "outside.txt").read_bytes() == DIRTY + b"x"
        with daemon.operator() as op:
            answer = op.post(
                f"/v1/operations/{view['operation_id']}/reconcile",
                json={"decision": "rollback", "note": "the check wrote outside its targets"},
            )
        assert answer.json()["status"] == "rolled_back", answer.text
        assert (lab / "src" / "app.py").read_bytes() == FILES["src/app.py"]
        assert (lab / "docs" / "old.txt").read_bytes() == FILES["docs/old.txt"]
        assert not (lab / "fresh").exists()
        assert (lab / "outside.txt").read_bytes() == DIRTY + b"x"


def test_check_that_deletes_an_untracked_file_is_reported(tmp_path: Path, lab: Path) -> None:
    (lab / "notes.txt").write_bytes(b"untracked notes\n")
    for daemon in _daemon(tmp_path, lab, _sh("rm notes.txt")):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert changed["targets"] == []
        assert changed["other_paths"] == [{"path": "notes.txt", "change": "removed", "fields": []}]
        _nothing_else(changed)
        assert not (lab / "notes.txt").exists()


def test_check_that_rewrites_an_ignored_file_is_reported(tmp_path: Path, lab: Path) -> None:
    (lab / ".env").write_bytes(b"TOKEN=user\n")
    for daemon in _daemon(tmp_path, lab, _sh("printf 'TOKEN=check\\n' > .env")):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert _paths(changed["other_paths"]) == [(".env", "modified")]
        _nothing_else(changed)
        assert (lab / ".env").read_bytes() == b"TOKEN=check\n"


def test_check_changes_with_rollback_policy_restore_only_untouched_targets(
    tmp_path: Path, lab: Path
) -> None:
    (lab / "outside.txt").write_bytes(DIRTY)
    check = _sh("printf 'check\\n' > src/app.py; printf x >> outside.txt; printf s > fresh/stray")
    for daemon in _daemon(tmp_path, lab, check, on_check_failure="rollback"):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("rollback_partial", "check_changed_worktree")
        assert view["_receipt_status"] == 404
        changed = view["report"]["check_changed"]
        assert [t["path"] for t in changed["targets"]] == ["src/app.py"]
        assert _paths(changed["other_paths"]) == [
            ("fresh/stray", "created"),
            ("outside.txt", "modified"),
        ]
        _nothing_else(changed)
        stored = daemon.services.audit.get("rollback", view["operation_id"])
        assert stored is not None
        rollback = json.loads(stored)
        assert rollback["status"] == "rollback_partial"
        assert {t["path"]: t["result"] for t in rollback["targets"]} == {
            "src/app.py": "conflict",
            "src/util.py": "restored",
            "docs/old.txt": "restored",
            "fresh/new.txt": "restored",
        }
        assert rollback["removed_directories"] == []
        # the check's bytes stay where it left them; every untouched target is old again
        assert (lab / "src" / "app.py").read_bytes() == b"check\n"
        assert (lab / "outside.txt").read_bytes() == DIRTY + b"x"
        assert (lab / "fresh" / "stray").read_bytes() == b"s"
        assert not (lab / "fresh" / "new.txt").exists()
        assert (lab / "src" / "util.py").read_bytes() == FILES["src/util.py"]
        assert (lab / "docs" / "old.txt").read_bytes() == FILES["docs/old.txt"]


def test_check_that_stages_a_file_is_reported(tmp_path: Path, lab: Path) -> None:
    for daemon in _daemon(tmp_path, lab, ["git", "add", "src/util.py"]):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert (changed["targets"], changed["other_paths"]) == ([], [])
        assert changed["index_paths"] == ["src/util.py"]
        assert changed["git_paths"] == []


def test_check_that_stages_in_a_linked_worktree_is_reported(tmp_path: Path, lab: Path) -> None:
    linked = tmp_path / "linked"
    git(lab, "worktree", "add", "-q", "-b", "side", str(linked))
    for daemon in _daemon(tmp_path, linked, _sh("git add src/util.py && printf l > local.txt")):
        view = _run(daemon, linked, branch="refs/heads/side")
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert changed["targets"] == []
        assert _paths(changed["other_paths"]) == [("local.txt", "created")]
        assert changed["index_paths"] == ["src/util.py"]
        assert changed["git_paths"] == []
        assert (linked / "local.txt").read_bytes() == b"l"


def test_check_that_commits_is_reported(tmp_path: Path, lab: Path) -> None:
    identity = ["-c", "user.name=check", "-c", "user.email=check@example.invalid"]
    check = ["git", *identity, "commit", "-q", "--allow-empty", "-m", "by the check"]
    for daemon in _daemon(tmp_path, lab, check):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert (changed["targets"], changed["other_paths"], changed["index_paths"]) == ([], [], [])
        assert _paths(changed["git_paths"]) == [
            ("COMMIT_EDITMSG", "modified"),
            ("logs/HEAD", "modified"),
            ("logs/refs/heads/main", "modified"),
            ("refs/heads/main", "modified"),
        ]


def test_check_that_reads_and_runs_git_status_completes(tmp_path: Path, lab: Path) -> None:
    check = _sh('git status --porcelain >/dev/null && test "$HOME" != "$PWD" && cat src/app.py')
    for daemon in _daemon(tmp_path, lab, check):
        view = _run(daemon, lab)
        assert view["status"] == "completed", view
        assert view["report"]["check"]["output_tail"] == "print('v2')\n"
        assert view["report"]["check_changed"] == {
            "targets": [],
            "other_paths": [],
            "git_paths": [],
            "index_paths": [],
        }


def test_check_that_leaves_a_writer_behind_is_stopped(tmp_path: Path, lab: Path) -> None:
    # the check and what it leaves behind hold a FIFO's writing end: its reader here sees
    # the end once every one of them has ended, and not before (no time is assumed)
    held = tmp_path / "held"
    os.mkfifo(held)
    reader = os.open(held, os.O_RDONLY | os.O_NONBLOCK)
    writer = "(exec >/dev/null 2>&1; sleep 600; printf late > late.txt) & exit 0"
    check = _sh(f"exec 3>{shlex.quote(str(held))}; {writer}")
    try:
        for daemon in _daemon(tmp_path, lab, check):
            view = _run(daemon, lab)
            assert view["status"] == "completed", view
            ended = select.poll()
            ended.register(reader, select.POLLIN)
            assert ended.poll(60_000), "the check's writer still runs"
            assert os.read(reader, 1) == b""
        assert not (lab / "late.txt").exists()
    finally:
        os.close(reader)


def test_clean_check_receipt_matches_disk(tmp_path: Path, lab: Path) -> None:
    for daemon in _daemon(tmp_path, lab, ["true"]):
        view = _run(daemon, lab)
        assert view["status"] == "completed", view
        assert view["_receipt_status"] == 200
        with daemon.orchestrator() as orch:
            receipt = orch.get(f"/v1/operations/{view['operation_id']}/receipt").json()
        on_disk = []
        for target in receipt["targets"]:
            path = lab / target["path"]
            if not path.exists():
                on_disk.append(
                    {"path": target["path"], "exists": False, "sha256": None, "mode": None}
                )
                continue
            mode = "100755" if path.stat().st_mode & 0o100 else "100644"
            on_disk.append(
                {
                    "path": target["path"],
                    "exists": True,
                    "sha256": sha(path.read_bytes()),
                    "mode": mode,
                }
            )
        assert receipt["targets"] == on_disk
        assert [t["path"] for t in receipt["targets"]] == [
            "docs/old.txt",
            "fresh/new.txt",
            "src/app.py",
            "src/util.py",
        ]
        assert receipt["targets"][2]["sha256"] == sha(b"print('v2')\n")


def test_failing_check_that_also_writes_reports_both(tmp_path: Path, lab: Path) -> None:
    (lab / "outside.txt").write_bytes(DIRTY)
    for daemon in _daemon(tmp_path, lab, _sh("printf x >> outside.txt; exit 4")):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_failed")
        assert view["detail"] == (
            "the post-promotion check failed (exit code 4); it also changed 1 path(s): outside.txt"
        )
        assert _paths(view["report"]["check_changed"]["other_paths"]) == [
            ("outside.txt", "modified")
        ]
        assert (lab / "outside.txt").read_bytes() == DIRTY + b"x"


def test_check_that_floods_the_worktree_is_reported_within_bounds(
    tmp_path: Path, lab: Path
) -> None:
    script = "mkdir many && cd many && i=0; while [ $i -lt 1005 ]; do : > f$i; i=$((i+1)); done"
    for daemon in _daemon(tmp_path, lab, _sh(script)):
        view = _run(daemon, lab)
        assert (view["status"], view["code"]) == ("needs_reconciliation", "check_changed_worktree")
        changed = view["report"]["check_changed"]
        assert len(changed["other_paths"]) == 1000
        assert changed["omitted"] == {"other_paths": 6}
        assert changed["other_paths"][:3] == [
            {"path": "many", "change": "created", "fields": []},
            {"path": "many/f0", "change": "created", "fields": []},
            {"path": "many/f1", "change": "created", "fields": []},
        ]
        assert view["detail"].startswith(
            "the post-promotion check changed 1006 path(s): many, many/f0, many/f1, many/f10,"
        )
        assert view["detail"].endswith(" …")
        assert len(list((lab / "many").iterdir())) == 1005
