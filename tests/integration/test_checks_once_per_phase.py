"""A pass's chain checks once per directory and phase where nothing is named between, and
what that keeps.

Replaces in the same held directory one after another: the check after one replace is
the check before the next (nothing is done in the worktree in between), so a directory
swapped in that instant is caught by the check after the next replace, which runs
always; a replace in another directory, or after anything else, checks before as it
did. A swap during a replace is caught by the check after it, as before. Begins in one
directory that name nothing (``O_TMPFILE``) take the check before the first of them as
theirs; a swap between two of them is caught by the check after a temp is named.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from promoter import faults
from promoter.domain.path_state import State
from promoter.domain.paths import temp_name
from promoter.engine.operation.apply import Applier
from promoter.errors import PathUnsafe
from promoter.fs import temps
from promoter.fs.root import Root

OLD = [b"old zero\n", b"old one\n", b"old two\n"]
NEW = [b"new zero\n", b"new one\n", b"new two\n"]


def state(data: bytes) -> State:
    return State(True, hashlib.sha256(data).hexdigest(), "100644")


def stage(apply: Applier, paths: list[str]) -> None:
    for seq, path in enumerate(paths):
        apply.stage(seq, path, state(NEW[seq]), NEW[seq], temp_name("op_once", 1, seq))


def swap(work: Path, directory: str, files: dict[str, bytes]) -> Path:
    """Move ``directory`` away and put another one, holding ``files``, at its path."""
    moved = work / f"{directory}.moved"
    os.rename(work / directory, moved)
    (work / directory).mkdir()
    for name, data in files.items():
        (work / directory / name).write_bytes(data)
    return moved


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".promoter-"))


def test_a_directory_swapped_between_two_replaces_in_it_is_caught_by_the_check_after(
    root: Root, work: Path
) -> None:
    """The swap lands after the first replace's check after, before the second replace:
    the second replace renames in the held directory (moved, still the user's own) and
    its check after refuses; the directory now at the path is left as it was put."""
    (work / "d").mkdir()
    for seq in range(2):
        (work / "d" / f"f{seq}.txt").write_bytes(OLD[seq])
    apply = Applier(root)
    try:
        stage(apply, ["d/f0.txt", "d/f1.txt"])
        apply.place(0, state(OLD[0]), state(NEW[0]))
        moved = swap(work, "d", {"f0.txt": NEW[0], "f1.txt": OLD[1]})
        with pytest.raises(PathUnsafe) as info:
            apply.place(1, state(OLD[1]), state(NEW[1]))
    finally:
        apply.close()
    assert info.value.context["path"] == "d/f1.txt"
    assert info.value.detail == "a held directory was swapped"
    assert (moved / "f1.txt").read_bytes() == NEW[1]  # the held directory: renamed there
    assert (work / "d" / "f1.txt").read_bytes() == OLD[1]  # the one at the path: untouched
    assert leftovers(moved) == [] and leftovers(work / "d") == []


def test_a_replace_in_another_directory_checks_its_chain_before_renaming(
    root: Root, work: Path
) -> None:
    """The previous replace checked another directory: this one checks its own before
    anything is renamed, so the swapped directory's file keeps its bytes."""
    for seq, directory in enumerate(["a", "b"]):
        (work / directory).mkdir()
        (work / directory / f"f{seq}.txt").write_bytes(OLD[seq])
    apply = Applier(root)
    try:
        stage(apply, ["a/f0.txt", "b/f1.txt"])
        apply.place(0, state(OLD[0]), state(NEW[0]))
        moved = swap(work, "b", {"f1.txt": OLD[1]})
        with pytest.raises(PathUnsafe) as info:
            apply.place(1, state(OLD[1]), state(NEW[1]))
    finally:
        apply.close()
    assert info.value.context["path"] == "b/f1.txt"
    assert (moved / "f1.txt").read_bytes() == OLD[1]  # refused before any rename
    assert (work / "b" / "f1.txt").read_bytes() == OLD[1]
    assert leftovers(moved) == [] and leftovers(work / "b") == []


def test_a_directory_swapped_during_a_replace_is_caught_by_that_replaces_check_after(
    root: Root, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap lands inside the first replace (its rename done, its check after not yet
    run): that check refuses, and the next replace is never taken for checked."""
    (work / "d").mkdir()
    for seq in range(3):
        (work / "d" / f"f{seq}.txt").write_bytes(OLD[seq])
    gate = tmp_path / "go"
    os.mkfifo(f"{gate}.paused")  # the pause announces itself by opening it: no polling
    monkeypatch.setenv(faults.ENV, f"after_replace=pause:{gate}@2")
    faults.reset()
    apply = Applier(root)
    errors: list[BaseException] = []

    def second() -> None:
        try:
            apply.place(1, state(OLD[1]), state(NEW[1]))
        except BaseException as exc:
            errors.append(exc)

    try:
        stage(apply, ["d/f0.txt", "d/f1.txt", "d/f2.txt"])
        apply.place(0, state(OLD[0]), state(NEW[0]))
        runner = threading.Thread(target=second)
        runner.start()
        announced: list[str] = []
        meet = threading.Thread(
            target=lambda: announced.append(Path(f"{gate}.paused").read_text()), daemon=True
        )
        meet.start()
        meet.join(60)  # a bound for a broken test only: the open returns at the pause
        assert announced == [str(os.getpid())], errors  # the second rename is done
        moved = swap(work, "d", {"f0.txt": NEW[0], "f1.txt": OLD[1], "f2.txt": OLD[2]})
        gate.touch()
        runner.join()
        assert len(errors) == 1 and isinstance(errors[0], PathUnsafe), errors
        with pytest.raises(PathUnsafe):  # not taken for checked: it checks before, refused
            apply.place(2, state(OLD[2]), state(NEW[2]))
    finally:
        gate.touch()
        apply.close()
        faults.reset()
    assert (moved / "f1.txt").read_bytes() == NEW[1]
    assert (moved / "f2.txt").read_bytes() == OLD[2]
    assert (work / "d" / "f2.txt").read_bytes() == OLD[2]


@pytest.mark.parametrize("anonymous", [True, False], ids=["o_tmpfile", "named_temp"])
def test_a_directory_swapped_between_two_begins_in_it_is_caught_when_the_first_is_named(
    root: Root, work: Path, anonymous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Begins in one directory that name nothing take the check before the first as
    theirs; a swap between two of them is caught by the check after the first temp is
    named (as it was when each begin checked: a begin after the swap walked to the new
    directory, and the first temp's check after naming refused all the same). Nothing is
    staged and no temp is left in either directory."""
    if not anonymous:  # the filesystem without O_TMPFILE: each begin makes a name
        monkeypatch.setattr(temps, "_proc_fd_links", lambda: False)
    (work / "d").mkdir()
    apply = Applier(root)
    try:
        apply.begin(0, "d/f0.txt", state(NEW[0]), NEW[0], temp_name("op_once", 1, 0))
        moved = swap(work, "d", {})
        apply.begin(1, "d/f1.txt", state(NEW[1]), NEW[1], temp_name("op_once", 1, 1))
        with pytest.raises(PathUnsafe) as info:
            apply.end_begun()
        assert info.value.context["path"] == "d/f0.txt"
        assert not apply.staged and not apply.begun and not apply.kept
    finally:
        apply.close()
    assert leftovers(moved) == [] and leftovers(work / "d") == []
    assert sorted(p.name for p in moved.iterdir()) == []
    assert sorted(p.name for p in (work / "d").iterdir()) == []
