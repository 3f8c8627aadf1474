"""Races against the fs layer (TESTS.md P1, P2, P3, P6, P12): things that change under it."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.paths import temp_name
from promoter.errors import PathUnsafe, PromoterError, TargetDrift, WriteFailed
from promoter.fs import syscalls
from promoter.fs.chain import ExpectedState
from promoter.fs.leaf import TEMP_PREFIX
from promoter.fs.root import Root
from tests.support.fsutil import delete, snapshot, state, write

MISSING = ExpectedState(False, None, None)

TMP = temp_name("op_test", 1, 0)


def hook_fault(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], object]) -> None:
    real = faults.point

    def hooked(point: str) -> None:
        if point == name:
            action()
        real(point)

    monkeypatch.setattr(faults, "point", hooked)


# -- P1 ------------------------------------------------------------------------------


@pytest.mark.parametrize("rename", ["exchange", "plain-rename"])
def test_parent_flipping_between_dir_and_symlink_never_writes_outside(
    root: Root, work: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, rename: str
) -> None:
    if rename == "plain-rename":

        def unsupported(*args: object) -> None:
            raise OSError(errno.EINVAL, "unsupported")

        monkeypatch.setattr("promoter.fs.atomic.renameat2", unsupported)
    (work / "a").mkdir()
    (work / "a/f.txt").write_bytes(b"v0")
    (work / "alt").symlink_to(outside)
    before = snapshot(outside)
    stop = threading.Event()
    started = threading.Barrier(2)
    work_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)

    def attacker() -> None:
        started.wait()
        while not stop.is_set():
            syscalls.renameat2(work_fd, "a", work_fd, "alt", syscalls.RENAME_EXCHANGE)

    thread = threading.Thread(target=attacker)
    thread.start()
    started.wait()
    refused = succeeded = 0
    try:
        for i in range(3000):
            data = f"v{i + 1}".encode()
            try:
                current = root.read_state("a/f.txt")
                old = ExpectedState(True, current.sha256, current.mode)
                write(root, "a/f.txt", data, old)
                write(root, "a/g.txt", data, MISSING)
                delete(root, "a/g.txt", state(data))
                succeeded += 1
            except (PathUnsafe, TargetDrift) as exc:
                assert exc.code in ("path_unsafe", "target_drift")
                refused += 1
            if refused >= 20 and succeeded >= 20:
                break
    finally:
        stop.set()
        thread.join()
        os.close(work_fd)
    if (work / "a").is_symlink():
        syscalls.renameat2(-100, str(work / "a"), -100, str(work / "alt"), 2)
    assert snapshot(outside) == before
    assert refused > 0
    assert not any(n.startswith(TEMP_PREFIX) for n in os.listdir(work / "a"))


# -- P2 ------------------------------------------------------------------------------


def test_leaf_swapped_to_outside_symlink_before_replace_is_refused(
    root: Root, work: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "f.txt").write_bytes(b"old")
    before = snapshot(outside)

    def swap() -> None:
        (work / "f.txt").unlink()
        (work / "f.txt").symlink_to(outside / "f.txt")

    hook_fault(monkeypatch, "before_replace", swap)
    with pytest.raises(PathUnsafe):
        write(root, "f.txt", b"new", state(b"old"))
    assert snapshot(outside) == before
    assert os.readlink(work / "f.txt") == str(outside / "f.txt")
    assert not any(n.startswith(TEMP_PREFIX) for n in os.listdir(work))


def test_leaf_symlink_to_outside_is_never_deleted_or_written(
    root: Root, work: Path, outside: Path
) -> None:
    (work / "f.txt").symlink_to(outside / "f.txt")
    before = snapshot(outside)
    assert root.read_state("f.txt").kind == "symlink"
    with pytest.raises(PathUnsafe):
        delete(root, "f.txt", state(b"outside original"))
    with pytest.raises(PathUnsafe):
        write(root, "f.txt", b"new", state(b"outside original"))
    assert snapshot(outside) == before
    assert (work / "f.txt").is_symlink()


# -- P3 ------------------------------------------------------------------------------


def test_leaf_edited_in_place_before_exchange_is_put_back(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "f.txt").write_bytes(b"old")
    hook_fault(monkeypatch, "before_replace", lambda: (work / "f.txt").write_bytes(b"user edit"))
    with pytest.raises(TargetDrift) as info:
        write(root, "f.txt", b"new", state(b"old"))
    assert info.value.context["found"]["sha256"] == hashlib.sha256(b"user edit").hexdigest()
    assert (work / "f.txt").read_bytes() == b"user edit"
    assert os.listdir(work) == ["f.txt"]


def test_leaf_swapped_for_identical_copy_before_exchange_is_put_back(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "f.txt").write_bytes(b"old")

    def swap() -> None:
        (work / "copy").write_bytes(b"old")
        os.rename(work / "copy", work / "f.txt")

    hook_fault(monkeypatch, "before_replace", swap)
    with pytest.raises(TargetDrift) as info:
        write(root, "f.txt", b"new", state(b"old"))
    assert info.value.context["reason"] == "swapped"
    assert (work / "f.txt").read_bytes() == b"old"
    assert os.listdir(work) == ["f.txt"]


def test_failed_swap_back_leaves_user_file_named_in_the_error(
    root: Root, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "f.txt").write_bytes(b"old")
    hook_fault(monkeypatch, "before_replace", lambda: (work / "f.txt").write_bytes(b"user edit"))
    real = syscalls.renameat2
    calls = []

    def second_fails(*args: object) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise OSError(errno.EIO, "I/O error")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("promoter.fs.atomic.renameat2", second_fails)
    with pytest.raises(WriteFailed) as info:
        write(root, "f.txt", b"new", state(b"old"))
    kept = info.value.context["kept"][0]["kept_as"]
    assert kept == TMP
    assert (work / kept).read_bytes() == b"user edit"
    assert (work / "f.txt").read_bytes() == b"new"


# -- P6 ------------------------------------------------------------------------------


def test_dangling_symlink_at_new_target_creates_nothing_at_its_destination(
    root: Root, work: Path, tmp_path: Path
) -> None:
    (work / "new.txt").symlink_to(tmp_path / "planted")
    with pytest.raises(PathUnsafe):
        write(root, "new.txt", b"data", MISSING)
    assert not (tmp_path / "planted").exists()
    assert (work / "new.txt").is_symlink()


def test_dangling_symlink_appearing_before_create_is_not_replaced(
    root: Root, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook_fault(monkeypatch, "before_replace", lambda: (work / "new.txt").symlink_to(tmp_path / "x"))
    with pytest.raises(PathUnsafe):
        write(root, "new.txt", b"data", MISSING)
    assert not (tmp_path / "x").exists()
    assert (work / "new.txt").is_symlink()
    assert os.listdir(work) == ["new.txt"]


def test_dangling_symlink_at_temp_name_is_never_followed(
    root: Root, work: Path, tmp_path: Path
) -> None:
    (work / TMP).symlink_to(tmp_path / "planted")
    with root.open_parent("f.txt", create=True) as parent, pytest.raises(PathUnsafe) as info:
        parent.write_temp(b"data", "100644", temp=TMP)
    assert info.value.context["name"] == TMP
    assert not (tmp_path / "planted").exists()
    assert (work / TMP).is_symlink()


# -- P12 -----------------------------------------------------------------------------


def test_root_renamed_mid_batch_is_detected(root: Root, work: Path, tmp_path: Path) -> None:
    write(root, "one.txt", b"1", MISSING)
    os.rename(work, tmp_path / "moved")
    with pytest.raises(PathUnsafe):
        root.recheck()
    with pytest.raises(PathUnsafe):
        write(root, "two.txt", b"2", MISSING)
    assert sorted(os.listdir(tmp_path / "moved")) == ["one.txt"]


def test_root_replaced_by_symlink_to_itself_is_detected(
    root: Root, work: Path, tmp_path: Path
) -> None:
    os.rename(work, tmp_path / "real")
    work.symlink_to(tmp_path / "real")
    with pytest.raises(PathUnsafe):
        root.recheck()


def test_held_parent_moved_out_of_root_is_detected(
    root: Root, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / "a").mkdir()
    (work / "a/f.txt").write_bytes(b"old")
    elsewhere = tmp_path / "elsewhere"
    with root.open_parent("a/f.txt", create=False) as parent:
        temp = parent.write_temp(b"new", "100644", temp=TMP)
        os.rename(work / "a", elsewhere)
        with pytest.raises(PathUnsafe):
            parent.replace(temp, expected_old=state(b"old"), new=state(b"new"))
        with pytest.raises(PathUnsafe):
            parent.unlink_checked(state(b"old"), aside=TMP)
        with pytest.raises(PathUnsafe):
            parent.write_temp(b"more", "100644", temp=TMP)
    assert sorted(os.listdir(elsewhere)) == ["f.txt"]
    assert (elsewhere / "f.txt").read_bytes() == b"old"


def test_held_parent_swapped_for_another_directory_is_detected(root: Root, work: Path) -> None:
    (work / "a").mkdir()
    (work / "b").mkdir()
    with root.open_parent("a/f.txt", create=True) as parent:
        syscalls.renameat2(root.fd, "a", root.fd, "b", syscalls.RENAME_EXCHANGE)
        with pytest.raises(PromoterError) as info:
            parent.verify_chain()
        assert info.value.code == "path_unsafe"
