"""Lexical path rules (protocol: documents#path-rules, TESTS P4/P5) and allowlist globs
(protocol: grants#allowlist-patterns)."""

from __future__ import annotations

import pytest

from promoter.domain.allowlist import check_pattern, matches
from promoter.domain.paths import check_path, check_path_set
from promoter.errors import GrantInvalid, PathInvalid

BAD_PATHS = {
    "empty": "",
    "absolute": "/etc/passwd",
    "dotdot": "..",
    "dotdot_inside": "a/../../x",
    "dot": "a/./b",
    "double_slash": "a//b",
    "trailing_slash": "a/link/",
    "trailing_dot": "a/link/.",
    "nul": "a\x00b",
    "newline": "a\nb",
    "tab": "a\tb",
    "del": "a\x7fb",
    "c1_control": "a\x85b",
    "backslash": "a\\b",
    "dot_git": ".git/config",
    "dot_git_upper": "src/.GIT/hooks/pre-commit",
    "dot_git_mixed": "x/.Git",
    "not_nfc": "cafe\u0301.txt",
    "long_component": "a/" + "x" * 256,
    "long_path": "/".join(["y" * 200] * 21),
    "lone_surrogate": "a\udcffb",
}


@pytest.mark.parametrize("name", sorted(BAD_PATHS))
def test_lexically_bad_path_is_rejected(name: str) -> None:
    with pytest.raises(PathInvalid):
        check_path(BAD_PATHS[name])


@pytest.mark.parametrize(
    "path",
    [
        "a",
        "src/app.py",
        "caf\u00e9.txt",
        ".gitignore",
        ".github/x.yml",
        "x.git",
        "a b/c d",
        "x" * 255,
    ],
)
def test_good_path_passes_unchanged(path: str) -> None:
    assert check_path(path) == path


def test_case_fold_collision_is_rejected() -> None:
    with pytest.raises(PathInvalid) as info:
        check_path_set(["README.md", "readme.md"])
    assert info.value.code == "path_invalid"


def test_sharp_s_case_fold_collision_is_rejected() -> None:
    with pytest.raises(PathInvalid):
        check_path_set(["stra\u00dfe.txt", "STRASSE.txt"])


def test_prefix_directory_of_another_path_is_rejected() -> None:
    with pytest.raises(PathInvalid):
        check_path_set(["a", "a/b"])
    with pytest.raises(PathInvalid):
        check_path_set(["A/b", "a"])
    check_path_set(["a/b", "ab", "a.b"])


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("README.md", "README.md", True),
        ("README.md", "readme.md", False),
        ("src/**", "src/a.py", True),
        ("src/**", "src/a/b/c.py", True),
        ("src/**", "srcx/a.py", False),
        ("**", "any/depth/file", True),
        ("**/x.py", "x.py", True),
        ("**/x.py", "a/b/x.py", True),
        ("**/x.py", "ax.py", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("*.md", "README.md", True),
        ("*.md", "docs/README.md", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/a/b.py", False),
        ("f?.txt", "f1.txt", True),
        ("f?.txt", "f12.txt", False),
        ("f?.txt", "f/.txt", False),
        ("a.b", "axb", False),
        ("a+b(c)", "a+b(c)", True),
    ],
)
def test_allowlist_glob_semantics(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


@pytest.mark.parametrize("pattern", ["a**", "**b/c", "a/[ab]", "/abs", "a/../b", "a//b", "", "a/"])
def test_unsupported_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(GrantInvalid):
        check_pattern(pattern)


def test_control_characters_are_exactly_c0_del_and_c1() -> None:
    from promoter.domain.paths import _has_control

    for code in [*range(0, 0x400), 0x2028, 0xFEFF, 0x10FFFF]:
        expected = code < 0x20 or 0x7F <= code < 0xA0
        assert _has_control(f"a{chr(code)}b") is expected, hex(code)
