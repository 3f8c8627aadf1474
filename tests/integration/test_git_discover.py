"""discover() and repository_identity() on real repositories of every shape."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from promoter.errors import RepositoryInvalid
from promoter.git.readback import RepoLayout, discover, repository_identity
from tests.gitutil import commit_all, git, make_repo


def _repo_with_commit(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path)
    (repo / "sub").mkdir()
    (repo / "sub" / "f").write_text("x\n")
    commit_all(repo)
    return repo


def test_discover_normal_repository(tmp_path: Path) -> None:
    repo = _repo_with_commit(tmp_path)
    layout = discover(repo)
    real = os.path.realpath(repo)
    assert layout == RepoLayout(
        worktree=real,
        git_dir=os.path.join(real, ".git"),
        common_dir=os.path.join(real, ".git"),
        object_format="sha1",
    )


def test_identity_is_the_spec_formula(tmp_path: Path) -> None:
    layout = discover(_repo_with_commit(tmp_path))
    material = os.fsencode(layout.worktree) + b"\0" + os.fsencode(layout.common_dir)
    expected = "repo_" + hashlib.sha256(material).hexdigest()[:32]
    assert repository_identity(layout) == expected
    assert len(expected) == 37


def test_discover_through_a_symlink_reports_realpaths(tmp_path: Path) -> None:
    repo = _repo_with_commit(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(repo)
    assert discover(link) == discover(repo)


def test_subdirectory_is_refused_not_widened(tmp_path: Path) -> None:
    repo = _repo_with_commit(tmp_path)
    with pytest.raises(RepositoryInvalid, match="not the top level") as caught:
        discover(repo / "sub")
    assert caught.value.context["toplevel"] == os.path.realpath(repo)


def test_linked_worktree_shares_common_dir_but_not_git_dir_or_identity(tmp_path: Path) -> None:
    repo = _repo_with_commit(tmp_path)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "other", str(linked))
    main_layout = discover(repo)
    linked_layout = discover(linked)
    assert linked_layout.worktree == os.path.realpath(linked)
    assert linked_layout.common_dir == main_layout.common_dir
    assert linked_layout.git_dir == os.path.join(main_layout.common_dir, "worktrees", "linked")
    assert linked_layout.git_dir != main_layout.git_dir
    assert repository_identity(linked_layout) != repository_identity(main_layout)


def test_bare_repository_is_refused(tmp_path: Path) -> None:
    bare = make_repo(tmp_path, "bare.git", bare=True)
    with pytest.raises(RepositoryInvalid, match="bare repository") as caught:
        discover(bare)
    assert caught.value.code == "repository_invalid"


def test_git_directory_itself_is_refused(tmp_path: Path) -> None:
    repo = _repo_with_commit(tmp_path)
    with pytest.raises(RepositoryInvalid, match="not inside a git worktree"):
        discover(repo / ".git")


def test_plain_directory_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(RepositoryInvalid, match="not a git repository"):
        discover(plain)


def test_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RepositoryInvalid, match="not a directory"):
        discover(tmp_path / "absent")


def test_sha256_repository_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, object_format="sha256")
    with pytest.raises(RepositoryInvalid, match="SHA-256 repositories are not supported in v1"):
        discover(repo)


def test_broken_gitfile_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / ".git").write_text("gitdir: /nonexistent/place\n")
    with pytest.raises(RepositoryInvalid):
        discover(fake)
