"""Removing a sandbox (``promoter run --remove``) never reaches outside promoter's own tree.

Each test builds a real sandbox directory with its ``run.json``, plants the attack, and
checks the exact bytes outside the tree are untouched: a symlink out of the sandbox, a
sandbox swapped for a symlink, a directory without promoter's record, and a bind mount
inside the sandbox (kept and named; the rest removed). TESTS E7: a chain of directories
deeper than Python's recursion (3000 and 20 000 levels, paths far past ``PATH_MAX``),
names that are not UTF-8 or hold a newline, FIFOs, directories left unreadable (also for
a remover that is not root) and set-ID bits left in a kept sandbox.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.executor.sandbox import runs_dir
from promoter.fs.own_tree import disarm_tree, remove_own_tree
from promoter.fs.tree_walk import HELD_OPEN
from tests.support.deep_trees import removed_after  # noqa: F401 (autouse)
from tests.support.mounts import bind_mount, is_mount_point

RUN = "run_0123456789abcdef"


def _names(run_id: str) -> Callable[[int], bool]:
    def proof(fd: int) -> bool:
        with os.fdopen(os.open("run.json", os.O_RDONLY, dir_fd=fd), "rb") as handle:
            return bool(json.loads(handle.read()).get("run_id") == run_id)

    return proof


def _sandbox(state: Path) -> Path:
    home = runs_dir(state) / RUN
    (home / "clone" / "src").mkdir(parents=True)
    (home / "run.json").write_text(json.dumps({"run_id": RUN}))
    (home / "clone" / "src" / "app.py").write_bytes(b"sandbox bytes\n")
    return home


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "users-files"
    (outside / "deep").mkdir(parents=True)
    (outside / "keep.txt").write_bytes(b"the user's\n")
    (outside / "deep" / "also.txt").write_bytes(b"also the user's\n")
    return outside


def _untouched(outside: Path) -> None:
    assert (outside / "keep.txt").read_bytes() == b"the user's\n"
    assert (outside / "deep" / "also.txt").read_bytes() == b"also the user's\n"


def test_symlink_out_of_the_sandbox_is_removed_as_a_link_not_followed(tmp_path: Path) -> None:
    home, outside = _sandbox(tmp_path / "state"), _outside(tmp_path)
    (home / "clone" / "escape").symlink_to(outside, target_is_directory=True)
    (home / "clone" / "src" / "file-link").symlink_to(outside / "keep.txt")
    removed = remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert removed == runs_dir(tmp_path / "state") / RUN
    assert not os.path.lexists(home)
    _untouched(outside)


def test_sandbox_swapped_for_a_symlink_is_refused_and_nothing_removed(tmp_path: Path) -> None:
    state, outside = tmp_path / "state", _outside(tmp_path)
    runs_dir(state).mkdir(parents=True)
    (outside / "run.json").write_text(json.dumps({"run_id": RUN}))
    (runs_dir(state) / RUN).symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathUnsafe):
        remove_own_tree(runs_dir(state), RUN, _names(RUN))
    _untouched(outside)
    assert (outside / "run.json").exists()


def test_directory_without_promoters_record_is_never_removed(tmp_path: Path) -> None:
    home = _sandbox(tmp_path / "state")
    (home / "run.json").write_text(json.dumps({"run_id": "run_somebody_else"}))
    with pytest.raises(PathUnsafe, match="not provably"):
        remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert (home / "clone" / "src" / "app.py").read_bytes() == b"sandbox bytes\n"


def test_parent_traversal_in_the_name_is_refused(tmp_path: Path) -> None:
    _sandbox(tmp_path / "state")
    for name in ("..", ".", "", f"{RUN}/clone"):
        with pytest.raises(PathUnsafe):
            remove_own_tree(runs_dir(tmp_path / "state"), name, lambda fd: True)
    assert (runs_dir(tmp_path / "state") / RUN / "run.json").exists()


def test_bind_mount_inside_the_sandbox_is_kept_with_everything_in_it(tmp_path: Path) -> None:
    home, outside = _sandbox(tmp_path / "state"), _outside(tmp_path)
    target = home / "clone" / "mnt"
    target.mkdir()
    with bind_mount(outside, target):
        assert is_mount_point(target)
        with pytest.raises(PathUnsafe) as raised:
            remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
        assert raised.value.context["kept"] == [f"{home}/clone/mnt"]
        _untouched(outside)
        assert not (home / "clone" / "src").exists()  # the rest of the sandbox is gone
        assert (home / "clone" / "mnt" / "keep.txt").read_bytes() == b"the user's\n"
    _untouched(outside)


def _chain(top: Path, depth: int, name: str | bytes = "d") -> None:
    """``depth`` nested directories ``name`` below ``top``, made through descriptors."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.mkfifo("fifo", dir_fd=fd)
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.mark.parametrize("depth", [3000, 20_000])
def test_a_directory_chain_deeper_than_the_recursion_limit_is_removed(
    tmp_path: Path, depth: int
) -> None:
    assert depth > sys.getrecursionlimit() and depth > HELD_OPEN
    home = _sandbox(tmp_path / "state")
    _chain(home / "clone", depth)
    outside = _outside(tmp_path)
    removed = remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert removed == runs_dir(tmp_path / "state") / RUN
    assert not os.path.lexists(home)
    assert os.listdir(runs_dir(tmp_path / "state")) == []
    _untouched(outside)


