"""The before/after fingerprint of a tree (``promoter.fs.walk``), on real directories.

Named after what a check could do to hide a change: rewrite a file with the same size
inside one timestamp tick, swap a file by rename, retarget a symlink, touch a file, or
create and remove a file again (no net change, and no report).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from promoter.fs.walk import Difference, Entry, Tree, compare, hashed, walk


def _again(root: Path, before: Tree) -> Tree:
    """The second walk, as ``compare`` requires it."""
    return walk(str(root), hash_paths=hashed(before), racy_window_ns=None)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.txt").write_bytes(b"aaaa\n")
    (root / "b.txt").write_bytes(b"bbbb\n")
    return root


def test_nothing_changed_is_no_difference(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = walk(str(root))
    assert sorted(before) == ["b.txt", "src", "src/a.txt"]
    assert compare(before, _again(root, before)) == []


def test_files_in_the_racy_window_are_hashed_and_old_ones_are_not(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    old = 1_000_000_000_000_000_000
    os.utime(root / "b.txt", ns=(old, old))
    tree = walk(str(root), racy_window_ns=10**18)  # ctime is now: everything is racy
    assert tree["b.txt"].sha256 is not None
    tree = walk(str(root), racy_window_ns=None)
    assert hashed(tree) == set()


def test_same_size_rewrite_with_unchanged_stat_is_found_by_content() -> None:
    # A rewrite inside one timestamp tick keeps size, both times and the inode: only
    # the content hash of a racy file tells it apart.
    entry = Entry("file", 0o100644, 5, 10, 10, 1, 2, sha256="a" * 64)
    assert compare({"f": entry}, {"f": replace(entry, sha256="b" * 64)}) == [
        Difference("f", "modified", ("sha256",))
    ]


def test_file_swapped_by_rename_is_modified(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = walk(str(root))
    (root / "src" / "tmp").write_bytes(b"aaaa\n")
    os.rename(root / "src" / "tmp", root / "src" / "a.txt")
    (difference,) = compare(before, _again(root, before))
    assert (difference.path, difference.change) == ("src/a.txt", "modified")
    assert "ino" in difference.fields


def test_touch_is_a_modification(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    os.utime(root / "b.txt", ns=(1_000_000_000, 1_000_000_000))
    before = walk(str(root))
    os.utime(root / "b.txt")
    (difference,) = compare(before, _again(root, before))
    assert (difference.path, difference.change) == ("b.txt", "modified")
    assert "mtime_ns" in difference.fields


def test_symlink_is_recorded_not_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    os.symlink(outside, root / "link")
    before = walk(str(root))
    assert "link/secret" not in before
    assert before["link"].kind == "symlink" and before["link"].link == str(outside)
    os.unlink(root / "link")
    os.symlink(root / "src", root / "link")
    (difference,) = compare(before, _again(root, before))
    assert (difference.path, difference.change) == ("link", "modified")
    assert "link" in difference.fields


def test_created_then_removed_is_no_difference_and_directory_times_are_ignored(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    before = walk(str(root))
    (root / "src" / "scratch").write_bytes(b"x")
    (root / "src" / "scratch").unlink()
    assert compare(before, _again(root, before)) == []


def test_pruned_directory_is_recorded_not_entered(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    tree = walk(str(root), prune=lambda rel: rel.rsplit("/", 1)[-1] == ".git")
    assert ".git" in tree and not tree[".git"].entered
    assert ".git/HEAD" not in tree
