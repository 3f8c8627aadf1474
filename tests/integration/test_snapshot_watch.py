"""A watched capture equals a full capture, or it declines and a full one is taken.

``SnapshotWatch`` (``promoter.git.shadow_watch``) captures a promotion's snapshots
from the last capture plus the paths an inotify watch saw change. Each case changes a
real worktree after a watched full capture, takes the watched capture, and compares it
with a full capture into a second, fresh shadow of the same worktree. Where the watch
cannot know what changed (``.gitignore`` edited, a directory renamed, a repository
created inside the worktree, the objects collected), the watched capture declines
(``None``) and the next full capture arms it again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from promoter.fs import inotify
from promoter.fs.watch import TreeWatch
from promoter.git import runner
from promoter.git.layout import discover
from promoter.git.shadow import ShadowRepository
from promoter.git.shadow_watch import SnapshotWatch
from tests.gitutil import git
from tests.support.snapshot_repo import Change, delete, link, snapshot_worktree, write

pytestmark = [
    pytest.mark.skipif(not inotify.available(), reason="inotify is not available here"),
    pytest.mark.repo(shape=lambda path: _make_repo(path)),
]


def _make_repo(path: Path) -> Path:
    snapshot_worktree(path, {"deep/a/c.txt": b"deep too\n"})
    (path / "build" / "deeper").mkdir(parents=True)
    (path / "build" / "out.o").write_bytes(b"ignored\n")
    (path / "logs").mkdir()
    (path / "logs" / "only.log").write_bytes(b"a directory holding only ignored files\n")
    return path


def _shadow(where: Path, repo: Path, name: str) -> ShadowRepository:
    return ShadowRepository.open(discover(repo), str(where / name), "repo_" + "0" * 32)


_open: list[SnapshotWatch | TreeWatch] = []


@pytest.fixture(autouse=True)
def _close_watches() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def _armed(where: Path, repo: Path) -> tuple[SnapshotWatch, ShadowRepository]:
    shadow = _shadow(where, repo, "watched")
    watch = SnapshotWatch(str(repo))
    _open.append(watch)
    watch.before_full(shadow)
    watch.after_full(shadow, shadow.capture().tree)
    return watch, shadow


def _full_tree(where: Path, repo: Path) -> str:
    fresh = where / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    return _shadow(where, repo, "fresh").capture().tree


def _replace(rel: str, data: bytes) -> Change:
    """The way promoter and most editors save: a temp file renamed over the name."""

    def change(repo: Path) -> None:
        temp = repo / (rel + ".promoter-tmp-x")
        temp.write_bytes(data)
        os.replace(temp, repo / rel)

    return change


def _rmtree(rel: str) -> Change:
    return lambda repo: shutil.rmtree(repo / rel)


def _file_to_dir(rel: str) -> Change:
    def change(repo: Path) -> None:
        (repo / rel).unlink()
        (repo / rel).mkdir()
        (repo / rel / "inner.txt").write_bytes(b"was a file\n")

    return change


def _dir_to_file(rel: str) -> Change:
    def change(repo: Path) -> None:
        shutil.rmtree(repo / rel)
        (repo / rel).write_bytes(b"was a directory\n")

    return change


def _own_temp(rel: str) -> Change:
    return lambda repo: (repo / rel).write_bytes(b"promoter's own temp file\n")


def _init_nested(rel: str) -> Change:
    def change(repo: Path) -> None:
        (repo / rel).mkdir(parents=True, exist_ok=True)
        git(repo / rel, "init", "-q")
        (repo / rel / "inside.txt").write_bytes(b"a nested repository's file\n")

    return change


EQUAL: dict[str, list[Change]] = {
    "nothing changed": [],
    "modify in place": [write("app.py", b"print('v2')\n")],
    "replace by rename": [_replace("deep/a/b.txt", b"renamed over\n")],
    "modify an untracked file": [write("untracked.txt", b"changed\n")],
    "create in new directories": [write("gen/x/y/new.txt", b"new\n")],
    "delete": [delete("deep/a/b.txt")],
    "delete a whole directory": [_rmtree("deep")],
    "mode only": [write("tool.sh", b"#!/bin/sh\n", 0o755)],
    "create an ignored file": [write("build/more.o", b"ignored\n")],
    "create in an ignored directory's subdirectory": [write("build/deeper/x/y.o", b"no\n")],
    "a file where only ignored files were": [write("logs/new.txt", b"captured\n")],
    "create a file ignored below": [write("sub/local.txt", b"local\n")],
    "an ignored file changed": [write("noise.log", b"still ignored\n")],
    "a symbolic link": [link("link", "app.py")],
    "a link to a directory": [link("deeplink", "deep")],
    "a file becomes a directory": [_file_to_dir("app.py")],
    "a directory becomes a file": [_dir_to_file("deep/a")],
    "an empty directory": [lambda repo: (repo / "empty" / "er").mkdir(parents=True)],
    "promoter's temp file": [_own_temp(".promoter-tmp-0123")],
    "a new directory that is a repository": [_init_nested("sub/inner")],
    "several at once": [
        write("app.py", b"print('v3')\n"),
        delete("sub/kept.txt"),
        write("sub/new.txt", b"new\n"),
        write("a-b", b"sorts between a and a/\n"),
    ],
}


@pytest.mark.parametrize("name", list(EQUAL))
def test_watched_capture_equals_a_full_capture(tmp_path: Path, repo: Path, name: str) -> None:
    watch, shadow = _armed(tmp_path, repo)
    for change in EQUAL[name]:
        change(repo)
    captured = watch.capture(shadow)
    assert captured is not None, watch.watch.reason
    assert captured.tree == _full_tree(tmp_path, repo)
    assert shadow.has_tree(captured.tree)
    # and again, from that tree: nothing changed since
    again = watch.capture(shadow)
    assert again is not None and again.tree == captured.tree


def test_no_git_runs_when_nothing_changed(tmp_path: Path, repo: Path) -> None:
    watch, shadow = _armed(tmp_path, repo)
    with runner.counting() as count:
        captured = watch.capture(shadow)
    assert captured is not None
    assert count == []


DECLINED: dict[str, list[Change]] = {
    "a .gitignore edited": [write(".gitignore", b"*.log\n")],
    "a directory renamed": [lambda repo: os.rename(repo / "deep", repo / "shallow")],
    "a directory becomes a repository": [_init_nested("deep")],
    "a nested repository stops being one": [_rmtree("vendor/lib/.git")],
    "the exclude file edited": [
        lambda repo: (repo / ".git" / "info" / "exclude").write_bytes(b"*.txt\n")
    ],
}


@pytest.mark.parametrize("name", list(DECLINED))
def test_watch_declines_when_it_cannot_know(tmp_path: Path, repo: Path, name: str) -> None:
    _init_nested("vendor/lib")(repo)
    watch, shadow = _armed(tmp_path, repo)
    for change in DECLINED[name]:
        change(repo)
    assert watch.capture(shadow) is None
    # the caller then captures in full, which arms the watch again
    watch.before_full(shadow)
    full = shadow.capture().tree
    watch.after_full(shadow, full)
    write("after.py", b"seen by the watch again\n")(repo)
    captured = watch.capture(shadow)
    assert captured is not None and captured.tree != full
    assert captured.tree == shadow.capture().tree  # what the full capture of that shadow gives


def test_collected_objects_decline_the_watched_capture(tmp_path: Path, repo: Path) -> None:
    watch, shadow = _armed(tmp_path, repo)
    shadow.collect_garbage()  # another process's retention would do this
    assert watch.capture(shadow) is None


def test_forget_declines_the_watched_capture(tmp_path: Path, repo: Path) -> None:
    watch, shadow = _armed(tmp_path, repo)
    watch.forget()
    assert watch.capture(shadow) is None


def test_a_change_during_the_capture_is_in_the_next_one(tmp_path: Path, repo: Path) -> None:
    """A file written after the changed set was taken is looked at again next time."""
    watch, shadow = _armed(tmp_path, repo)
    write("app.py", b"print('first')\n")(repo)
    original = shadow.capture_changed

    def racing(base: str, paths: object) -> object:
        write("app.py", b"print('written during the capture')\n")(repo)
        write("late.txt", b"late\n")(repo)
        return original(base, paths)  # type: ignore[arg-type]

    shadow.capture_changed = racing  # type: ignore[method-assign,assignment]
    first = watch.capture(shadow)
    shadow.capture_changed = original  # type: ignore[method-assign]
    assert first is not None
    second = watch.capture(shadow)
    assert second is not None and second.tree == _full_tree(tmp_path, repo)


def _started(tmp_path: Path, **limits: int) -> tuple[Path, TreeWatch]:
    root = tmp_path / "tree"
    root.mkdir()
    watch = TreeWatch(str(root), **limits)
    assert watch.start()
    _open.append(watch)
    return root, watch


def test_watch_gives_up_past_its_limit(tmp_path: Path) -> None:
    root, watch = _started(tmp_path, max_dirty=10)
    for i in range(11):
        (root / f"f{i}").write_bytes(b"x")
    assert watch.take() is None
    assert "more than 10" in watch.reason


def test_watch_gives_up_when_the_queue_overflows(tmp_path: Path) -> None:
    root, watch = _started(tmp_path)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for i in range(limit // 2 + 100):  # a create and a close-after-write each, unread
        os.close(os.open(root / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644))
    assert watch.take() is None
    assert "overflowed" in watch.reason


def test_watch_reports_paths_in_new_directories(tmp_path: Path) -> None:
    root, watch = _started(tmp_path)
    (root / "new").mkdir()
    assert watch.take() == {b"new"}
    (root / "new" / "deeper").mkdir()
    (root / "new" / "deeper" / "f").write_bytes(b"x")
    assert watch.take() == {b"new/deeper"}
    (root / "new" / "deeper" / "f").write_bytes(b"y")
    assert watch.take() == {b"new/deeper/f"}


def test_watch_never_looks_inside_dot_git(tmp_path: Path, repo: Path) -> None:
    watch = TreeWatch(str(repo))
    assert watch.start()
    _open.append(watch)
    git(repo, "update-index", "--refresh", check=False)  # git writes only inside .git
    (repo / ".git" / "description").write_bytes(b"changed\n")
    assert watch.take() == set()


PATHS = ["a", "b", "d/x", "d/y", "d/e/z", "f.log", "d/e/f.log"]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "delete", "chmod", "link", "rmdir"]), st.sampled_from(PATHS)
    ),
    max_size=8,
)


def _apply(repo: Path, op: str, rel: str) -> None:
    path = repo / rel
    if op == "write":
        if path.parent.exists() and not path.parent.is_dir():
            path.parent.unlink()
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        path.write_bytes(rel.encode() + os.urandom(4).hex().encode())
    elif op == "delete":
        if path.is_symlink() or path.is_file():
            path.unlink()
    elif op == "chmod":
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o755 if not os.access(path, os.X_OK) else 0o644)
    elif op == "link":
        if not path.exists() and not path.is_symlink() and path.parent.is_dir():
            path.symlink_to("a")
    elif op == "rmdir":
        parent = path.parent
        if parent != repo and parent.is_dir() and not parent.is_symlink():
            shutil.rmtree(parent)


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rounds=st.lists(OPS, min_size=1, max_size=3))
def test_watched_captures_follow_any_sequence_of_changes(
    tmp_path_factory: pytest.TempPathFactory, rounds: list[list[tuple[str, str]]]
) -> None:
    where = tmp_path_factory.mktemp("seq")
    repo = _make_repo(where / "work")
    watch, shadow = _armed(where, repo)
    for ops in rounds:
        for op, rel in ops:
            _apply(repo, op, rel)
        captured = watch.capture(shadow)
        if captured is None:  # only when the watch said why
            assert watch.watch.reason
            watch.before_full(shadow)
            watch.after_full(shadow, shadow.capture().tree)
            continue
        assert captured.tree == _full_tree(where, repo), ops


def test_ignored_directories_are_not_watched(tmp_path: Path, repo: Path) -> None:
    watch, shadow = _armed(tmp_path, repo)
    watched = set(watch.watch._paths.values())
    assert {b"", b"deep", b"deep/a", b"sub", b"logs"} <= watched
    assert shadow.ignored_directories() == [b"build"]
    assert not {path for path in watched if path.startswith(b"build")}