def test_names_that_are_not_utf8_or_hold_a_newline_are_removed(tmp_path: Path) -> None:
    home = _sandbox(tmp_path / "state")
    clone = os.fsencode(home / "clone")
    for name in (b"\xff\xfe", b"line\nbreak", b"\x01\x7f", b"-rf", b" "):
        os.mkdir(clone + b"/" + name)
        with open(clone + b"/" + name + b"/" + name, "wb") as handle:
            handle.write(b"x")
    _chain(home / "clone", 40, b"\xc3\x28\n")  # invalid UTF-8 and a newline, deep
    remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert not os.path.lexists(home)


def test_a_deep_symlink_to_an_outside_directory_is_removed_as_a_link(tmp_path: Path) -> None:
    home, outside = _sandbox(tmp_path / "state"), _outside(tmp_path)
    _chain(home / "clone", 200)
    deep = os.fsencode(home / "clone") + b"/d" * 150
    os.symlink(outside, deep + b"/escape")
    os.symlink(outside / "keep.txt", deep + b"/file-link")
    remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert not os.path.lexists(home)
    _untouched(outside)
    assert sorted(os.listdir(outside)) == ["deep", "keep.txt"]


def _locked_tree(home: Path) -> None:
    """Directories left unreadable, unwritable and unsearchable, with FIFOs inside."""
    for name, mode in (("none", 0o000), ("read-only", 0o500), ("write-only", 0o300)):
        below = home / "clone" / name / "below"
        below.mkdir(parents=True)
        os.mkfifo(below / "fifo")
        (below / "file").write_bytes(b"x")
        below.chmod(mode)
        (home / "clone" / name).chmod(mode)
    (home / "clone" / "deep").mkdir()
    _chain(home / "clone" / "deep", 100)
    (home / "clone" / "deep").chmod(0o000)


def test_unreadable_directories_and_fifos_are_removed(tmp_path: Path) -> None:
    home = _sandbox(tmp_path / "state")
    _locked_tree(home)
    remove_own_tree(runs_dir(tmp_path / "state"), RUN, _names(RUN))
    assert not os.path.lexists(home)


def _chown_tree(top: Path, uid: int) -> None:
    os.lchown(top, uid, uid)
    for directory, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.lchown(os.path.join(directory, name), uid, uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to remove as another user")
def test_unreadable_directories_are_removed_by_a_remover_who_is_not_root(
    tmp_path: Path,
) -> None:
    """Root reads a mode 000 directory anyway: here the remover is ``nobody``."""
    home = _sandbox(tmp_path / "state")
    _locked_tree(home)
    runs = runs_dir(tmp_path / "state")
    outside = _outside(tmp_path)
    _chown_tree(runs, 65534)
    pid = os.fork()
    if pid == 0:  # the child: in the runs directory, then no longer root
        code = 1
        try:
            os.chdir(runs)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            remove_own_tree(Path("."), RUN, _names(RUN))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not os.path.lexists(home)
    _untouched(outside)


def test_a_kept_sandbox_holds_no_set_id_bit_after_it_is_disarmed(tmp_path: Path) -> None:
    home = _sandbox(tmp_path / "state")
    clone = home / "clone"
    (clone / "setuid").write_bytes(b"#!/bin/sh\n")
    (clone / "setuid").chmod(0o4755)
    (clone / "setgid-dir").mkdir()
    (clone / "setgid-dir").chmod(0o2775)
    (clone / "setgid-dir" / "both").write_bytes(b"x")
    (clone / "setgid-dir" / "both").chmod(0o6711)
    _chain(clone, 300)
    deep = os.fsencode(clone) + b"/d" * 300
    with open(deep + b"/deep-setuid", "wb") as handle:
        handle.write(b"x")
    os.chmod(deep + b"/deep-setuid", 0o4700)
    (clone / "locked").mkdir()
    (clone / "locked" / "inner").write_bytes(b"x")
    (clone / "locked" / "inner").chmod(0o4000)
    (clone / "locked").chmod(0o2000)
    outside = _outside(tmp_path)
    (outside / "keep.txt").chmod(0o4644)
    (clone / "hardlink").hardlink_to(outside / "keep.txt")  # another name of a file outside
    os.symlink(outside / "keep.txt", clone / "link")
    clone.chmod(0o2755)
    assert disarm_tree(clone) == [f"{clone}/hardlink"]
    assert (outside / "keep.txt").stat().st_mode & 0o7777 == 0o4644  # not ours: untouched
    assert not (clone / "hardlink").exists()
    modes = {
        "setuid": 0o755, "setgid-dir": 0o775, "setgid-dir/both": 0o711,
        "locked": 0o000, "locked/inner": 0o000, ".": 0o755,
    }  # fmt: skip
    for name, mode in modes.items():
        assert stat.S_IMODE((clone / name).lstat().st_mode) == mode, name
    assert stat.S_IMODE(os.lstat(deep + b"/deep-setuid").st_mode) == 0o700
    for directory, dirs, files in os.walk(clone):
        for name in (*dirs, *files):
            assert not os.lstat(os.path.join(directory, name)).st_mode & 0o6000, name
    _untouched(outside)
