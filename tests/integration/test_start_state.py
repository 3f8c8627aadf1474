"""``start_state.capture_into``: the person's worktree laid into a fresh clone, exactly.

Real repositories; the person's worktree and ``.git`` are compared byte for byte before
and after, and nothing outside the clone may change.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from promoter.executor.start_state import capture_into
from tests.gitutil import git, git_env
from tests.support.flows import init_repo
from tests.support.promotion import git_dir_digest, tree_bytes


def _clone(tmp_path: Path, repo: Path) -> tuple[Path, Path, str]:
    home = tmp_path / "home"
    home.mkdir()
    clone = home / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    return clone, home, git(repo, "rev-parse", "HEAD^{tree}")


def test_a_link_in_head_replaced_by_a_directory_is_never_followed_when_laying(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = init_repo(tmp_path / "work", {"README.md": b"r\n", "d/f": b"in a directory\n"})
    os.symlink(str(outside), repo / "lnk")
    git(repo, "add", "lnk")
    git(repo, "commit", "-q", "-m", "a link")
    clone, home, tree = _clone(tmp_path, repo)
    # the person: the link becomes a directory, the directory becomes a file
    (repo / "lnk").unlink()
    (repo / "lnk").mkdir()
    (repo / "lnk" / "x").write_bytes(b"inside now\n")
    (repo / "d" / "f").unlink()
    (repo / "d").rmdir()
    (repo / "d").write_bytes(b"a file now\n")
    person, person_git = tree_bytes(repo), git_dir_digest(repo)

    state = capture_into(str(repo), clone, home, tree)

    assert list(outside.iterdir()) == []
    assert tree_bytes(clone) == person
    assert tree_bytes(repo) == person and git_dir_digest(repo) == person_git
    # a file where a directory was: the path whose state is missing has no precondition
    assert sorted(p["path"] for p in state.preconditions) == ["d", "lnk/x"]
    assert {s["path"] for s in state.skipped} == {"d/f", "lnk"}
    listed = git(clone, "ls-tree", "-r", "--name-only", state.tree).split("\n")
    assert listed == ["README.md", "d", "lnk/x"]
    assert not (home / "start-index").exists()


def test_a_nested_repository_is_named_and_not_copied(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "work")
    init_repo(repo / "vendor" / "lib")  # an untracked nested repository
    (repo / "notes.txt").write_bytes(b"notes\n")
    clone, home, tree = _clone(tmp_path, repo)
    person_git = git_dir_digest(repo)

    state = capture_into(str(repo), clone, home, tree)

    assert [s["path"] for s in state.skipped] == ["vendor/lib"]
    assert not (clone / "vendor").exists()
    assert (clone / "notes.txt").read_bytes() == b"notes\n"
    assert [p["path"] for p in state.preconditions] == ["notes.txt"]
    assert git_dir_digest(repo) == person_git


def test_a_clone_named_by_a_relative_path_is_laid_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``promoter run`` with the default state directory, ``.promoter``, names it relative."""
    repo = init_repo(tmp_path / "work")
    (repo / "notes.txt").write_bytes(b"notes\n")
    clone, home, tree = _clone(tmp_path, repo)
    monkeypatch.chdir(tmp_path)

    state = capture_into(str(repo), clone.relative_to(tmp_path), home.relative_to(tmp_path), tree)

    assert tree_bytes(clone) == tree_bytes(repo)
    assert "notes.txt" in git(clone, "ls-tree", "-r", "--name-only", state.tree).split("\n")


def test_a_head_moved_onto_a_gitlink_after_its_tree_was_read_is_checked_as_the_new_head(
    tmp_path: Path,
) -> None:
    """HEAD's tree for the gitlink check comes from HEAD's files and the tree git named
    for that commit before: a ref moved since (no event, the index untouched) to a tree
    with a gitlink must be read anew, and a path under it refused, not taken as the base."""
    from promoter.executor.seeded import SeededShadow
    from promoter.git import runner
    from promoter.git.head import head_on_branch
    from promoter.git.layout import discover

    repo = init_repo(tmp_path / "work", {"README.md": b"r\n"})
    layout = discover(str(repo))
    on = head_on_branch(layout, "refs/heads/main")  # as the sandbox reads its base
    assert on is not None and on.tree is not None
    base = on.tree
    with SeededShadow(layout, base_tree=base) as shadow:  # HEAD unmoved: no git asked
        with runner.counting() as started:
            assert shadow.unsupported(shadow.diff(), symlinks=True) == {}
        assert shadow.seeded and started == []
    (repo / "sub").mkdir()
    (repo / "sub" / "x.py").write_bytes(b"untracked\n")
    head = git(repo, "rev-parse", "HEAD")
    scratch = git_env() | {"GIT_INDEX_FILE": str(tmp_path / "scratch-index")}
    for args in (
        ["read-tree", "HEAD"],
        ["update-index", "--add", "--cacheinfo", f"160000,{head},sub"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], env=scratch, check=True)
    tree = (
        subprocess.run(
            ["git", "-C", str(repo), "write-tree"], env=scratch, check=True, capture_output=True
        )
        .stdout.decode()
        .strip()
    )
    moved = git(repo, "commit-tree", "-p", head, "-m", "a gitlink", tree)
    git(repo, "update-ref", "refs/heads/main", moved)

    with SeededShadow(layout, base_tree=base) as shadow:
        entries = shadow.diff()
        assert shadow.seeded and [e.path for e in entries] == ["sub/x.py"]
        skipped = shadow.unsupported(entries, symlinks=True)
    assert list(skipped) == ["sub/x.py"]
    assert "gitlink" in skipped["sub/x.py"]
