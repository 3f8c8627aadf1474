"""HEAD read from the files (``promoter.git.head.head_from_files``) against git itself.

Every layout the files answer (symbolic HEAD on a loose ref, on a packed ref, a loose
ref over an older packed one, detached HEAD, a linked worktree) gives git's own answer
without a process; every file in another form (a symlink, oversize, malformed, a
symbolic ref, reftable) is left to git, whose answer ``read_head`` then gives exactly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.git import runner
from promoter.git.head import (
    HeadState,
    commit_tree,
    commit_tree_at_head,
    head_commit,
    head_from_files,
    head_from_git,
    read_head,
)
from promoter.git.layout import RepoLayout, discover
from tests.gitutil import commit_all, git, make_repo

MAIN = "refs/heads/main"


def _gits(repo: Path) -> HeadState:
    """HEAD as git's single reads answer it (``symbolic-ref``, ``rev-parse``, ``cat-file``)."""
    layout = discover(repo)
    branch = git(repo, "symbolic-ref", "-q", "HEAD", check=False) or None
    commit = head_commit(layout)
    return HeadState(branch, commit, commit_tree(layout, commit) if commit else None)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    made = make_repo(tmp_path)
    (made / "a.txt").write_bytes(b"a\n")
    commit_all(made, "first")
    (made / "b.txt").write_bytes(b"b\n")
    commit_all(made, "second")
    return made


def _answers_without_git(repo: Path, expected: str | None = MAIN) -> HeadState:
    """``read_head`` once through git (the commit's tree is learnt), then from the files
    alone: both equal git's single reads."""
    layout = discover(repo)
    truth = _gits(repo)
    assert read_head(layout, expected) == truth
    with runner.counting() as started:
        again = read_head(layout, expected)
    assert started == []
    assert again == truth == head_from_files(layout)
    return again


def test_symbolic_head_on_a_loose_ref_is_read_without_git(repo: Path) -> None:
    head = _answers_without_git(repo)
    assert head.branch == MAIN
    assert head.commit == git(repo, "rev-parse", "HEAD")
    assert head.tree == git(repo, "rev-parse", "HEAD^{tree}")


