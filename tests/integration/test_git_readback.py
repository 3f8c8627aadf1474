"""Read-back of HEAD, index, trees and blobs from real repositories
(protocol: promotion#step-read-back)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from promoter.errors import GitError
from promoter.git.gitlinks import gitlinks_and_nested
from promoter.git.head import commit_exists, commit_tree, head_commit, symbolic_head
from promoter.git.readback import (
    IndexEntry,
    TreeEntry,
    blob_sha256,
    discover,
    index_entries,
    iter_blob,
    list_tree_files,
    read_blob,
    tree_entries,
)
from promoter.git.records import EMPTY_BLOB
from tests.gitutil import blob_oid, commit_all, git, make_repo, tree_digest
from tests.support.repos import merge_conflict

ODD_NAMES = [
    "a*",
    "ab",
    ":x",
    ":(icase)Q",
    "sp ace",
    "new\nline",
    "tab\there",
    "café",
    "日本語.txt",
    "[x]",
    "-n",
]


FILES = {
    "src/app.py": b"print('hi')\n",
    "run.sh": b"#!/bin/sh\n",
    **{name: name.encode() + b"\n" for name in ODD_NAMES},
}
pytestmark = pytest.mark.repo(FILES, shape="based", executable=["run.sh"])


# --- HEAD ---------------------------------------------------------------------------------


def test_symbolic_head_on_a_branch(repo: Path) -> None:
    layout = discover(repo)
    assert symbolic_head(layout) == "refs/heads/main"
    assert head_commit(layout) == git(repo, "rev-parse", "HEAD")


def test_detached_head_has_no_symbolic_head(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    layout = discover(repo)
    assert symbolic_head(layout) is None
    assert head_commit(layout) == git(repo, "rev-parse", "HEAD")


def test_unborn_branch_has_symbolic_head_but_no_commit(tmp_path: Path) -> None:
    layout = discover(make_repo(tmp_path))
    assert symbolic_head(layout) == "refs/heads/main"
    assert head_commit(layout) is None


def test_commit_tree_and_existence(repo: Path) -> None:
    layout = discover(repo)
    commit = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    git(repo, "tag", "-a", "-m", "t", "v1")
    tag = git(repo, "rev-parse", "v1")
    assert commit_tree(layout, commit) == tree
    assert commit_exists(layout, commit)
    assert not commit_exists(layout, tree)  # a tree is not a commit
    assert not commit_exists(layout, tag)  # nor is a tag pointing at one
    assert commit_tree(layout, "1" * 40) is None
    assert commit_tree(layout, tree) is None
    with pytest.raises(ValueError):
        commit_tree(layout, "HEAD")


def test_linked_worktree_reads_its_own_head(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    (linked / "only-here").write_text("x")
    commit_all(linked, "feature work")
    layout = discover(linked)
    assert symbolic_head(layout) == "refs/heads/feature"
    assert head_commit(layout) == git(linked, "rev-parse", "HEAD")
    assert head_commit(discover(repo)) == git(repo, "rev-parse", "HEAD")
    assert head_commit(layout) != head_commit(discover(repo))


# --- index --------------------------------------------------------------------------------


def test_index_entry_of_a_staged_change_is_the_staged_blob(repo: Path) -> None:
    (repo / "src" / "app.py").write_bytes(b"staged\n")
    git(repo, "add", "src/app.py")
    (repo / "src" / "app.py").write_bytes(b"unstaged on top\n")
    entries = index_entries(discover(repo), ["src/app.py", "run.sh", "absent", "src"])
    assert entries == {
        "src/app.py": [IndexEntry("100644", blob_oid(b"staged\n"), 0)],
        "run.sh": [IndexEntry("100755", blob_oid(b"#!/bin/sh\n"), 0)],
        "absent": [],
        "src": [],  # a directory has no entry of its own; its files are not reported
    }


def test_intent_to_add_is_distinguished_from_a_staged_empty_file(repo: Path) -> None:
    (repo / "planned").write_bytes(b"later\n")
    (repo / "empty").write_bytes(b"")
    git(repo, "add", "-N", "planned")
    git(repo, "add", "empty")
    entries = index_entries(discover(repo), ["planned", "empty"])
    assert entries == {
        "planned": [IndexEntry("100644", EMPTY_BLOB, 0, intent_to_add=True)],
        "empty": [IndexEntry("100644", EMPTY_BLOB, 0, intent_to_add=False)],
    }


def test_merge_conflict_shows_stages_one_to_three(repo: Path) -> None:
    merge_conflict(repo)
    assert index_entries(discover(repo), ["c.txt"])["c.txt"] == [
        IndexEntry("100644", blob_oid(b"base\n"), 1),
        IndexEntry("100644", blob_oid(b"ours\n"), 2),
        IndexEntry("100644", blob_oid(b"theirs\n"), 3),
    ]


def test_index_pathspecs_are_literal(repo: Path) -> None:
    entries = index_entries(discover(repo), ODD_NAMES)
    for name in ODD_NAMES:
        assert entries[name] == [IndexEntry("100644", blob_oid(name.encode() + b"\n"), 0)]
    # "a*" must not also pick up "ab", and "[x]" must not match "x".
    assert index_entries(discover(repo), ["*"]) == {"*": []}


def test_many_paths_are_batched(repo: Path) -> None:
    many = repo / "many"
    many.mkdir()
    names = [f"many/file-{i:05d}-{'x' * 40}" for i in range(2500)]
    for name in names:
        (repo / name).write_bytes(b"m\n")
    commit_all(repo, "many")
    entries = index_entries(discover(repo), [*names, "many/absent"])
    assert len(entries) == 2501
    assert entries["many/absent"] == []
    assert all(entries[name] == [IndexEntry("100644", blob_oid(b"m\n"), 0)] for name in names)


# --- trees --------------------------------------------------------------------------------


def test_tree_entries_file_missing_directory_and_below_a_file(repo: Path) -> None:
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    entries = tree_entries(layout, tree, ["src/app.py", "src", "nope", "run.sh/x", "src/nope"])
    assert entries == {
        "src/app.py": TreeEntry("100644", blob_oid(b"print('hi')\n"), "blob"),
        "src": TreeEntry("040000", git(repo, "rev-parse", "HEAD:src"), "tree"),
        "nope": None,
        "run.sh/x": None,
        "src/nope": None,
    }


def test_tree_entries_literal_odd_names(repo: Path) -> None:
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    entries = tree_entries(layout, tree, [*ODD_NAMES, "*", "a?"])
    for name in ODD_NAMES:
        assert entries[name] == TreeEntry("100644", blob_oid(name.encode() + b"\n"), "blob")
    assert entries["*"] is None
    assert entries["a?"] is None


def test_tree_entries_of_a_missing_tree_fail(repo: Path) -> None:
    with pytest.raises(GitError):
        tree_entries(discover(repo), "2" * 40, ["src"])


def test_list_tree_files_matches_ls_tree(repo: Path) -> None:
    layout = discover(repo)
    files = list_tree_files(layout, git(repo, "rev-parse", "HEAD^{tree}"))
    assert sorted(files) == sorted(["src/app.py", "run.sh", *ODD_NAMES])
    assert files["run.sh"] == TreeEntry("100755", blob_oid(b"#!/bin/sh\n"), "blob")


# --- blobs --------------------------------------------------------------------------------


def test_blob_sha256_known_answers(repo: Path) -> None:
    payloads = [b"", b"hello\r\n\x00\xff", bytes(range(256)) * 4096]
    for i, data in enumerate(payloads):
        (repo / f"blob{i}").write_bytes(data)
    commit_all(repo, "blobs")
    oids = [blob_oid(data) for data in payloads]
    assert blob_sha256(discover(repo), oids) == {
        blob_oid(b""): ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 0),
        blob_oid(b"hello\r\n\x00\xff"): (hashlib.sha256(b"hello\r\n\x00\xff").hexdigest(), 9),
        oids[2]: (hashlib.sha256(payloads[2]).hexdigest(), 256 * 4096),
    }
    assert read_blob(discover(repo), oids[1]) == b"hello\r\n\x00\xff"
    assert b"".join(iter_blob(discover(repo), oids[2], 1000)) == payloads[2]


def test_blob_sha256_of_missing_object_fails(repo: Path) -> None:
    with pytest.raises(GitError, match="not in the repository"):
        blob_sha256(discover(repo), ["3" * 40])


# --- gitlinks and nested repositories -----------------------------------------------------


def test_gitlinks_and_nested_repositories_are_reported(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},vendor/lib")
    git(repo, "commit", "-q", "-m", "gitlink")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},staged-sub")
    nested = make_repo(repo, "src/inner")
    (nested / "x").write_text("x")
    (repo / "plain").mkdir()
    layout = discover(repo)
    found = gitlinks_and_nested(
        layout,
        [
            "vendor/lib/file.c",
            "vendor/lib",
            "staged-sub/a/b",
            "src/inner/x",
            "src/inner",
            "src/app.py",
            "plain/new.txt",
            "brand/new/file",
        ],
    )
    assert found == {
        "vendor/lib/file.c": "'vendor/lib' is a gitlink (submodule) in the index",
        "vendor/lib": "'vendor/lib' is a gitlink (submodule) in the index",
        "staged-sub/a/b": "'staged-sub' is a gitlink (submodule) in the index",
        "src/inner/x": "'src/inner' is a nested repository (it holds a .git entry)",
        "src/inner": "'src/inner' is a nested repository (it holds a .git entry)",
    }


def test_a_pass_looks_at_each_directory_once_and_answers_as_one_path_at_a_time(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nested = make_repo(repo, "deep/inner")
    (nested / "x").write_text("x")
    (repo / "deep" / "plain").mkdir()
    (repo / "afile").write_text("not a directory")
    paths = [f"deep/plain/f{i}" for i in range(40)] + [f"deep/inner/y{i}" for i in range(5)]
    paths += ["afile/below", "deep/inner", "deep/plain", "gone/dir/f"]
    layout = discover(repo)
    alone = {}
    for path in paths:
        alone.update(gitlinks_and_nested(layout, [path]))
    calls: list[str] = []
    real_lstat = os.lstat

    def counting(path: str, *args: object, **kwargs: object) -> os.stat_result:
        calls.append(os.fspath(path))
        return real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", counting)
    together = gitlinks_and_nested(layout, paths)
    monkeypatch.undo()
    assert together == alone
    assert (
        together["deep/inner/y3"] == "'deep/inner' is a nested repository (it holds a .git entry)"
    )
    assert "afile/below" not in together and "deep/plain/f7" not in together
    disk = [c for c in calls if c.startswith(str(repo))]
    assert len(disk) == len(set(disk)), "a directory was looked at twice in one pass"
    assert disk.count(os.path.join(str(repo), "deep", ".git")) == 1


def test_gitlink_only_in_head_is_reported(repo: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},mod")
    git(repo, "commit", "-q", "-m", "gitlink")
    git(repo, "rm", "-q", "--cached", "mod")
    found = gitlinks_and_nested(discover(repo), ["mod/file"])
    assert found == {"mod/file": "'mod' is a gitlink (submodule) in HEAD"}


def test_disk_walk_does_not_follow_symlinks(repo: Path, tmp_path: Path) -> None:
    outside = make_repo(tmp_path, "outside")
    (outside / "d").mkdir()
    make_repo(outside / "d", "nested")
    (repo / "via").symlink_to(outside / "d")
    assert gitlinks_and_nested(discover(repo), ["via/nested/file"]) == {}


def test_readback_leaves_git_dir_untouched(repo: Path) -> None:
    (repo / "src" / "app.py").write_bytes(b"dirty\n")  # stat info differs from the index
    before = tree_digest(repo / ".git")
    layout = discover(repo)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    symbolic_head(layout)
    head_commit(layout)
    index_entries(layout, ["src/app.py", *ODD_NAMES])
    tree_entries(layout, tree, ["src/app.py"])
    list_tree_files(layout, tree)
    blob_sha256(layout, [blob_oid(b"print('hi')\n")])
    gitlinks_and_nested(layout, ["src/app.py"])
    assert tree_digest(repo / ".git") == before


def test_shape_check_works_on_an_unborn_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "unborn")
    make_repo(repo, "inner")
    found = gitlinks_and_nested(discover(repo), ["a/b.txt", "inner/x"])
    assert found == {"inner/x": "'inner' is a nested repository (it holds a .git entry)"}
