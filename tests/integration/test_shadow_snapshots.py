"""Shadow snapshots (protocol: snapshots#shadow-repository) on real repositories: capture, diff,
restore, retention.

The user's ``.git`` holds commits and a staged change; every test that touches the
worktree checks that ``.git`` stays byte-identical (contents and mtimes, promoter's own
lock file aside).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promoter.config import RepositoryConfig, load_settings
from promoter.domain.paths import wire_path
from promoter.domain.status import OperationStatus
from promoter.engine.operation import restore as snapshot_restore
from promoter.engine.operation import views
from promoter.engine.operation.restore_steps import StepRun
from promoter.engine.services import Services, build_services
from promoter.engine.snapshots import capture as snapshots
from promoter.errors import (
    NotFound,
    PromoterError,
    SnapshotStale,
    ValidationFailed,
    WriteFailed,
)
from promoter.store import journal
from tests.gitutil import git, tree_digest

CRLF = b"one\r\ntwo\r\nno newline at end\r"
BINARY = bytes(range(256)) + b"\r\n\x00\r\n" * 50
CALC_V1 = b"def add(a: int, b: int) -> int:\n    return a + b\n"
CALC_V2 = CALC_V1 + b"\n\ndef multiply(a: int, b: int) -> int:\n    return a * b\n"


def _user_repo(path: Path) -> Path:
    """Commits, a staged change, and an ignored directory of the user's."""
    files = {
        "calculator.py": CALC_V1,
        "utils.py": b"VERSION = '1.0.0'\n",
        ".gitignore": b"node_modules/\n*.log\n",
        ".gitattributes": b"* text=auto eol=crlf\n*.dat filter=nonexistent\n",
        "script.sh": b"#!/bin/sh\necho hi\n",
        "crlf.txt": CRLF,
        "bin.dat": BINARY,
        "deep/a/b.txt": b"deep\n",
    }
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    (path / "script.sh").chmod(0o755)
    git(path.parent, "init", "-q", "-b", "main", str(path))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "User initial commit")
    (path / "staged.txt").write_bytes(b"staged but not committed\n")
    git(path, "add", "staged.txt")
    (path / "node_modules" / "pkg").mkdir(parents=True)
    (path / "node_modules" / "pkg" / "index.js").write_bytes(b"module.exports = 1\n")
    return path


pytestmark = pytest.mark.repo(shape=_user_repo)


@pytest.fixture
def services(tmp_path: Path, repo: Path) -> Iterator[Services]:
    config = load_settings(
        None,
        state_dir=tmp_path / "state",
        repositories={"work": RepositoryConfig(path=repo)},
        lock_timeout=5.0,
    )
    built = build_services(config)
    try:
        yield built
    finally:
        built.close()


def dot_git(repo: Path) -> dict[str, Any]:
    """Every entry under ``.git`` with kind, mode, mtime and content hash (lock aside)."""
    return {k: v for k, v in tree_digest(repo / ".git").items() if k != "promoter.lock"}