def test_symbolic_head_on_a_packed_ref_is_read_without_git(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert _answers_without_git(repo).commit == git(repo, "rev-parse", "HEAD")


def test_a_loose_ref_over_an_older_packed_one_wins_as_in_git(repo: Path) -> None:
    git(repo, "tag", "-a", "-m", "t", "v1")  # a peeled line in packed-refs
    git(repo, "pack-refs", "--all")
    (repo / "c.txt").write_bytes(b"c\n")
    newer = commit_all(repo, "third")
    packed = (repo / ".git" / "packed-refs").read_bytes()
    assert b"^" in packed and newer.encode() not in packed
    assert _answers_without_git(repo).commit == newer


def test_detached_head_is_read_without_git(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    head = _answers_without_git(repo)
    assert head.branch is None
    assert head.commit == git(repo, "rev-parse", "HEAD~0")


def test_a_linked_worktree_reads_its_own_head_and_the_common_refs(
    repo: Path, tmp_path: Path
) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "side.txt").write_bytes(b"side\n")
    commit_all(linked, "side")
    head = _answers_without_git(linked, "refs/heads/side")
    assert head.branch == "refs/heads/side"
    assert head.commit == git(linked, "rev-parse", "HEAD") != git(repo, "rev-parse", "HEAD")
    assert _answers_without_git(repo).commit == git(repo, "rev-parse", "HEAD")


def test_a_commit_git_has_not_answered_for_is_asked_of_git(repo: Path) -> None:
    layout = discover(repo)
    assert head_from_files(layout) is None  # the tree is git's to tell first
    with runner.counting() as started:
        head = read_head(layout, MAIN)
    assert started == ["for-each-ref"]
    assert head == _gits(repo)


def _fallback(layout: RepoLayout, expected: str | None = MAIN) -> None:
    """The files are not read: ``read_head`` answers (or refuses) as git does."""
    assert head_from_files(layout) is None
    try:
        truth = head_from_git(layout, expected)
    except Exception as exc:  # a HEAD git refuses: refused alike
        with pytest.raises(type(exc)) as refused:
            read_head(layout, expected)
        assert str(refused.value) == str(exc)
    else:
        assert read_head(layout, expected) == truth


def _learn(repo: Path) -> tuple[RepoLayout, str]:
    """The layout, with HEAD's commit's tree learnt from git (so only the files' form
    decides), and HEAD's commit."""
    layout = discover(repo)
    assert read_head(layout, MAIN) == _gits(repo)
    assert head_from_files(layout) == _gits(repo)
    return layout, git(repo, "rev-parse", "HEAD")


def test_a_head_that_is_a_symlink_is_left_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    head = repo / ".git" / "HEAD"
    (repo / ".git" / "HEAD.real").write_bytes(head.read_bytes())
    head.unlink()
    head.symlink_to("HEAD.real")
    _fallback(layout)


def test_a_ref_that_is_a_symlink_is_left_to_git(repo: Path) -> None:
    layout, commit = _learn(repo)
    ref = repo / ".git" / "refs" / "heads" / "main"
    ref.unlink()
    (repo / ".git" / "real-main").write_bytes(commit.encode() + b"\n")
    ref.symlink_to(repo / ".git" / "real-main")
    _fallback(layout)


def test_a_packed_refs_that_is_a_symlink_is_left_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    os.rename(packed, repo / ".git" / "packed-real")
    packed.symlink_to("packed-real")
    _fallback(layout)


def test_an_oversize_ref_is_left_to_git(repo: Path) -> None:
    layout, commit = _learn(repo)
    (repo / ".git" / "refs" / "heads" / "main").write_bytes(commit.encode() + b"\n" * 8192)
    _fallback(layout)


def test_an_oversize_head_is_left_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    (repo / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n" + b" " * 8192)
    _fallback(layout)


@pytest.mark.parametrize(
    "content",
    [
        b"%s",  # no newline
        b"%s \n",  # trailing blank
        b"%s\n\n",
        b"%s garbage\n",
        b"UPPER",
        b"",
        b"ref: refs/heads/other\n",  # a symbolic ref
        b"0123\n",
    ],
)
def test_a_malformed_ref_is_left_to_git(repo: Path, content: bytes) -> None:
    layout, commit = _learn(repo)
    made = content.replace(b"%s", commit.encode())
    if made == b"UPPER":
        made = commit.upper().encode() + b"\n"
    if made.startswith(b"ref: "):
        git(repo, "branch", "other")
    (repo / ".git" / "refs" / "heads" / "main").write_bytes(made)
    _fallback(layout)


@pytest.mark.parametrize(
    "content",
    [
        b"ref:refs/heads/main\n",
        b"ref: refs/heads/main",
        b"ref: refs/heads/main \n",
        b"ref:  refs/heads/main\n",
        b"ref: refs/heads/../heads/main\n",
        b"ref: refs/heads/.main\n",
        b"ref: refs/heads/main.lock\n",
        b"ref: refs/tags/main\n",
        b"ref: refs/heads/.invalid\n",  # what a reftable repository's HEAD says
        b"%s",
        b"%s \n",
    ],
)
def test_a_malformed_head_is_left_to_git(repo: Path, content: bytes) -> None:
    layout, commit = _learn(repo)
    (repo / ".git" / "HEAD").write_bytes(content.replace(b"%s", commit.encode()))
    _fallback(layout)


@pytest.mark.parametrize(
    "extra",
    [
        b"# some comment\n",  # a second header
        b"^%s\n",  # a peeled line with no ref before it
        b"%s  refs/heads/x\n",
        b"%s refs/heads/main\n",  # the branch twice
        b"zz\n",
    ],
)
def test_a_malformed_packed_refs_is_left_to_git(repo: Path, extra: bytes) -> None:
    layout, commit = _learn(repo)
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    lines = packed.read_bytes().split(b"\n", 1)
    packed.write_bytes(lines[0] + b"\n" + extra.replace(b"%s", commit.encode()) + lines[1])
    _fallback(layout)


def test_a_packed_refs_without_its_last_newline_is_left_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    packed.write_bytes(packed.read_bytes().rstrip(b"\n"))
    _fallback(layout)


def test_a_reftable_directory_leaves_refs_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    (repo / ".git" / "reftable").mkdir()
    _fallback(layout)


def test_an_unborn_branch_is_left_to_git(repo: Path) -> None:
    layout, _ = _learn(repo)
    git(repo, "symbolic-ref", "HEAD", "refs/heads/nothing-yet")
    _fallback(layout, "refs/heads/nothing-yet")
    assert read_head(layout, None) == HeadState("refs/heads/nothing-yet", None, None)


def test_a_moved_branch_is_read_as_git_reads_it(repo: Path) -> None:
    layout = discover(repo)
    first = _answers_without_git(repo)
    git(repo, "reset", "-q", "--soft", "HEAD~1")  # the tests' own git, not promoter's
    moved = read_head(layout, MAIN)
    assert moved == _gits(repo)
    assert moved.commit != first.commit


def test_head_read_with_no_branch_expected_asks_git_of_heads_own_once(repo: Path) -> None:
    layout = discover(repo)
    with runner.counting() as started:
        head = read_head(layout, None)  # the daemon's listing: no branch expected
    assert started == ["for-each-ref"]
    assert head == _gits(repo)
    with runner.counting() as started:
        assert read_head(layout, None) == head
    assert started == []


def test_a_head_file_naming_a_branch_that_is_symbolic_is_not_taken_on_its_word(
    repo: Path,
) -> None:
    first = git(repo, "rev-parse", "HEAD~1")
    git(repo, "branch", "other", first)
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/other")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    layout = discover(repo)
    _fallback(layout, None)
    assert read_head(layout, None) == _gits(repo)
    assert read_head(layout, None).commit == first


def test_a_branch_moved_under_the_listing_is_read_anew(repo: Path) -> None:
    layout = discover(repo)
    listed = read_head(layout, None)
    assert read_head(layout, None) == listed  # from the files now
    (repo / "c.txt").write_bytes(b"c\n")
    moved = commit_all(repo, "third")
    with runner.counting() as started:
        again = read_head(layout, None)
    assert started == ["for-each-ref"]
    assert again == _gits(repo) and again.commit == moved != listed.commit


def test_the_sandboxs_head_tree_is_one_for_each_ref_and_refuses_a_moved_head(
    repo: Path,
) -> None:
    from promoter.errors import BaseMoved
    from promoter.executor.layered import head_tree

    head, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
    found = discover(repo)
    with runner.counting() as started:
        assert head_tree(str(repo), head, found=found, branch=MAIN) == tree
    assert started == ["for-each-ref"]
    older = git(repo, "rev-parse", "HEAD~1")
    for branch in (MAIN, "refs/heads/other", None):  # moved since listed: refused alike
        with pytest.raises(BaseMoved, match="HEAD moved from .* while the run started"):
            head_tree(str(repo), older, found=discover(repo), branch=branch)
    git(repo, "checkout", "-q", "--detach", "HEAD")
    assert head_tree(str(repo), head, found=discover(repo), branch=MAIN) == tree


def test_a_commit_tree_at_head_is_git_s_answer_and_asks_git_for_any_other_commit(
    repo: Path,
) -> None:
    """A grant's base on HEAD's commit (``commit_tree_at_head``): git answers first; once
    HEAD's files name the commit and git told its tree, no process; any other commit
    (HEAD's parent, HEAD's old commit after it moved, an unknown id) is git's alone."""
    layout = discover(repo)
    head, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
    with runner.counting() as started:
        assert commit_tree_at_head(layout, head) == tree
    assert started == ["cat-file"]
    with runner.counting() as started:
        assert commit_tree_at_head(layout, head) == tree == commit_tree(layout, head)
    assert started == ["cat-file"]  # commit_tree's own; commit_tree_at_head started none
    parent = git(repo, "rev-parse", "HEAD~1")
    with runner.counting() as started:
        assert commit_tree_at_head(layout, parent) == git(repo, "rev-parse", "HEAD~1^{tree}")
    assert started == ["cat-file"]
    (repo / "c.txt").write_bytes(b"c\n")
    commit_all(repo, "third")
    with runner.counting() as started:
        assert commit_tree_at_head(layout, head) == tree  # an old commit: asked again
        assert commit_tree_at_head(layout, "0" * 40) is None
    assert started == ["cat-file", "cat-file"]
