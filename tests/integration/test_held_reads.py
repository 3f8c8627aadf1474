"""Reading many targets through held directories (``Directories.read_state``), and the
one-``statx`` identity check a held directory is re-verified with (``promoter.fs.held``).

Each read answers what ``Root.read_state`` answers, walks each directory once, and still
refuses (or walks afresh) the moment a held directory is swapped, moved, made a nested
repository or mounted over; both ways of re-checking a component are exercised (one
``statx``, or a ``stat`` and a mount id read).
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.fs import syscalls
from promoter.fs.chain import LeafState, ParentChain
from promoter.fs.held import Directories, HeldDir
from promoter.fs.root import Root
from tests.support.mounts import bind_mount

CHECKS = ["statx", "stat"]


@pytest.fixture(params=CHECKS)
def check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    which: str = request.param
    if which == "statx" and not syscalls.identity_by_statx():
        pytest.skip("this kernel's statx gives no mount ids")
    if which == "stat":
        monkeypatch.setattr(syscalls, "identity_by_statx", lambda: False)
    return which


@pytest.fixture
def reads(root: Root, check: str) -> Iterator[Directories]:
    directories = Directories(root)
    try:
        yield directories
    finally:
        directories.close()


def _tree(work: Path) -> None:
    (work / "a/b").mkdir(parents=True)
    (work / "c").mkdir()
    for rel in ("top.txt", "a/one.txt", "a/b/two.txt", "a/b/three.txt", "c/four.txt"):
        (work / rel).write_bytes(rel.encode())
    (work / "a/b/link").symlink_to("two.txt")
    (work / "a/b/exec.sh").write_bytes(b"#!/bin/sh\n")
    (work / "a/b/exec.sh").chmod(0o755)


PATHS = [
    "top.txt",
    "a/one.txt",
    "a/b/two.txt",
    "a/b/three.txt",
    "a/b/link",
    "a/b/exec.sh",
    "a/b/missing.txt",
    "c/four.txt",
    "gone/deeper/x.txt",
    "a/b",
]


def test_statx_identity_agrees_with_stat_and_mount_ids(work: Path) -> None:
    if not syscalls.identity_by_statx():
        pytest.skip("this kernel's statx gives no mount ids")
    _tree(work)
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in ("a", "a/b", "a/b/two.txt", "a/b/link"):
            st = os.stat(rel, dir_fd=fd, follow_symlinks=False)
            found = syscalls.statx_identity(fd, os.fsencode(rel))
            assert found == (st.st_dev, st.st_ino, syscalls.mount_id(fd, rel))
        with pytest.raises(FileNotFoundError):
            syscalls.statx_identity(fd, b"a/nothing")
        assert syscalls.entry_errno(fd, b"a/b/link") == 0
        assert syscalls.entry_errno(fd, b"a/nothing") == errno.ENOENT
        assert syscalls.entry_errno(fd, b"top.txt/.git") == errno.ENOTDIR
    finally:
        os.close(fd)


def test_each_read_answers_as_a_fresh_read_and_walks_each_directory_once(
    root: Root, work: Path, reads: Directories
) -> None:
    _tree(work)
    fresh = [root.read_state(rel) for rel in PATHS]
    walks, rewalks = root.walks, root.rewalks
    assert [reads.read_state(rel) for rel in PATHS] == fresh
    assert [reads.read_state(rel) for rel in PATHS] == fresh
    # root, a, a/b, c held once each; the missing directory is walked on every read
    assert root.walks - walks == 4 + 2
    assert root.rewalks == rewalks  # every check after reading was the per-component one
    assert len(reads) == 4


def test_a_swapped_held_directory_is_read_afresh(
    root: Root, work: Path, reads: Directories
) -> None:
    _tree(work)
    (work / "z").mkdir()
    (work / "z/one.txt").write_bytes(b"in z")
    before = reads.read_state("a/one.txt")
    syscalls.renameat2(root.fd, "a", root.fd, "z", syscalls.RENAME_EXCHANGE)
    after = reads.read_state("a/one.txt")
    assert after == root.read_state("a/one.txt") != before
    assert after.sha256 is not None and (work / "a/one.txt").read_bytes() == b"in z"


def test_a_held_directory_moved_away_reads_as_missing(
    root: Root, work: Path, tmp_path: Path, reads: Directories
) -> None:
    _tree(work)
    assert reads.read_state("a/b/two.txt").kind == "file"
    os.rename(work / "a", tmp_path / "elsewhere")
    assert reads.read_state("a/b/two.txt").kind == "missing"


def test_a_held_directory_replaced_by_a_symlink_is_refused(
    root: Root, work: Path, outside: Path, reads: Directories
) -> None:
    _tree(work)
    assert reads.read_state("c/four.txt").kind == "file"
    os.rename(work / "c", work / "c.moved")
    os.symlink(outside, work / "c")
    with pytest.raises(PathUnsafe):
        reads.read_state("c/f.txt")


def test_a_nested_repository_appearing_in_a_held_directory_is_refused(
    root: Root, work: Path, reads: Directories
) -> None:
    _tree(work)
    assert reads.read_state("a/b/two.txt").kind == "file"
    (work / "a/.git").mkdir()
    with pytest.raises(PathUnsafe) as info:
        reads.read_state("a/b/three.txt")
    assert "nested repository" in info.value.detail
    assert info.value.context["at"] == "a"


def test_a_bind_mount_over_a_held_directory_is_refused(
    root: Root, work: Path, outside: Path, reads: Directories
) -> None:
    _tree(work)
    assert reads.read_state("c/four.txt").kind == "file"
    with bind_mount(outside, work / "c"), pytest.raises(PathUnsafe):
        reads.read_state("c/f.txt")


def test_a_bind_mount_of_a_held_directory_onto_itself_is_refused(
    root: Root, work: Path, reads: Directories
) -> None:
    """Same device and inode at the name: only the mount id tells it apart."""
    if root.mnt_id is None:
        pytest.skip("this process cannot read mount ids")
    _tree(work)
    assert reads.read_state("c/four.txt").kind == "file"
    with bind_mount(work / "c", work / "c"), pytest.raises(PathUnsafe):
        reads.read_state("c/four.txt")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_reading_pass_holds_a_bounded_number_of_directories(root: Root, work: Path) -> None:
    rels = [f"d{n}/sub/f.txt" for n in range(6)]
    for rel in rels:
        (work / rel).parent.mkdir(parents=True)
        (work / rel).write_bytes(rel.encode())
    fresh = [root.read_state(rel) for rel in rels]
    before = _open_fds()
    directories = Directories(root, hold_at_most=2)
    try:
        for _ in range(2):
            for rel in rels:
                assert directories.read_state(rel) == fresh[rels.index(rel)]
                assert len(directories) <= 2
                assert _open_fds() - before <= 2
    finally:
        directories.close()
    assert _open_fds() == before
    assert Directories.for_reads(root).hold_at_most is not None


def test_a_swapped_directory_in_a_reading_pass_is_closed_when_walked_afresh(
    root: Root, work: Path, reads: Directories
) -> None:
    _tree(work)
    (work / "z").mkdir()
    (work / "z/one.txt").write_bytes(b"in z")
    reads.read_state("a/one.txt")
    before = _open_fds()
    syscalls.renameat2(root.fd, "a", root.fd, "z", syscalls.RENAME_EXCHANGE)
    reads.read_state("a/one.txt")
    assert _open_fds() == before  # the replaced one was closed, the fresh one is held


def _counting(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[str]:
    """Count calls of ``cls.name`` (the original still runs)."""
    calls: list[str] = []
    original = getattr(cls, name)

    def counted(self: object, *args: object) -> object:
        calls.append(name)
        return original(self, *args)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_reads_in_one_call_answer_as_single_reads(
    root: Root, work: Path, reads: Directories
) -> None:
    _tree(work)
    fresh = [root.read_state(rel) for rel in PATHS]
    assert reads.read_states(PATHS) == fresh
    assert reads.read_states(PATHS) == fresh


def test_reads_in_one_call_check_each_chain_once_between_two_reads(
    root: Root, work: Path, reads: Directories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two reads of one call in one directory nothing is done: the check after the
    first read is the check before the second. The nested-repository check still runs
    for every read."""
    _tree(work)
    rels = ["a/b/two.txt", "a/b/three.txt", "a/b/exec.sh", "a/b/link"]
    reads.read_states(rels)  # every directory held
    checks = _counting(monkeypatch, HeldDir, "still_in_place")
    nested = _counting(monkeypatch, HeldDir, "refuse_nested_repository")
    reads.read_states(rels)
    assert len(checks) == len(rels) + 1  # one before the first read, one after each
    assert len(nested) == len(rels)
    checks.clear()
    for rel in rels:
        reads.read_state(rel)
    assert len(checks) == 2 * len(rels)  # single reads check before and after each


