"""Symlinks as leaves (mode 120000) in the fs layer, and the attacks on them.

A link is written with ``symlinkat`` to its journaled temp name and put in place with the
same exchange/verify/swap-back as a file; it is read with ``readlinkat`` and never
followed, by any step. Every test checks that nothing outside the worktree changed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.path_state import MISSING, State
from promoter.domain.paths import temp_name
from promoter.engine.operation.apply import Applier
from promoter.errors import PathUnsafe, TargetDrift
from promoter.fs.root import Root
from tests.support.fsutil import made


def link(text: bytes) -> State:
    return State(True, hashlib.sha256(text).hexdigest(), "120000")


def regular(data: bytes) -> State:
    return State(True, hashlib.sha256(data).hexdigest(), "100644")


def tmp(seq: int) -> str:
    return temp_name("op_links", 1, seq)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    (path / "a").mkdir(parents=True)
    (path / "a" / "f.txt").write_bytes(b"file\n")
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = made(tmp_path / "outside")
    (path / "secret.txt").write_bytes(b"secret\n")
    return path


def outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"secret\n"


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_link_is_created_modified_turned_into_a_file_and_back_and_deleted(work: Path) -> None:
    with Root.open(work) as root:
        apply = Applier(root)
        apply.write(0, "a/l", MISSING, link(b"f.txt"), b"f.txt", tmp(0))
        assert os.readlink(work / "a/l") == "f.txt"
        state = root.read_state("a/l")
        assert (state.kind, state.mode, state.sha256) == (
            "symlink",
            "120000",
            link(b"f.txt").sha256,
        )
        apply.write(1, "a/l", link(b"f.txt"), link(b"../a/f.txt"), b"../a/f.txt", tmp(1))
        assert os.readlink(work / "a/l") == "../a/f.txt"
        apply.write(2, "a/f.txt", regular(b"file\n"), link(b"l"), b"l", tmp(2))
        assert os.readlink(work / "a/f.txt") == "l"
        apply.write(3, "a/f.txt", link(b"l"), regular(b"back\n"), b"back\n", tmp(3))
        assert not (work / "a/f.txt").is_symlink()
        assert (work / "a/f.txt").read_bytes() == b"back\n"
        apply.remove(4, "a/l", link(b"../a/f.txt"), tmp(4))
        apply.close()
    assert names(work / "a") == ["f.txt"]


def test_a_link_to_outside_is_written_as_text_and_never_followed(work: Path, outside: Path) -> None:
    target = os.fsencode(outside / "secret.txt")
    with Root.open(work) as root:
        apply = Applier(root)
        apply.write(0, "a/out", MISSING, link(target), target, tmp(0))
        assert root.read_state("a/out").sha256 == link(target).sha256
        apply.write(1, "a/out", link(target), link(b"f.txt"), b"f.txt", tmp(1))
        apply.remove(2, "a/out", link(b"f.txt"), tmp(2))
        apply.close()
    outside_untouched(outside)
    assert names(work / "a") == ["f.txt"]


@pytest.mark.parametrize(
    "target", [b"..", b"/etc", b"/proc/self/root", b"/proc/self/root/etc/passwd", b"x" * 4000]
)
def test_hostile_link_targets_are_only_ever_read_as_text(work: Path, target: bytes) -> None:
    os.symlink(target, work / "a" / "l")
    with Root.open(work) as root:
        found = root.read_state("a/l")
        assert (found.kind, found.sha256, found.size) == (
            "symlink",
            link(target).sha256,
            len(target),
        )
        apply = Applier(root)
        apply.write(0, "a/l", link(target), link(b"f.txt"), b"f.txt", tmp(0))
        apply.close()
    assert os.readlink(work / "a/l") == "f.txt"


def test_a_link_replaced_by_a_directory_mid_batch_is_refused_and_the_directory_kept(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.symlink("f.txt", work / "a" / "l")
    real = faults.point

    def swap(point: str) -> None:
        if point == "before_replace":
            os.unlink(work / "a" / "l")
            (work / "a" / "l").mkdir()
            (work / "a" / "l" / "user.txt").write_bytes(b"the user's\n")
        real(point)

    with Root.open(work) as root:
        apply = Applier(root)
        apply.stage(0, "a/l", link(b"g.txt"), b"g.txt", tmp(0))
        apply.stage(1, "a/m", link(b"f.txt"), b"f.txt", tmp(1))
        apply.place(1, MISSING, link(b"f.txt"))
        monkeypatch.setattr(faults, "point", swap)
        with pytest.raises(PathUnsafe, match="displaced"):  # exchanged, found, swapped back
            apply.place(0, link(b"f.txt"), link(b"g.txt"))
        apply.close()
    assert (work / "a" / "l" / "user.txt").read_bytes() == b"the user's\n"
    assert names(work / "a") == ["f.txt", "l", "m"]


def test_a_link_swapped_for_another_link_after_the_check_is_swapped_back(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.symlink("f.txt", work / "a" / "l")
    real = faults.point

    def retarget(point: str) -> None:
        if point == "before_replace":
            os.unlink(work / "a" / "l")
            os.symlink("the-users-target", work / "a" / "l")
        real(point)

    monkeypatch.setattr(faults, "point", retarget)
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(TargetDrift):
            apply.write(0, "a/l", link(b"f.txt"), link(b"g.txt"), b"g.txt", tmp(0))
        apply.close()
    assert os.readlink(work / "a/l") == "the-users-target"
    assert names(work / "a") == ["f.txt", "l"]


def test_a_link_whose_parent_is_a_link_is_never_written_through(work: Path, outside: Path) -> None:
    os.symlink(outside, work / "via")
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(PathUnsafe):
            apply.write(0, "via/l", MISSING, link(b"secret.txt"), b"secret.txt", tmp(0))
        with pytest.raises(PathUnsafe):
            apply.remove(1, "via/secret.txt", regular(b"secret\n"), tmp(1))
        apply.close()
    outside_untouched(outside)


def test_deleting_a_link_whose_target_changed_leaves_it(work: Path) -> None:
    os.symlink("now-elsewhere", work / "a" / "l")
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(TargetDrift):
            apply.remove(0, "a/l", link(b"f.txt"), tmp(0))
        apply.close()
    assert os.readlink(work / "a/l") == "now-elsewhere"
    assert names(work / "a") == ["f.txt", "l"]


def test_a_hard_linked_symlink_is_never_deleted(work: Path) -> None:
    os.symlink("f.txt", work / "a" / "l")
    os.link(work / "a" / "l", work / "a" / "l2", follow_symlinks=False)
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(PathUnsafe):
            apply.remove(0, "a/l", link(b"f.txt"), tmp(0))
        apply.close()
    assert os.readlink(work / "a/l") == "f.txt"


def test_a_file_where_a_link_was_expected_is_drift_and_kept(work: Path) -> None:
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(TargetDrift):
            apply.write(0, "a/f.txt", link(b"x"), link(b"y"), b"y", tmp(0))
        apply.close()
    assert (work / "a/f.txt").read_bytes() == b"file\n"
    assert names(work / "a") == ["f.txt"]


def test_a_link_where_a_file_was_expected_is_unsafe_and_kept(work: Path, outside: Path) -> None:
    os.unlink(work / "a" / "f.txt")
    os.symlink(outside / "secret.txt", work / "a" / "f.txt")
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(PathUnsafe):
            apply.write(0, "a/f.txt", regular(b"file\n"), regular(b"x\n"), b"x\n", tmp(0))
        apply.close()
    assert os.readlink(work / "a/f.txt") == str(outside / "secret.txt")
    outside_untouched(outside)


def test_someone_elses_link_at_the_temp_name_is_left_and_not_followed(
    work: Path, outside: Path
) -> None:
    os.symlink(outside / "secret.txt", work / "a" / tmp(0))
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(PathUnsafe):
            apply.write(0, "a/l", MISSING, link(b"f.txt"), b"f.txt", tmp(0))
        apply.close()
    assert os.readlink(work / "a" / tmp(0)) == str(outside / "secret.txt")
    assert not os.path.lexists(work / "a" / "l")
    outside_untouched(outside)


@pytest.mark.parametrize("target", [b"", b"a\x00b"])
def test_an_empty_or_nul_target_is_refused_before_anything_is_made(
    work: Path, target: bytes
) -> None:
    with Root.open(work) as root:
        apply = Applier(root)
        with pytest.raises(PathUnsafe):
            apply.write(0, "a/l", MISSING, link(target), target, tmp(0))
        apply.close()
    assert names(work / "a") == ["f.txt"]
