"""Which new files of an overlay's upper layer a bundle takes: those git lists as
untracked and not ignored (protocol: runs#upper-layer-bundle). With no ``.gitignore``
in any of their directories and no ``.git`` among their names, the build takes them all
without starting git; that answer is git's own, for names of every kind. Anything else
is asked of git as before.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from promoter.executor import layers, upper

# names git's walk could treat apart: patterns' characters, spaces, controls, bytes
# that are not UTF-8, leading dashes, look-alikes of .git and .gitignore, depth
_TRICKY = [
    "a.py",
    "dir/sub/x y.txt",
    "ünï/cödé.py",
    "-leading/--dash",
    "back\\slash",
    "new\nline",
    "tab\there",
    "*star/[brackets]",
    "#hash",
    "!bang",
    " space-first",
    ".gitx/a",
    "x.git/b",
    "dir/.gitignore_not",
    "dir/.gitattributes",
    "not-utf8-" + os.fsdecode(b"\xff\xfe"),
    "/".join(["deep"] * 12) + "/f",
]


def _box(tmp_path: Path) -> layers.Layers:
    home = tmp_path / "run"
    home.mkdir()
    return layers.Layers(home, ())


def _nothing(path: str) -> layers.Found | None:
    return None


def test_without_rules_or_dot_git_every_new_file_is_taken_as_git_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _box(tmp_path)
    directories = {d for path in _TRICKY for d in upper._ancestors(path)}
    listed = upper._listed_by_git(box, _TRICKY, dict.fromkeys(directories))
    assert listed == set(_TRICKY)  # git's own answer: every one

    def no_git(*args: object, **kwargs: object) -> object:
        raise AssertionError("git started")

    monkeypatch.setattr(upper, "run_git", no_git)
    assert upper._not_ignored(box, _TRICKY, _nothing) == listed
    assert list(box.home.iterdir()) == []  # no scratch repository either


@pytest.mark.parametrize("dotgit", ["sub/.git/config", "sub/.git", "sub/.GIT/x"])
def test_a_dot_git_name_is_asked_of_git(tmp_path: Path, dotgit: str) -> None:
    box = _box(tmp_path)
    paths = sorted(["ok.py", dotgit])
    directories = {d for path in paths for d in upper._ancestors(path)}
    assert upper._not_ignored(box, paths, _nothing) == upper._listed_by_git(
        box, paths, dict.fromkeys(directories)
    )


def test_a_gitignore_in_a_directory_is_asked_of_git(tmp_path: Path) -> None:
    box = _box(tmp_path)
    rules = tmp_path / "rules"
    rules.write_bytes(b"*.log\n")
    found = (os.fsencode(rules), os.stat(rules))

    def stack(path: str) -> layers.Found | None:
        return found if path == "src/.gitignore" else None

    paths = ["src/debug.log", "src/main.py", "top.log"]
    taken = upper._not_ignored(box, paths, stack) & set(paths)  # git lists its rules too
    assert taken == {"src/main.py", "top.log"}