def test_a_nested_repository_appearing_during_a_read_of_one_call_is_refused_for_the_next(
    root: Root, work: Path, reads: Directories, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(work)
    original = ParentChain.leaf_state

    def then_a_repository(self: ParentChain) -> LeafState:
        state = original(self)
        if self.rel == "a/b/two.txt":
            (work / "a/.git").mkdir(exist_ok=True)
        return state

    monkeypatch.setattr(ParentChain, "leaf_state", then_a_repository)
    first, second = reads.read_states(["a/b/two.txt", "a/b/three.txt"])
    assert isinstance(first, LeafState) and first.kind == "file"
    assert isinstance(second, PathUnsafe)
    assert "nested repository" in second.detail and second.context["at"] == "a"


def test_a_directory_swapped_during_a_read_of_one_call_is_refused_in_that_paths_place(
    root: Root, work: Path, reads: Directories, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(work)
    (work / "z").mkdir()
    (work / "z/four.txt").write_bytes(b"in z")
    original = ParentChain.leaf_state
    swaps: list[str] = []

    def then_swapped(self: ParentChain) -> LeafState:
        state = original(self)
        if not swaps:
            swaps.append(self.rel)
            syscalls.renameat2(root.fd, "c", root.fd, "z", syscalls.RENAME_EXCHANGE)
        return state

    reads.read_state("c/four.txt")  # held
    monkeypatch.setattr(ParentChain, "leaf_state", then_swapped)
    swapped, after = reads.read_states(["c/four.txt", "c/four.txt"])
    assert swaps == ["c/four.txt"]
    assert isinstance(swapped, PathUnsafe)  # the check after reading saw it
    assert isinstance(after, LeafState)
    assert after == root.read_state("c/four.txt")  # the next read walked afresh
    assert (work / "c/four.txt").read_bytes() == b"in z"


@pytest.mark.parametrize("mode", [0o555, 0o500])
def test_a_directory_its_owner_made_read_only_is_read_under(
    reads: Directories, work: Path, mode: int
) -> None:
    """A directory its owner can read and search but not write (``chmod a-w``, a
    vendored tree) is not closed to them: a file under it reads as it is (an operation's
    current targets, a recovery's read pass), never ``path_unsafe``."""
    _tree(work)
    (work / "a").chmod(mode)
    try:
        found = reads.read_states(["a/one.txt", "a/b/two.txt"])
    finally:
        (work / "a").chmod(0o755)
    assert [type(leaf) for leaf in found] == [LeafState, LeafState], found


@pytest.mark.parametrize("mode", [0o000, 0o300, 0o600, 0o070])
def test_a_directory_closed_to_its_owner_is_refused_naming_it(
    reads: Directories, work: Path, mode: int
) -> None:
    """One its owner cannot read or search is ``path_unsafe``, naming it (its path from
    the worktree, not the target's) and its mode."""
    _tree(work)
    (work / "a/b").chmod(mode)
    try:
        (found,) = reads.read_states(["a/b/two.txt"])
    finally:
        (work / "a/b").chmod(0o755)
    assert isinstance(found, PathUnsafe), found
    assert found.context["at"] == "a/b" and found.context["mode"] == f"{mode:03o}"
    assert "the directory 'a/b' is closed to its owner" in found.detail


def test_the_command_reopening_a_closed_directory_works_from_anywhere(
    reads: Directories, work: Path, tmp_path: Path
) -> None:
    """The ``chmod`` a refusal of a directory closed to its owner names is run as printed
    from a directory that is not the worktree's root (the person's shell anywhere): it
    reopens that very directory, and the file under it then reads."""
    _tree(work)
    (work / "a/b").chmod(0o000)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "a/b").mkdir(parents=True)  # a same-named directory where the shell is
    try:
        (found,) = reads.read_states(["a/b/two.txt"])
        assert isinstance(found, PathUnsafe), found
        assert found.context == {"path": "a/b/two.txt", "at": "a/b", "mode": "000"}
        printed = re.search(r"next: open it again \((chmod [^)]*)\)", found.detail)
        assert printed is not None, found.detail
        subprocess.run(["sh", "-c", printed[1]], cwd=elsewhere, check=True)
        assert (work / "a/b").stat().st_mode & 0o700 == 0o700
    finally:
        (work / "a/b").chmod(0o755)
    (again,) = reads.read_states(["a/b/two.txt"])
    assert isinstance(again, LeafState), again
