"""Removing a sandbox (``promoter run --remove``) never reaches outside promoter's own tree.

Each test builds a real sandbox directory with its ``run.json``, plants the attack, and
checks the exact bytes outside the tree are untouched: a symlink out of the sandbox, a
sandbox swapped for a symlink, a directory without promoter's record, and a bind mount
inside the sandbox (kept and named; the rest removed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from promoter.errors import PathUnsafe
from promoter.executor.sandbox import runs_dir
from promoter.fs.own_tree import remove_own_tree
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