def worktree(repo: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside ``.git``: bytes and permission bits."""
    found: dict[str, tuple[bytes, int]] = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not path.is_file():
            continue
        found[rel] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return found


def capture(services: Services, label: str = "") -> str:
    return snapshots.capture(services, "work", label)["tree"]


def shadow(services: Services) -> Any:
    return snapshots.shadow_for(services, services.registry.by_name("work"))


def test_seed_scenario_restores_the_exact_earlier_tree_and_leaves_dot_git_alone(
    services: Services, repo: Path
) -> None:
    before_git = dot_git(repo)
    head = git(repo, "rev-parse", "HEAD")
    capture(services, "initial")
    (repo / "calculator.py").write_bytes(CALC_V2)
    step1 = capture(services, "step 1")
    step1_files = worktree(repo)
    (repo / "calculator.py").write_bytes(b"SYNTAX ERROR BROKEN FILE!!!\n")
    (repo / "utils.py").unlink()
    (repo / "temp_garbage_dump.txt").write_bytes(b"junk data\n")
    (repo / "junk" / "deeper").mkdir(parents=True)
    (repo / "junk" / "deeper" / "x.txt").write_bytes(b"more junk\n")
    step2 = capture(services, "step 2")

    change = snapshots.diff(services, "work", step1, step2)
    assert change["added"] == ["junk/deeper/x.txt", "temp_garbage_dump.txt"]
    assert change["modified"] == ["calculator.py"]
    assert change["deleted"] == ["utils.py"]
    assert "-def multiply(a: int, b: int) -> int:" in change["unified_diff"]
    assert "+SYNTAX ERROR BROKEN FILE!!!" in change["unified_diff"]
    assert change["truncated"] is False

    result = snapshot_restore.restore(services, "work", step1, step2)
    assert result["status"] == "completed"
    assert worktree(repo) == step1_files
    assert not (repo / "temp_garbage_dump.txt").exists()
    assert not (repo / "junk").exists()
    assert (repo / "utils.py").read_bytes() == b"VERSION = '1.0.0'\n"
    assert capture(services, "after") == step1
    assert dot_git(repo) == before_git
    assert git(repo, "rev-parse", "HEAD") == head
    assert "staged.txt" in git(repo, "ls-files", "--cached")

    view = views.operation_view(services.db, result["operation_id"]).wire()
    assert view["kind"] == "restore"
    assert view["events_verified"] is True
    assert [e["kind"] for e in view["events"]] == ["decision", "action", "outcome"]
    assert {s["path"]: s["operation"] for s in view["steps"]} == {
        "utils.py": "create",
        "calculator.py": "modify",
        "temp_garbage_dump.txt": "delete",
        "junk/deeper/x.txt": "delete",
    }
    assert all(s["status"] == "completed" for s in view["steps"])
    assert view["report"]["removed_directories"] == ["junk/deeper", "junk"]
    assert view["report"]["post_tree_matches"] is True
    with services.db.session() as session:
        row = journal.get_operation(session, result["operation_id"])
        assert row is not None
        assert (row.pre_snapshot, row.post_snapshot) == (step2, step1)
    assert result["operation_id"] == snapshot_restore.restore_id(
        services.registry.by_name("work").identity, step2, step1
    )


def test_restore_refuses_a_stale_expected_tree_and_writes_nothing(
    services: Services, repo: Path
) -> None:
    first = capture(services)
    (repo / "calculator.py").write_bytes(CALC_V2)
    second = capture(services)
    (repo / "utils.py").write_bytes(b"edited after the review\n")
    files, git_before = worktree(repo), dot_git(repo)
    with pytest.raises(SnapshotStale) as refused:
        snapshot_restore.restore(services, "work", first, second)
    assert refused.value.code == "snapshot_stale"
    assert refused.value.context["current_tree"] not in (first, second)
    assert worktree(repo) == files
    assert dot_git(repo) == git_before
    with services.db.session() as session:
        assert journal.list_operations(session, repository="work") == []


def test_same_size_edit_within_the_same_second_is_seen_by_the_next_capture(
    services: Services, repo: Path
) -> None:
    index = Path(shadow(services).path) / "promoter-index"
    target = repo / "racy.txt"
    seen_racy = 0
    for attempt in range(20):
        target.write_bytes(b"aaaa%02d\n" % attempt)
        before = capture(services)
        mtime = os.stat(target).st_mtime_ns
        target.write_bytes(b"bbbb%02d\n" % attempt)  # same size, right after the index write
        os.utime(target, ns=(mtime, mtime))  # even the same mtime
        if int(os.stat(index).st_mtime) == mtime // 10**9:
            seen_racy += 1
        assert capture(services) != before, f"attempt {attempt}: the edit was missed"
    assert seen_racy > 0


def test_ignored_files_are_never_captured_nor_removed_by_restore(
    services: Services, repo: Path
) -> None:
    base = capture(services)
    assert not [p for p in shadow(services).tree_files(base) if p.startswith("node_modules/")]
    (repo / "logs").mkdir()
    (repo / "logs" / "app.log").write_bytes(b"ignored log\n")
    (repo / "logs" / "keep.txt").write_bytes(b"tracked, restored away\n")
    (repo / "node_modules" / "new.js").write_bytes(b"installed later\n")
    current = capture(services)
    assert set(shadow(services).tree_files(current)) - set(shadow(services).tree_files(base)) == {
        "logs/keep.txt"
    }
    assert snapshot_restore.restore(services, "work", base, current)["status"] == "completed"
    assert (repo / "logs" / "app.log").read_bytes() == b"ignored log\n"
    assert not (repo / "logs" / "keep.txt").exists()
    assert (repo / "node_modules" / "new.js").read_bytes() == b"installed later\n"
    assert (repo / "node_modules" / "pkg" / "index.js").exists()
    (repo / ".gitignore").write_bytes(b"node_modules/\n*.log\ncalculator.py\n")
    assert "calculator.py" not in shadow(services).tree_files(capture(services))


def test_exec_bits_crlf_and_binary_bytes_are_restored_exactly(
    services: Services, repo: Path
) -> None:
    base = capture(services)
    files = worktree(repo)
    assert files["script.sh"][1] & 0o100
    (repo / "script.sh").chmod(0o644)
    (repo / "crlf.txt").write_bytes(CRLF.replace(b"\r\n", b"\n"))
    (repo / "bin.dat").write_bytes(BINARY[:100])
    (repo / "deep" / "a" / "b.txt").unlink()
    changed = capture(services)
    result = snapshot_restore.restore(services, "work", base, changed)
    assert result["status"] == "completed"
    assert worktree(repo) == files
    assert (repo / "crlf.txt").read_bytes() == CRLF
    assert (repo / "bin.dat").read_bytes() == BINARY


def test_a_file_and_a_directory_can_trade_places(services: Services, repo: Path) -> None:
    base = capture(services)
    files = worktree(repo)
    (repo / "utils.py").unlink()
    (repo / "utils.py").mkdir()
    (repo / "utils.py" / "inner.py").write_bytes(b"x = 1\n")
    (repo / "deep" / "a" / "b.txt").unlink()
    (repo / "deep" / "a").rmdir()
    (repo / "deep" / "a").write_bytes(b"a file now\n")
    swapped = capture(services)
    assert snapshot_restore.restore(services, "work", base, swapped)["status"] == "completed"
    assert worktree(repo) == files
    assert snapshot_restore.restore(services, "work", swapped, base)["status"] == "completed"
    assert capture(services) == swapped


def test_symlinks_in_the_change_are_restored_as_links_never_followed(
    services: Services, repo: Path, tmp_path: Path
) -> None:
    (repo / "docs").mkdir()
    (repo / "docs" / "calc").symlink_to("../calculator.py")
    base = capture(services)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside\n")
    (repo / "docs" / "calc").unlink()
    (repo / "docs" / "calc").symlink_to(str(outside))  # retargeted outside
    (repo / "link").symlink_to("calculator.py")  # a new link
    (repo / "utils.py").unlink()
    (repo / "utils.py").symlink_to("/etc/passwd")  # a file became a link
    current = capture(services)
    result = snapshot_restore.restore(services, "work", base, current)
    assert result["status"] == "completed"
    assert os.readlink(repo / "docs" / "calc") == "../calculator.py"
    assert not os.path.lexists(repo / "link")
    assert not (repo / "utils.py").is_symlink()
    assert (repo / "utils.py").read_bytes() == b"VERSION = '1.0.0'\n"
    assert outside.read_bytes() == b"outside\n"
    assert capture(services) == base


def test_a_name_that_is_not_utf8_is_shown_escaped_and_restored(
    services: Services, repo: Path
) -> None:
    raw = os.path.join(os.fsencode(repo), b"caf\xe9.txt")
    base = capture(services)
    fd = os.open(raw, os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"latin-1 name\n")
    os.close(fd)
    current = capture(services)
    assert snapshots.diff(services, "work", base, current)["added"] == ["caf\\xe9.txt"]
    result = snapshot_restore.restore(services, "work", base, current)
    assert result["status"] == "completed"
    assert not os.path.lexists(raw)
    view = views.operation_view(services.db, result["operation_id"]).wire()
    assert [s["path"] for s in view["steps"]] == ["caf\\xe9.txt"]
    back = snapshot_restore.restore(services, "work", current, base)
    assert back["status"] == "completed"
    with open(raw, "rb") as handle:
        assert handle.read() == b"latin-1 name\n"


def test_names_a_display_would_conflate_have_distinct_wire_forms_and_restore_wholly(
    services: Services, repo: Path
) -> None:
    # b"caf\xe9.txt" (latin-1) and b"caf\\xe9.txt" (a literal backslash) were once both
    # shown as caf\xe9.txt and the restore refused; their wire forms differ
    # (protocol: documents#byte-paths)
    original = (repo / "utils.py").read_bytes()
    base = capture(services)
    (repo / "utils.py").write_bytes(b"changed\n")
    names = (b"caf\xe9.txt", b"caf\\xe9.txt")
    for name in names:
        fd = os.open(os.path.join(os.fsencode(repo), name), os.O_CREAT | os.O_WRONLY)
        os.close(fd)
    current = capture(services)
    assert sorted(wire_path(p) for p in shadow(services).tree_files(current)) == sorted(
        [
            *(wire_path(p) for p in shadow(services).tree_files(base)),
            "caf\\xe9.txt",
            "caf\\\\xe9.txt",
        ]
    )
    assert snapshot_restore.restore(services, "work", base, current)["status"] == "completed"
    assert (repo / "utils.py").read_bytes() == original
    for name in names:
        assert not os.path.lexists(os.path.join(os.fsencode(repo), name))


def test_nested_repositories_are_left_out_of_snapshots(services: Services, repo: Path) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested.parent, "init", "-q", str(nested))
    (nested / "code.py").write_bytes(b"nested\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-q", "-m", "nested")
    nested_git = tree_digest(nested / ".git")
    files = shadow(services).tree_files(capture(services))
    assert not [p for p in files if p.startswith("vendor/")]
    assert all(entry.mode in ("100644", "100755") for entry in files.values())
    assert tree_digest(nested / ".git") == nested_git


def test_a_conflict_after_a_write_needs_reconciliation_and_before_any_is_refused(
    services: Services, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = capture(services)
    (repo / "temp.txt").write_bytes(b"to be deleted\n")
    (repo / "utils.py").write_bytes(b"to be restored\n")
    current = capture(services)
    original = StepRun._write_all

    def racing_writes(self: StepRun, cat: Any, writes: list[Any]) -> None:
        for step in writes:  # the user writes each path just before promoter does
            (repo / step.path).write_bytes(b"the user got there first\n")
        original(self, cat, writes)

    monkeypatch.setattr(StepRun, "_write_all", racing_writes)
    result = snapshot_restore.restore(services, "work", base, current)
    assert result["status"] == "needs_reconciliation"
    assert (repo / "utils.py").read_bytes() == b"the user got there first\n"
    assert not (repo / "temp.txt").exists()
    view = views.operation_view(services.db, result["operation_id"]).wire()
    assert view["code"] == "target_drift"
    assert [p["path"] for p in view["report"]["paths"]] == ["utils.py"]

    (repo / "utils.py").write_bytes(b"to be restored\n")
    only_write = capture(services)
    refused = snapshot_restore.restore(services, "work", base, only_write)
    assert refused["status"] == "refused"
    assert (repo / "utils.py").read_bytes() == b"the user got there first\n"


def _stopped_restore(
    services: Services, monkeypatch: pytest.MonkeyPatch, target: str, current: str
) -> str:
    """A restore of ``work`` from ``current`` to ``target`` whose process died after its
    deletes, left ``needs_recovery`` as the sweep leaves it; the operation's id."""

    def crash_after_deletes(self: StepRun, todo: set[int]) -> str:
        for step in self.steps:
            if step.operation == "delete":
                self._delete(step, True)
        raise KeyboardInterrupt("the process dies")

    with monkeypatch.context() as patch:
        patch.setattr(StepRun, "apply", crash_after_deletes)
        with pytest.raises(KeyboardInterrupt):
            snapshot_restore.restore(services, "work", target, current)
    operation_id = snapshot_restore.restore_id(
        services.registry.by_name("work").identity, current, target
    )
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        assert row is not None and row.status == "in_progress"
        journal.set_status(session, operation_id, OperationStatus.NEEDS_RECOVERY, code="owner_gone")
    return operation_id


def test_an_interrupted_restore_is_recovered_to_the_target(
    services: Services, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = capture(services)
    files = worktree(repo)
    (repo / "calculator.py").write_bytes(b"broken\n")
    (repo / "new" / "junk.txt").parent.mkdir()
    (repo / "new" / "junk.txt").write_bytes(b"junk\n")
    current = capture(services)

    operation_id = _stopped_restore(services, monkeypatch, base, current)
    assert not (repo / "new" / "junk.txt").exists()
    assert snapshot_restore.recover_restore(services, operation_id) == "completed"
    assert worktree(repo) == files
    assert not (repo / "new").exists()


def _restore_stopped_by(
    services: Services, repo: Path, monkeypatch: pytest.MonkeyPatch, fault: BaseException
) -> tuple[str, dict[str, tuple[bytes, int]], BaseException]:
    """A restore back to a capture whose pass ``fault`` stops: its operation id, the
    worktree it restores to, and what the restore raised."""
    base = capture(services)
    files = worktree(repo)
    (repo / "calculator.py").write_bytes(b"broken\n")
    current = capture(services)

    def stopped(self: StepRun, todo: set[int]) -> str:
        raise fault

    with monkeypatch.context() as patch:
        patch.setattr(StepRun, "apply", stopped)
        with pytest.raises(BaseException) as raised:
            snapshot_restore.restore(services, "work", base, current)
    identity = services.registry.by_name("work").identity
    return snapshot_restore.restore_id(identity, current, base), files, raised.value


def test_an_io_error_while_recovering_a_restore_leaves_it_needs_recovery_not_running(
    services: Services, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``OSError`` (not a promoter error) during a restore's recovery: it answered as an
    unexpected error and left the restore ``in_progress``; now ``write_failed``, and the
    restore ``needs_recovery`` again, which a later recovery finishes."""
    dies = KeyboardInterrupt("the process dies")
    operation_id, files, raised = _restore_stopped_by(services, repo, monkeypatch, dies)
    assert raised is dies
    with services.db.session() as session:
        journal.set_status(session, operation_id, OperationStatus.NEEDS_RECOVERY, code="owner_gone")

    def failing_settle(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as patch:
        patch.setattr(snapshot_restore, "_settle_temps", failing_settle)
        with pytest.raises(WriteFailed) as failed:
            snapshot_restore.recover_restore(services, operation_id)
    assert failed.value.context["errno"] == errno.EIO
    view = views.operation_view(services.db, operation_id).wire()
    assert (view["status"], view["code"], view["detail"]) == (
        "needs_recovery",
        "write_failed",
        "the restore stopped: Input/output error",
    )
    assert (repo / "calculator.py").read_bytes() == b"broken\n"
    assert snapshot_restore.recover_restore(services, operation_id) == "completed"
    assert worktree(repo) == files


def test_an_unexpected_fault_in_a_restore_leaves_it_needs_recovery_not_running(
    services: Services,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any exception out of a restore's pass (a process that dies is the test above):
    the restore is ``needs_recovery`` with code ``internal``, and recovery finishes it."""
    broke = RuntimeError("the pass broke")
    operation_id, files, raised = _restore_stopped_by(services, repo, monkeypatch, broke)
    assert isinstance(raised, PromoterError) and raised.code == "internal"
    assert raised.__cause__ is broke
    view = views.operation_view(services.db, operation_id).wire()
    assert (view["status"], view["code"], view["detail"]) == (
        "needs_recovery",
        "internal",
        "the restore stopped: the pass broke",
    )
    logged = [r for r in caplog.records if r.getMessage().endswith("stopped unexpectedly")]
    assert [(r.getMessage(), r.exc_info is not None) for r in logged] == [
        (f"restore {operation_id} stopped unexpectedly", True)
    ]
    assert snapshot_restore.recover_restore(services, operation_id) == "completed"
    assert worktree(repo) == files


def test_bad_and_unknown_trees_are_refused(services: Services, repo: Path) -> None:
    base = capture(services)
    with pytest.raises(ValidationFailed):
        snapshots.diff(services, "work", base, "HEAD")
    with pytest.raises(NotFound):
        snapshots.diff(services, "work", base, "1" * 40)
    with pytest.raises(NotFound):
        snapshot_restore.restore(services, "work", "2" * 40, base)
    with pytest.raises(ValidationFailed):
        snapshots.capture(services, "work", "bad\nlabel")


def test_the_unified_diff_is_cut_at_a_line_end_and_flagged(services: Services, repo: Path) -> None:
    base = capture(services)
    (repo / "big.txt").write_bytes(b"".join(b"line %05d\n" % n for n in range(5000)))
    big = capture(services)
    change = snapshots.diff(services, "work", base, big, limit=1000)
    assert change["truncated"] is True
    assert change["added"] == ["big.txt"]
    assert len(change["unified_diff"].encode()) <= 1000
    assert change["unified_diff"].endswith("\n")


def test_operation_trees_are_recorded_and_retention_keeps_what_operations_use(
    services: Services, repo: Path
) -> None:
    base = capture(services)
    (repo / "utils.py").write_bytes(b"v2\n")
    current = capture(services)
    operation_id = snapshot_restore.restore(services, "work", base, current)["operation_id"]
    (repo / "utils.py").write_bytes(b"v3\n")
    post = snapshots.capture_for_operation(
        services, "work", operation_id, "post", holding_lock=False
    )
    with services.db.session() as session:
        row = journal.get_operation(session, operation_id)
        assert row is not None and row.post_snapshot == post
    labels = [s["label"] for s in snapshots.list_snapshots(services, "work")]
    assert labels == ["", "", f"post:{operation_id}"]
    (repo / "utils.py").write_bytes(b"only an old snapshot holds this\n")
    doomed = capture(services, "doomed")
    (repo / "utils.py").write_bytes(b"v4\n")
    newest = capture(services, "newest")
    assert snapshots.gc_snapshots(services, "work", 1) == {
        "removed_snapshots": 4,
        "forgotten_trees": 1,
    }
    assert [s["tree"] for s in snapshots.list_snapshots(services, "work")] == [newest]
    kept = shadow(services)
    assert all(kept.has_tree(tree) for tree in (base, current, post, newest))
    assert not kept.has_tree(doomed)
    assert capture(services) == newest  # the shadow index survived the pruning


def raw_worktree(repo: Path) -> dict[bytes, tuple[str, bytes, int]]:
    """Every entry outside ``.git`` by its raw name: a link's text, a file's bytes and bits."""
    found: dict[bytes, tuple[str, bytes, int]] = {}
    top = os.fsencode(repo)
    for directory, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not (directory == top and d == b".git")]
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, top)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path), 0)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    found[rel] = ("file", handle.read(), os.stat(path).st_mode & 0o777)
    return found


