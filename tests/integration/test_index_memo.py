"""Index answers are remembered only while the index file is provably the same one.

``promoter.git.index_memo`` names an index version by its inode, size, times and the
checksum git writes at its end. These cases change the index in every way that must be
noticed (git's own rename, an in-place rewrite with the times put back, a file with no
checksum) and assert the look-up reads git's answer again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.git import index_memo, readback, runner
from promoter.git.layout import discover
from tests.gitutil import git

pytestmark = pytest.mark.repo(files={"a.txt": b"a\n", "tool.sh": b"#!/bin/sh\n"}, message="base")


def _ls_files(repo: Path, paths: list[str]) -> tuple[dict[str, list[readback.IndexEntry]], int]:
    with runner.counting() as started:
        answer = readback.index_entries(discover(repo), paths)
    return answer, started.count("ls-files")


def test_the_same_index_is_not_read_twice(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readback, "WHOLE_LISTING_PER_PATH", 0)  # asked path by path
    monkeypatch.setattr(readback, "WHOLE_LISTING_REMEMBERED", 0)
    first, asked = _ls_files(repo, ["a.txt", "tool.sh"])
    assert asked == 1
    again, asked = _ls_files(repo, ["tool.sh", "a.txt"])
    assert (again, asked) == (first, 0)
    partly, asked = _ls_files(repo, ["a.txt", "missing.txt"])
    assert asked == 1 and partly["missing.txt"] == [] and partly["a.txt"] == first["a.txt"]


def test_an_index_listed_whole_answers_a_new_path_without_git(repo: Path) -> None:
    """A small index is listed whole once: a path asked later under the same file, in it
    or not, is answered from that listing; after git rewrites the index it is read again."""
    first, asked = _ls_files(repo, ["a.txt"])
    assert asked == 1
    later, asked = _ls_files(repo, ["tool.sh", "new/made.txt", "new"])
    assert asked == 0
    assert later["tool.sh"][0].mode == "100644"
    assert later["new/made.txt"] == later["new"] == []
    (repo / "new").mkdir()
    (repo / "new" / "made.txt").write_bytes(b"made\n")
    git(repo, "add", "new/made.txt")
    after, asked = _ls_files(repo, ["new/made.txt", "new", "a.txt"])
    assert asked == 1
    assert after["new/made.txt"][0].mode == "100644" and after["new"] == []
    assert after["a.txt"] == first["a.txt"]


def test_an_index_git_rewrote_is_read_again(repo: Path) -> None:
    before, _ = _ls_files(repo, ["tool.sh"])
    git(repo, "update-index", "--chmod=+x", "tool.sh")
    after, asked = _ls_files(repo, ["tool.sh"])
    assert asked == 1
    assert (before["tool.sh"][0].mode, after["tool.sh"][0].mode) == ("100644", "100755")


def test_an_index_rewritten_in_place_with_its_times_put_back_is_read_again(repo: Path) -> None:
    index = repo / ".git" / "index"
    git(repo, "update-index", "--chmod=+x", "tool.sh")
    changed = index.read_bytes()
    git(repo, "update-index", "--chmod=-x", "tool.sh")
    assert len(index.read_bytes()) == len(changed)  # only a mode differs: the same size
    before, _ = _ls_files(repo, ["tool.sh"])
    st = index.stat()
    with open(index, "r+b") as handle:  # the same inode, the same size, other bytes
        handle.write(changed)
    os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns))
    after, asked = _ls_files(repo, ["tool.sh"])
    assert asked == 1
    assert (before["tool.sh"][0].mode, after["tool.sh"][0].mode) == ("100644", "100755")


def test_an_index_without_a_checksum_has_no_identity(repo: Path, tmp_path: Path) -> None:
    layout = discover(repo)
    assert index_memo.identity(layout) is not None
    index = repo / ".git" / "index"
    data = index.read_bytes()
    index.write_bytes(data[:-20] + b"\0" * 20)  # what index.skipHash writes
    assert index_memo.identity(layout) is None
    index.unlink()
    assert index_memo.identity(layout) is None
    index.symlink_to(tmp_path / "elsewhere")
    assert index_memo.identity(layout) is None
