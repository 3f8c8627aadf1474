"""One held directory per pass (``promoter.fs.held``, through the applier): shared, and
still refused the moment it is moved, swapped, turned into a symlink, mounted over or
made a nested repository (TESTS.md P1, P2, P6 on the held path).

The walks are counted by the root's own counters (``Root.walks``: chains walked from the
root; ``Root.rewalks``: full re-walks of ``verify_chain``), on real directories.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from promoter.domain.path_state import MISSING, State
from promoter.domain.paths import temp_name
from promoter.engine.operation.apply import Applier
from promoter.errors import PathUnsafe, PromoterError, TargetDrift
from promoter.fs import syscalls
from promoter.fs.held import HeldDir
from promoter.fs.leaf import TEMP_PREFIX
from promoter.fs.root import Root
from tests.support.fsutil import snapshot
from tests.support.mounts import bind_mount


def new(data: bytes) -> State:
    return State(True, hashlib.sha256(data).hexdigest(), "100644")


def tmp(seq: int) -> str:
    return temp_name("op_held", 1, seq)


@pytest.fixture
def apply(root: Root) -> Iterator[Applier]:
    applier = Applier(root)
    try:
        yield applier
    finally:
        applier.close()


def _no_temps(work: Path) -> None:
    assert not list(work.rglob(f"{TEMP_PREFIX}*"))


def test_steps_in_one_directory_share_one_walk_and_one_descriptor(root: Root, work: Path) -> None:
    (work / "pkg/sub").mkdir(parents=True)
    names = ["a.txt", "b.txt", "c.txt", "d.txt"]
    applier = Applier(root)
    try:
        for seq, name in enumerate(names):
            data = name.encode()
            applier.stage(seq, f"pkg/sub/{name}", new(data), data, tmp(seq))
        for seq, name in enumerate(names):
            applier.place(seq, MISSING, new(name.encode()))
        applier.fsync()
        assert root.walks == 1  # one chain walked, not one per step (or per check)
        assert root.rewalks == 0  # every before/after check was the per-component one
        assert len({applier.parents[seq].fd for seq in range(len(names))}) == 1
        assert len(applier.directories) == 1
        held = applier.parents[0].held
        assert held is not None and held.fd >= 0
    finally:
        applier.close()
    assert held.fd == -1  # closed once, by the pass
    assert all(parent.fd == -1 for parent in applier.parents.values())
    for name in names:
        assert (work / "pkg/sub" / name).read_bytes() == name.encode()
    _no_temps(work)


def test_each_directory_is_walked_once_and_new_directories_are_recorded(
    root: Root, work: Path, apply: Applier
) -> None:
    paths = ["x/1.txt", "x/2.txt", "y/z/1.txt", "y/z/2.txt", "top.txt"]
    for seq, path in enumerate(paths):
        apply.stage(seq, path, new(path.encode()), path.encode(), tmp(seq))
    for seq, path in enumerate(paths):
        apply.place(seq, MISSING, new(path.encode()))
    assert root.walks == 3
    assert apply.created_dirs == ["x", "y", "y/z"]
    for path in paths:
        assert (work / path).read_bytes() == path.encode()


def test_remove_reuses_the_directory_a_write_opened(root: Root, work: Path, apply: Applier) -> None:
    (work / "d").mkdir()
    (work / "d/old.txt").write_bytes(b"old")
    apply.stage(0, "d/new.txt", new(b"n"), b"n", tmp(0))
    apply.place(0, MISSING, new(b"n"))
    assert apply.remove(1, "d/old.txt", new(b"old"), tmp(1))
    assert root.walks == 1
    assert sorted(os.listdir(work / "d")) == ["new.txt"]


def test_held_directory_swapped_between_steps_is_refused_and_not_reused(
    root: Root, work: Path, apply: Applier
) -> None:
    (work / "a").mkdir()
    (work / "b").mkdir()
    (work / "a/f.txt").write_bytes(b"old")
    apply.stage(0, "a/f.txt", new(b"new"), b"new", tmp(0))
    syscalls.renameat2(root.fd, "a", root.fd, "b", syscalls.RENAME_EXCHANGE)
    before = {k: v for k, v in snapshot(work).items() if TEMP_PREFIX not in k}
    with pytest.raises(PromoterError) as info:
        apply.place(0, new(b"old"), new(b"new"))
    assert info.value.code == "path_unsafe"
    assert root.rewalks >= 1  # the per-component check saw it; the re-walk named it
    # a later step in the same directory walks afresh, as every step did before
    apply.stage(1, "a/g.txt", new(b"g"), b"g", tmp(1))
    assert root.walks == 2
    assert (work / "b/f.txt").read_bytes() == b"old"
    assert {k: v for k, v in snapshot(work).items() if TEMP_PREFIX not in k} == before


def test_held_directory_replaced_by_symlink_is_refused(
    root: Root, work: Path, outside: Path, apply: Applier
) -> None:
    (work / "a").mkdir()
    (work / "a/f.txt").write_bytes(b"old")
    apply.stage(0, "a/f.txt", new(b"new"), b"new", tmp(0))
    os.rename(work / "a", work / "a.moved")
    os.symlink(outside, work / "a")
    with pytest.raises(PathUnsafe):
        apply.place(0, new(b"old"), new(b"new"))
    with pytest.raises(PathUnsafe):
        apply.stage(1, "a/f.txt", new(b"x"), b"x", tmp(1))
    assert (outside / "f.txt").read_bytes() == b"outside original"
    assert sorted(os.listdir(outside)) == ["f.txt", "g.txt"]
    assert (work / "a.moved/f.txt").read_bytes() == b"old"


def test_held_intermediate_directory_moved_out_of_root_is_refused(
    root: Root, work: Path, tmp_path: Path, apply: Applier
) -> None:
    (work / "a/b").mkdir(parents=True)
    (work / "a/b/f.txt").write_bytes(b"old")
    apply.stage(0, "a/b/f.txt", new(b"new"), b"new", tmp(0))
    os.rename(work / "a", tmp_path / "elsewhere")
    with pytest.raises(PathUnsafe):
        apply.place(0, new(b"old"), new(b"new"))
    with pytest.raises(TargetDrift) as info:  # a fresh walk finds no "a", as before
        apply.remove(1, "a/b/f.txt", new(b"old"), tmp(1))
    assert info.value.context["found"] == "missing_parent"
    assert (tmp_path / "elsewhere/b/f.txt").read_bytes() == b"old"


def test_nested_repository_appearing_in_a_held_directory_is_refused(
    root: Root, work: Path, apply: Applier
) -> None:
    (work / "a").mkdir()
    apply.stage(0, "a/one.txt", new(b"1"), b"1", tmp(0))
    (work / "a/.git").mkdir()
    with pytest.raises(PathUnsafe) as info:
        apply.stage(1, "a/two.txt", new(b"2"), b"2", tmp(1))
    assert "nested repository" in info.value.detail
    assert not (work / "a/two.txt").exists()


def test_bind_mount_over_a_held_directory_is_refused(
    root: Root, work: Path, outside: Path, apply: Applier
) -> None:
    (work / "a").mkdir()
    (work / "a/f.txt").write_bytes(b"old")
    apply.stage(0, "a/f.txt", new(b"new"), b"new", tmp(0))
    with bind_mount(outside, work / "a"):
        with pytest.raises(PathUnsafe):
            apply.place(0, new(b"old"), new(b"new"))
        with pytest.raises(PathUnsafe):
            apply.stage(1, "a/g.txt", new(b"g"), b"g", tmp(1))
        assert sorted(os.listdir(outside)) == ["f.txt", "g.txt"]
    assert (work / "a/f.txt").read_bytes() == b"old"


def test_bind_mount_of_a_held_directory_onto_itself_is_refused(
    root: Root, work: Path, apply: Applier
) -> None:
    """Same device and inode at the name: only the mount id tells it apart."""
    (work / "a").mkdir()
    (work / "a/f.txt").write_bytes(b"old")
    apply.stage(0, "a/f.txt", new(b"new"), b"new", tmp(0))
    if root.mnt_id is None:
        pytest.skip("this process cannot read mount ids")
    with bind_mount(work / "a", work / "a"), pytest.raises(PathUnsafe):
        apply.place(0, new(b"old"), new(b"new"))
    assert (work / "a/f.txt").read_bytes() == b"old"


def test_a_reused_directory_is_checked_once_before_a_write_and_once_after(
    root: Root, work: Path, apply: Applier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reusing the held directory re-checks its chain; the write that follows at once uses
    that check, and the check after the write still runs."""
    (work / "a").mkdir()
    apply.stage(0, "a/f.txt", new(b"f"), b"f", tmp(0))
    checks: list[int] = []
    original = HeldDir.still_in_place

    def counted(self: HeldDir) -> bool:
        checks.append(1)
        return original(self)

    monkeypatch.setattr(HeldDir, "still_in_place", counted)
    apply.stage(1, "a/g.txt", new(b"g"), b"g", tmp(1))
    assert len(checks) == 2  # the reuse (before the write) and after the write
    assert not apply.parents[1].checked_at_open  # good for one call only
    checks.clear()
    apply.place(1, MISSING, new(b"g"))
    assert len(checks) == 2  # a later call on the same view checks before and after
    assert (work / "a/g.txt").read_bytes() == b"g"


def test_the_umask_is_read_once_per_pass(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []

    def umask() -> int:
        reads.append(1)
        return 0o027

    monkeypatch.setattr("promoter.engine.operation.apply.current_umask", umask)
    monkeypatch.setattr("promoter.fs.temps.current_umask", umask)
    applier = Applier(root)
    try:
        for seq in range(3):
            applier.write(seq, f"n{seq}.txt", MISSING, new(b"x"), b"x", tmp(seq))
    finally:
        applier.close()
    assert reads == [1]
    assert [(work / f"n{seq}.txt").stat().st_mode & 0o777 for seq in range(3)] == [0o640] * 3