LATIN1 = b"r\xe9sum\xe9.txt"


def _damage_with_links_and_latin1(repo: Path, outside: Path) -> None:
    top = os.fsencode(repo)
    (repo / "calculator.py").write_bytes(b"SYNTAX ERROR BROKEN FILE!!!\n")
    (repo / "utils.py").unlink()
    (repo / "temp_garbage_dump.txt").write_bytes(b"junk data\n")
    (repo / "docs" / "calc").unlink()
    (repo / "docs" / "calc").symlink_to("/proc/self/root/etc")  # retargeted away
    (repo / "junk").mkdir()
    (repo / "junk" / "escape").symlink_to(str(outside))  # a new link out of the worktree
    os.unlink(os.path.join(top, LATIN1))  # a latin-1 name deleted
    with open(os.path.join(top, b"caf\xe9.txt"), "wb") as handle:  # and another created
        handle.write(b"junk under a latin-1 name\n")


def _time_travel_start(services: Services, repo: Path) -> tuple[str, dict[bytes, Any]]:
    capture(services, "initial")
    (repo / "calculator.py").write_bytes(CALC_V2)
    (repo / "docs").mkdir()
    (repo / "docs" / "calc").symlink_to("../calculator.py")
    with open(os.path.join(os.fsencode(repo), LATIN1), "wb") as handle:
        handle.write(b"curriculum vitae\n")
    return capture(services, "step 1"), raw_worktree(repo)


