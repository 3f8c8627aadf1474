"""A capture limited to some paths equals a full capture when only they changed.

``ShadowRepository.capture_paths`` is how a promotion's post snapshot is taken from its
pre snapshot (``promoter.engine.snapshots.capture``). Each case captures a real worktree in
full, changes exactly the named paths, and compares the limited capture with a full
capture into a second, fresh shadow of the same worktree; after it, a full capture into
the first shadow must give the same tree again (its index was left consistent). The
cases where the equivalence cannot hold are declined (``None``), never guessed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promoter.git import runner
from promoter.git.layout import discover
from promoter.git.shadow import ShadowRepository
from tests.support.snapshot_repo import Change, delete, link, write

pytestmark = pytest.mark.repo(shape="snapshot")


def _shadow(tmp_path: Path, repo: Path, name: str) -> ShadowRepository:
    return ShadowRepository.open(discover(repo), str(tmp_path / name), "repo_" + "0" * 32)


CASES: dict[str, tuple[list[str], list[Change]]] = {
    "modify": (["app.py"], [write("app.py", b"print('v2')\n")]),
    "modify an untracked file": (["untracked.txt"], [write("untracked.txt", b"changed\n")]),
    "create in new directories": (["gen/x/y/new.txt"], [write("gen/x/y/new.txt", b"new\n")]),
    "delete": (["deep/a/b.txt"], [delete("deep/a/b.txt")]),
    "mode only": (["tool.sh"], [write("tool.sh", b"#!/bin/sh\n", 0o755)]),
    "create an ignored file": (["build/out.txt"], [write("build/out.txt", b"ignored\n")]),
    "create a file ignored below": (["sub/local.txt"], [write("sub/local.txt", b"local\n")]),
    "an ignored file changed": (["noise.log"], [write("noise.log", b"still ignored\n")]),
    "a symbolic link": (["link"], [link("link", "app.py")]),
    "a target that did not change": (["app.py", "absent/never.txt"], []),
    "several at once": (
        ["app.py", "deep/a/b.txt", "deep/a/c.txt", "odd name [x]*?.txt"],
        [
            write("app.py", b"print('v3')\n"),
            delete("deep/a/b.txt"),
            write("deep/a/c.txt", b"c\n"),
            write("odd name [x]*?.txt", b"odd\n"),
        ],
    ),
}


UNCHANGED = {
    "a target that did not change",
    "an ignored file changed",
    "create an ignored file",
    "create a file ignored below",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_limited_capture_equals_a_full_one(tmp_path: Path, repo: Path, case: str) -> None:
    paths, changes = CASES[case]
    shadow = _shadow(tmp_path, repo, "first")
    before = shadow.capture()
    for change in changes:
        change(repo)
    with runner.counting() as started:
        limited = shadow.capture_paths(paths)
    assert limited is not None
    assert "add" not in started and started.count("ls-files") <= 1
    full = _shadow(tmp_path, repo, "second").capture()
    assert limited.tree == full.tree
    assert (limited.tree == before.tree) == (case in UNCHANGED)
    assert shadow.capture().tree == full.tree  # the shadow's index matches its tree


def test_a_gitignore_among_the_paths_is_declined(tmp_path: Path, repo: Path) -> None:
    shadow = _shadow(tmp_path, repo, "first")
    shadow.capture()
    (repo / "sub" / ".gitignore").write_bytes(b"")  # sub/local.txt would now count
    assert shadow.capture_paths(["sub/.gitignore"]) is None


def test_a_changed_exclude_file_is_declined(tmp_path: Path, repo: Path) -> None:
    shadow = _shadow(tmp_path, repo, "first")
    shadow.capture()
    (repo / ".git" / "info" / "exclude").write_bytes(b"untracked.txt\n")
    assert shadow.capture_paths(["app.py"]) is None
    full = _shadow(tmp_path, repo, "second").capture()
    assert shadow.capture().tree == full.tree


def test_a_directory_at_a_path_is_declined(tmp_path: Path, repo: Path) -> None:
    shadow = _shadow(tmp_path, repo, "first")
    shadow.capture()
    (repo / "app.py").unlink()
    (repo / "app.py").mkdir()
    (repo / "app.py" / "inside.txt").write_bytes(b"x\n")
    assert shadow.capture_paths(["app.py"]) is None
    full = _shadow(tmp_path, repo, "second").capture()
    assert shadow.capture().tree == full.tree


def test_too_many_path_bytes_are_declined(tmp_path: Path, repo: Path) -> None:
    shadow = _shadow(tmp_path, repo, "first")
    shadow.capture()
    many = [f"gen/{'x' * 200}-{i}" for i in range(1000)]
    assert shadow.capture_paths(many) is None


def test_a_path_beyond_a_symbolic_link_is_declined_or_equal(tmp_path: Path, repo: Path) -> None:
    shadow = _shadow(tmp_path, repo, "first")
    shadow.capture()
    (repo / "ln").symlink_to("deep")
    limited = shadow.capture_paths(["ln", "ln/a/b.txt"])
    full = _shadow(tmp_path, repo, "second").capture()
    assert limited is None or limited.tree == full.tree
    assert shadow.capture().tree == full.tree
