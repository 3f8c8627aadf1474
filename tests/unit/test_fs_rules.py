"""Pure rules of the fs layer: lexical re-checks, leaf matching, the mode rule, the umask."""

from __future__ import annotations

import hashlib
import os

import pytest

from promoter.errors import PathUnsafe
from promoter.fs import syscalls
from promoter.fs.chain import ExpectedState, LeafState
from promoter.fs.leaf import git_mode_of, split_dir, split_rel
from promoter.fs.syscalls import current_umask, file_mode

EMPTY_SHA = hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize(
    "rel",
    [
        "",
        "/etc/passwd",
        "a/",
        "a/link/",
        "a/link/.",
        "a//b",
        ".",
        "..",
        "a/../../x",
        "a/./b",
        "a\x00b",
        ".git",
        ".git/config",
        "sub/.GIT/hooks/pre-commit",
        "sub/.Git",
        "x" * 256,
        "/".join(["y" * 200] * 21),
    ],
)
def test_unsafe_relative_paths_are_refused_lexically(rel: str) -> None:
    with pytest.raises(PathUnsafe) as info:
        split_rel(rel)
    assert info.value.code == "path_unsafe"


@pytest.mark.parametrize(
    ("rel", "parts"),
    [
        ("f", ["f"]),
        ("src/app.py", ["src", "app.py"]),
        (".gitignore", [".gitignore"]),
        ("a/.github/x.yml", ["a", ".github", "x.yml"]),
        ("x" * 255, ["x" * 255]),
    ],
)
def test_safe_relative_paths_split_into_components(rel: str, parts: list[str]) -> None:
    assert split_rel(rel) == parts


def test_empty_directory_path_names_the_root_only_for_directories() -> None:
    assert split_dir("") == []
    assert split_dir("a/b") == ["a", "b"]
    with pytest.raises(PathUnsafe):
        split_dir("a//b")


def test_missing_leaf_matches_only_a_missing_expectation() -> None:
    missing = LeafState(kind="missing")
    assert missing.matches(ExpectedState(False, None, None))
    assert missing.matches(False, None, None)
    assert not missing.matches(ExpectedState(True, EMPTY_SHA, "100644"))


def test_file_leaf_matches_only_equal_hash_and_mode() -> None:
    leaf = LeafState(kind="file", sha256=EMPTY_SHA, mode="100644", size=0)
    assert leaf.matches(ExpectedState(True, EMPTY_SHA, "100644"))
    assert leaf.matches(True, EMPTY_SHA, "100644")
    assert not leaf.matches(ExpectedState(True, EMPTY_SHA, "100755"))
    assert not leaf.matches(ExpectedState(True, "0" * 64, "100644"))
    assert not leaf.matches(ExpectedState(False, None, None))


@pytest.mark.parametrize("kind", ["directory", "symlink", "special"])
def test_non_file_leaves_match_nothing(kind: str) -> None:
    leaf = LeafState(kind=kind)  # type: ignore[arg-type]
    assert not leaf.matches(ExpectedState(False, None, None))
    assert not leaf.matches(ExpectedState(True, EMPTY_SHA, "100644"))


@pytest.mark.parametrize(
    ("st_mode", "git_mode"),
    [(0o100644, "100644"), (0o100755, "100755"), (0o100700, "100755"), (0o100655, "100644")],
)
def test_git_mode_follows_the_owner_execute_bit(st_mode: int, git_mode: str) -> None:
    assert git_mode_of(st_mode) == git_mode


@pytest.mark.parametrize(
    ("git_mode", "replaced", "umask", "expected"),
    [
        ("100644", None, 0o022, 0o644),
        ("100755", None, 0o022, 0o755),
        ("100644", None, 0o077, 0o600),
        ("100755", None, 0o077, 0o700),
        ("100755", None, 0o027, 0o750),
        ("100644", 0o100600, 0o022, 0o600),
        ("100755", 0o100600, 0o022, 0o700),
        ("100755", 0o100640, 0o022, 0o750),
        ("100644", 0o100755, 0o022, 0o644),
        ("100644", 0o100751, 0o000, 0o640),
        ("100755", 0o104644, 0o022, 0o755),
        ("100755", 0o100200, 0o022, 0o300),
    ],
)
def test_written_mode_keeps_permission_bits_and_sets_exec_where_read(
    git_mode: str, replaced: int | None, umask: int, expected: int
) -> None:
    assert file_mode(git_mode, replaced, umask) == expected


def test_symlink_and_gitlink_modes_are_not_writable() -> None:
    with pytest.raises(ValueError):
        file_mode("120000", None, 0o022)
    with pytest.raises(ValueError):
        file_mode("160000", None, 0o022)


def test_umask_is_read_without_changing_it() -> None:
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(old)


def test_umask_fallback_restores_the_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(*args: object, **kwargs: object) -> object:
        raise OSError(2, "no /proc")

    old = os.umask(0o037)
    try:
        monkeypatch.setattr("builtins.open", no_proc)
        assert current_umask() == 0o037
        monkeypatch.undo()
        assert os.umask(0o037) == 0o037
    finally:
        os.umask(old)


def test_renameat2_reports_errors_as_oserror(tmp_path: os.PathLike[str]) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileNotFoundError):
            syscalls.renameat2(fd, "absent", fd, "other", syscalls.RENAME_NOREPLACE)
    finally:
        os.close(fd)
