"""Parsing of git's -z output into typed records, and the guards on what reaches git."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.errors import GitError
from promoter.git.records import (
    DiffEntry,
    IndexEntry,
    TreeEntry,
    check_pathspec_paths,
    parse_diff_raw,
    parse_ls_files_stage,
    parse_ls_tree,
    require_oid,
    unopened_directories,
)

A = "a" * 40
B = "b" * 40
Z = "0" * 40


def _debug_block(flags: str) -> bytes:
    return (
        b"  ctime: 1:2\n  mtime: 3:4\n  dev: 5\tino: 6\n  uid: 7\tgid: 8\n"
        + b"  size: 9\tflags: "
        + flags.encode()
        + b"\n"
    )


def test_ls_files_stages_are_separate_entries_and_paths_keep_tabs_and_newlines() -> None:
    data = (
        f"100644 {A} 1\tweird\tname\n".encode()
        + b"\0"
        + f"100755 {B} 2\tweird\tname\n".encode()
        + b"\0"
    )
    assert parse_ls_files_stage(data, debug=False) == [
        ("weird\tname\n", IndexEntry("100644", A, 1)),
        ("weird\tname\n", IndexEntry("100755", B, 2)),
    ]


def test_ls_files_debug_flags_mark_intent_to_add() -> None:
    data = (
        f"100644 {A} 0\tplain".encode()
        + b"\0"
        + _debug_block("0")
        + f"100644 {A} 0\tnew".encode()
        + b"\0"
        + _debug_block("20004000")
    )
    assert parse_ls_files_stage(data, debug=True) == [
        ("plain", IndexEntry("100644", A, 0, intent_to_add=False)),
        ("new", IndexEntry("100644", A, 0, intent_to_add=True)),
    ]


@pytest.mark.parametrize(
    "data",
    [
        f"100644 {A} 0\tno-terminator".encode(),
        f"100644 {A} 4\tbad-stage\0".encode(),
        f"10064 {A} 0\tshort-mode\0".encode(),
        f"100644 {A[:39]} 0\tshort-oid\0".encode(),
        f"100644 {A} 0 space-not-tab\0".encode(),
    ],
)
def test_malformed_ls_files_output_is_refused_not_guessed(data: bytes) -> None:
    with pytest.raises(GitError):
        parse_ls_files_stage(data, debug=False)


def test_truncated_debug_block_is_refused() -> None:
    data = f"100644 {A} 0\tx".encode() + b"\0" + _debug_block("0")[:-20]
    with pytest.raises(GitError):
        parse_ls_files_stage(data, debug=True)


def test_ls_tree_types_and_odd_names() -> None:
    data = (
        f"100644 blob {A}\ta*b c\n".encode()
        + b"\0"
        + f"040000 tree {B}\tdir".encode()
        + b"\0"
        + f"160000 commit {A}\tsub".encode()
        + b"\0"
        + f"100644 blob {B}\t".encode()
        + "é".encode()
        + b"\0"
    )
    assert parse_ls_tree(data) == [
        ("a*b c\n", TreeEntry("100644", A, "blob")),
        ("dir", TreeEntry("040000", B, "tree")),
        ("sub", TreeEntry("160000", A, "commit")),
        ("é", TreeEntry("100644", B, "blob")),
    ]


def test_ls_tree_non_utf8_name_round_trips_through_surrogates() -> None:
    data = f"100644 blob {A}\t".encode() + b"\xff\xfe" + b"\0"
    [(path, _)] = parse_ls_tree(data)
    assert path.encode("utf-8", "surrogateescape") == b"\xff\xfe"


def test_ls_tree_unknown_type_is_refused() -> None:
    with pytest.raises(GitError):
        parse_ls_tree(f"100644 thing {A}\tx\0".encode())


def test_diff_raw_absent_sides_are_none() -> None:
    data = (
        f":000000 100644 {Z} {A} A".encode()
        + b"\0new\0"
        + f":100644 000000 {B} {Z} D".encode()
        + b"\0gone\0"
        + f":100644 100755 {A} {A} M".encode()
        + b"\0mode\0"
        + f":100644 120000 {A} {B} T".encode()
        + b"\0link\0"
    )
    assert parse_diff_raw(data) == [
        DiffEntry("A", "new", None, "100644", None, A),
        DiffEntry("D", "gone", "100644", None, B, None),
        DiffEntry("M", "mode", "100644", "100755", A, A),
        DiffEntry("T", "link", "100644", "120000", A, B),
    ]


@pytest.mark.parametrize(
    "data",
    [
        f":100644 100644 {A} {B} R100".encode() + b"\0old\0new\0",
        f":100644 100644 {A} {B} A".encode() + b"\0mismatch\0",
        f":100644 100644 {A} {B} M".encode() + b"\0",
        f":100644 100644 {A} {B} M".encode() + b"\0no-terminator",
    ],
)
def test_malformed_diff_output_is_refused(data: bytes) -> None:
    with pytest.raises(GitError):
        parse_diff_raw(data)


@pytest.mark.parametrize(
    "value",
    ["HEAD", "A" * 40, "a" * 39, "a" * 64, "--output=/tmp/x", f"{'a' * 40}\nHEAD", f"{'a' * 40}^"],
)
def test_only_full_lowercase_oids_reach_git(value: str) -> None:
    with pytest.raises(ValueError, match="40 lowercase hex"):
        require_oid(value)


def test_full_oid_is_accepted() -> None:
    assert require_oid(A) == A


@pytest.mark.parametrize("path", ["", "/abs", "a//b", "./a", "a/..", "a/", "nul\0byte"])
def test_pathspecs_that_git_would_rewrite_or_widen_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        check_pathspec_paths([path])


def test_literal_looking_glob_names_are_fine_as_pathspecs() -> None:
    check_pathspec_paths(["a*", "[x]", ":(exclude)y", "-n", "sp ace/é"])


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="./a\n\\", min_size=1, max_size=14))
def test_pathspec_guard_refuses_exactly_paths_with_an_empty_dot_or_dotdot_component(
    path: str,
) -> None:
    unnormalized = any(part in ("", ".", "..") for part in path.split("/"))
    try:
        check_pathspec_paths([path])
    except ValueError:
        assert unnormalized
    else:
        assert not unnormalized


def test_a_directory_git_could_not_open_is_named_even_when_git_cut_its_warning() -> None:
    """git lists untracked files without a directory it cannot open and says so only in
    a warning, which it cuts at 4095 bytes: a cut warning still names the directory's
    prefix, with no reason (a path that long is past the host's limit)."""
    deep = b"d/" * 2100
    stderr = (
        b"warning: unable to access 'x/.gitignore': Permission denied\n"
        b"warning: could not open directory 'locked/it's/': Permission denied\n"
        + (b"warning: could not open directory '" + deep + b"': File name too long")[:4095]
        + b"\n"
    )
    found = unopened_directories(stderr)
    assert found == {
        "locked/it's": "Permission denied",
        deep[: 4095 - 35].decode().rstrip("/"): None,
    }
    assert unopened_directories(b"") == {}
