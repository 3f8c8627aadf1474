"""The shadow tree of a worktree (protocol: snapshots#shadow-repository): right answer, exact bytes,
.git untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from promoter.errors import GitError
from promoter.git.readback import discover, list_tree_files
from promoter.git.records import EMPTY_TREE, DiffEntry
from promoter.git.worktree_tree import ShadowTree, worktree_tree
from tests.gitutil import blob_oid, commit_all, git, make_repo, tree_digest

CRLF = b"one\r\ntwo\r\nno newline at end\r"
BINARY = bytes(range(256)) + b"\r\n\x00\r\n" * 100


def _base_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = make_repo(tmp_path)
    files = {
        "keep.txt": b"keep\n",
        "mod.txt": b"before\n",
        "del.txt": b"to be deleted\n",
        "crlf.txt": CRLF,
        "bin.dat": BINARY,
        "exec.sh": b"#!/bin/sh\necho hi\n",
        "became": b"a file that becomes a directory\n",
        ".gitignore": b"*.o\nignored/\n",
        "deep/a/b/c.txt": b"deep\n",
    }
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    (repo / "build").mkdir()
    (repo / "build" / "keep.o").write_bytes(b"tracked although ignored\n")
    git(repo, "add", "-A")
    git(repo, "add", "-f", "build/keep.o")
    git(repo, "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD^{tree}")


def _change_worktree(repo: Path) -> None:
    (repo / "mod.txt").write_bytes(b"after, modified\n")
    (repo / "del.txt").unlink()
    (repo / "exec.sh").chmod(0o755)
    (repo / "build" / "keep.o").write_bytes(b"tracked and changed\n")
    (repo / "became").unlink()
    (repo / "became").mkdir()
    (repo / "became" / "inner.txt").write_bytes(b"inner\n")
    (repo / "new" / "dir").mkdir(parents=True)
    (repo / "new" / "dir" / "file.txt").write_bytes(b"brand new\r\n")
    (repo / "new" / "crlf-new.txt").write_bytes(CRLF + b"x")
    (repo / "sp ace*.txt").write_bytes(b"odd name\n")
    (repo / ":x").write_bytes(b"colon name\n")
    (repo / "new\nline").write_bytes(b"newline name\n")
    (repo / "café.txt").write_bytes(b"accent\n")
    (repo / "untracked.o").write_bytes(b"ignored by pattern\n")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "x").write_bytes(b"ignored directory\n")
    (repo / "secret.local").write_bytes(b"ignored by info/exclude\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_bytes(b"secret.local\n")
    (repo / "empty-dir").mkdir()
    (repo / "deep" / "a" / "b" / "c.txt").write_bytes(b"deep, changed\n")


def _reference_tree(repo: Path, tmp_path: Path, base_tree: str) -> str:
    """What plain git writes after read-tree + add -A, in a throw-away copy."""
    copy = tmp_path / "throwaway"
    shutil.copytree(repo, copy, symlinks=True)
    git(copy, "read-tree", base_tree)
    git(copy, "add", "-A")
    return git(copy, "write-tree")


def test_tree_equals_git_write_tree_in_a_throwaway_copy(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    _change_worktree(repo)
    expected = _reference_tree(repo, tmp_path, base)
    assert worktree_tree(discover(repo), base_tree=base) == expected
    files = {}
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        assert shadow.tree == expected
        files = list_tree_files(discover(repo), base)  # old tree still readable
    assert "build/keep.o" in files


def test_repository_git_dir_is_byte_identical_afterwards(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    _change_worktree(repo)
    git(repo, "gc", "-q")  # packed objects too, so both kinds are read through alternates
    (repo / "loose.txt").write_bytes(b"a loose object as well\n")
    git(repo, "add", "loose.txt")
    before = tree_digest(repo / ".git")
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        entries = shadow.diff()
        new_oids = [e.new_oid for e in entries if e.new_oid is not None]
        shadow.blob_sha256(new_oids)
        shadow.read_blob(blob_oid(b"keep\n"))
    worktree_tree(discover(repo))
    # Same names, kinds, modes, contents and modification times.
    assert tree_digest(repo / ".git") == before


def test_diff_lists_created_modified_deleted_and_mode_changes(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    _change_worktree(repo)
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        by_path = {entry.path: entry for entry in shadow.diff()}
    assert by_path["mod.txt"] == DiffEntry(
        "M", "mod.txt", "100644", "100644", blob_oid(b"before\n"), blob_oid(b"after, modified\n")
    )
    assert by_path["del.txt"] == DiffEntry(
        "D", "del.txt", "100644", None, blob_oid(b"to be deleted\n"), None
    )
    exec_oid = blob_oid(b"#!/bin/sh\necho hi\n")
    assert by_path["exec.sh"] == DiffEntry("M", "exec.sh", "100644", "100755", exec_oid, exec_oid)
    assert by_path["new/dir/file.txt"] == DiffEntry(
        "A", "new/dir/file.txt", None, "100644", None, blob_oid(b"brand new\r\n")
    )
    assert by_path["became"].status == "D"
    assert by_path["became/inner.txt"].status == "A"
    assert by_path["build/keep.o"].status == "M"  # tracked files stay tracked when ignored
    assert sorted(by_path) == sorted(
        [
            "mod.txt",
            "del.txt",
            "exec.sh",
            "build/keep.o",
            "became",
            "became/inner.txt",
            "new/dir/file.txt",
            "new/crlf-new.txt",
            "sp ace*.txt",
            ":x",
            "new\nline",
            "café.txt",
            "deep/a/b/c.txt",
        ]
    )


def test_new_blobs_stream_back_byte_for_byte(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    _change_worktree(repo)
    big = os.urandom(3 * 1024 * 1024)
    (repo / "big.bin").write_bytes(big)
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        by_path = {entry.path: entry for entry in shadow.diff()}
        big_oid = by_path["big.bin"].new_oid
        assert big_oid is not None
        assert b"".join(shadow.iter_blob(big_oid, 8192)) == big
        crlf_oid = by_path["new/crlf-new.txt"].new_oid
        assert crlf_oid is not None
        assert shadow.read_blob(crlf_oid) == CRLF + b"x"
        assert shadow.blob_sha256([big_oid, crlf_oid]) == {
            big_oid: (hashlib.sha256(big).hexdigest(), len(big)),
            crlf_oid: (hashlib.sha256(CRLF + b"x").hexdigest(), len(CRLF) + 1),
        }


def test_hostile_attributes_and_config_cannot_transform_bytes_or_run_filters(
    tmp_path: Path,
) -> None:
    repo, base = _base_repo(tmp_path)
    sentinel = tmp_path / "filter-ran"
    with (repo / ".git" / "config").open("a") as config:
        config.write(
            "[core]\n\tautocrlf = true\n\tsafecrlf = true\n"
            f'[filter "evil"]\n\tclean = "touch {sentinel}; tr a-z A-Z"\n\trequired = true\n'
        )
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_bytes(b"* filter=evil\n")
    (repo / ".gitattributes").write_bytes(
        b"* text eol=lf filter=evil ident\n*.u16 working-tree-encoding=UTF-16\n"
    )
    payloads = {
        "crlf.txt": CRLF,
        "id.txt": b"$Id: 0123456789abcdef $\r\n",
        "text.u16": b"\xff\xfeh\x00i\x00\r\x00\n\x00",
        "bin.dat": BINARY + b"lowercase",
    }
    for name, data in payloads.items():
        (repo / name).write_bytes(data)
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        by_path = {entry.path: entry for entry in shadow.diff()}
        for name, data in payloads.items():
            oid = by_path[name].new_oid if name in by_path else blob_oid(data)
            assert oid == blob_oid(data), name
            assert shadow.read_blob(oid) == data
    assert not sentinel.exists()


def test_symlinks_gitlinks_and_nested_repositories_are_reported(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    (repo / "link").symlink_to("keep.txt")
    (repo / "keep.txt").unlink()
    (repo / "keep.txt").symlink_to("mod.txt")  # a tracked file becomes a symlink
    make_repo(repo, "nest-empty")
    nested = make_repo(repo, "nest-commit")
    (nested / "f").write_bytes(b"f\n")
    commit_all(nested)
    (repo / "fake").mkdir()
    (repo / "fake" / ".git").write_bytes(b"not a repository\n")
    (repo / "fake" / "file.txt").write_bytes(b"inside a dir that holds .git\n")
    (repo / "fine.txt").write_bytes(b"fine\n")
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        assert sorted(shadow.nested_repositories) == ["nest-commit", "nest-empty"]
        by_path = {entry.path: entry for entry in shadow.diff()}
        assert by_path["keep.txt"].status == "T"
        assert by_path["link"].new_mode == "120000"
        assert shadow.read_blob(by_path["link"].new_oid or "") == b"keep.txt"
        assert shadow.unsupported() == {
            "fake/file.txt": "'fake' is a nested repository (it holds a .git entry)",
            "keep.txt": "the new state is a symbolic link",
            "link": "the new state is a symbolic link",
            "nest-commit": "an untracked nested repository (it holds a .git entry)",
            "nest-empty": "an untracked nested repository (it holds a .git entry)",
        }
        assert "fine.txt" in by_path


def test_tracked_gitlink_change_is_reported(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    sub = make_repo(repo, "sub")
    (sub / "f").write_bytes(b"1\n")
    first = commit_all(sub)
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{first},sub")
    git(repo, "commit", "-q", "-m", "gitlink")
    base = git(repo, "rev-parse", "HEAD^{tree}")
    (sub / "f").write_bytes(b"2\n")
    second = commit_all(sub)
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        assert shadow.diff() == [DiffEntry("M", "sub", "160000", "160000", first, second)]
        assert shadow.unsupported() == {"sub": "the new state is a gitlink (submodule)"}


def test_same_size_same_mtime_edit_is_still_seen(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    target = repo / "mod.txt"
    stat_before = target.stat()
    target.write_bytes(b"BEFORE\n")  # same length
    os.utime(target, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    with ShadowTree(discover(repo), base_tree=base) as shadow:
        assert [entry.path for entry in shadow.diff()] == ["mod.txt"]


def test_default_seed_is_head_and_unborn_starts_empty(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    (repo / "mod.txt").write_bytes(b"changed\n")
    with ShadowTree(discover(repo)) as shadow:
        assert shadow.base_tree == base
        assert [entry.path for entry in shadow.diff()] == ["mod.txt"]
        # Against the empty tree every file is a creation; the paths are the seed's.
        assert [entry.path for entry in shadow.diff(EMPTY_TREE)] == list(
            list_tree_files(discover(repo), base)
        )
    unborn = make_repo(tmp_path, "unborn")
    (unborn / "a.txt").write_bytes(b"a\n")
    (unborn / "b.o").write_bytes(b"b\n")
    (unborn / ".gitignore").write_bytes(b"*.o\n")
    with ShadowTree(discover(unborn)) as shadow:
        assert shadow.base_tree is None
        assert [(e.status, e.path) for e in shadow.diff()] == [("A", ".gitignore"), ("A", "a.txt")]
    assert worktree_tree(discover(unborn)) == _reference_tree(unborn, tmp_path, EMPTY_TREE)


def test_linked_worktree_reads_shared_objects(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "mod.txt").write_bytes(b"changed in the linked worktree\n")
    before = tree_digest(repo / ".git")
    with ShadowTree(discover(linked), base_tree=base) as shadow:
        assert [entry.path for entry in shadow.diff()] == ["mod.txt"]
        assert shadow.read_blob(blob_oid(b"keep\n")) == b"keep\n"
    assert tree_digest(repo / ".git") == before


def test_private_directory_is_removed_on_exit_and_on_error(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with ShadowTree(discover(repo), base_tree=base, tmpdir=str(scratch)):
        assert len(os.listdir(scratch)) == 1
    assert os.listdir(scratch) == []
    with pytest.raises(GitError):
        ShadowTree(discover(repo), base_tree="4" * 40, tmpdir=str(scratch)).__enter__()
    assert os.listdir(scratch) == []


def test_results_need_an_open_shadow(tmp_path: Path) -> None:
    repo, base = _base_repo(tmp_path)
    shadow = ShadowTree(discover(repo), base_tree=base)
    with pytest.raises(RuntimeError):
        _ = shadow.tree
    with pytest.raises(ValueError):
        ShadowTree(discover(repo), base_tree="HEAD")


def test_repository_path_with_colon_and_quote_still_reaches_its_objects(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, 'odd:"name\\x')
    (repo / "old.txt").write_bytes(b"old\n")
    commit_all(repo)
    (repo / "old.txt").write_bytes(b"new\n")
    with ShadowTree(discover(repo)) as shadow:
        [entry] = shadow.diff()
        assert entry.old_oid == blob_oid(b"old\n")
        assert shadow.read_blob(blob_oid(b"old\n")) == b"old\n"