def test_seed_scenario_with_a_symlink_and_a_latin1_name_restores_exactly(
    services: Services, repo: Path, tmp_path: Path
) -> None:
    before_git = dot_git(repo)
    outside = tmp_path / "outside"
    outside.mkdir()
    step1, step1_entries = _time_travel_start(services, repo)
    _damage_with_links_and_latin1(repo, outside)
    step2 = capture(services, "step 2")
    change = snapshots.diff(services, "work", step1, step2)
    assert change["added"] == ["caf\\xe9.txt", "junk/escape", "temp_garbage_dump.txt"]
    assert change["modified"] == ["calculator.py", "docs/calc"]
    assert change["deleted"] == ["r\\xe9sum\\xe9.txt", "utils.py"]

    result = snapshot_restore.restore(services, "work", step1, step2)
    assert result["status"] == "completed"
    assert raw_worktree(repo) == step1_entries
    assert os.readlink(repo / "docs" / "calc") == "../calculator.py"
    assert not (repo / "junk").exists()
    assert list(outside.iterdir()) == []
    assert capture(services, "after") == step1
    assert dot_git(repo) == before_git
    view = views.operation_view(services.db, result["operation_id"]).wire()
    assert view["events_verified"] is True
    assert {s["path"]: s["operation"] for s in view["steps"]} == {
        "caf\\xe9.txt": "delete",
        "junk/escape": "delete",
        "temp_garbage_dump.txt": "delete",
        "calculator.py": "modify",
        "docs/calc": "modify",
        "r\\xe9sum\\xe9.txt": "create",
        "utils.py": "create",
    }
    assert view["report"]["post_tree_matches"] is True


def test_an_interrupted_restore_with_links_and_latin1_names_is_recovered_exactly(
    services: Services, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    step1, step1_entries = _time_travel_start(services, repo)
    _damage_with_links_and_latin1(repo, outside)
    step2 = capture(services, "step 2")

    operation_id = _stopped_restore(services, monkeypatch, step1, step2)
    assert not os.path.lexists(os.path.join(os.fsencode(repo), b"caf\xe9.txt"))
    assert snapshot_restore.recover_restore(services, operation_id) == "completed"
    assert raw_worktree(repo) == step1_entries
    assert capture(services, "after") == step1
