"""Property: allowlist matching agrees with an independent glob matcher
(protocol: grants#allowlist-patterns).

``wcmatch.glob.globmatch`` with ``GLOBSTAR | DOTGLOB`` is the oracle, on generated wire
patterns and paths (not UTF-8 bytes, backslashes, dot names included). The one place
where the protocol and wcmatch part, a trailing ``/**`` matching zero components (``src/**``
matches ``src``), is asked of the oracle as the pattern without it. The protocol's edges are
pinned by hand below, including the inputs on which wcmatch and pathspec answer
differently and which keep the matcher promoter's own.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wcmatch import glob

from promoter.domain import wirepath
from promoter.domain.allowlist import check_pattern, matches
from promoter.errors import GrantInvalid

FLAGS = glob.GLOBSTAR | glob.DOTGLOB

# disk-form letters: ASCII, a dot, a backslash, a UTF-8 letter, two bytes that are not UTF-8
letters = st.sampled_from(["a", "b", ".", "\\", "\u00e9", "\udcff", "\udc80"])
name = st.lists(letters, min_size=1, max_size=4).map("".join).filter(lambda n: n not in (".", ".."))
pattern_component = st.one_of(
    name,
    st.just("**"),
    st.lists(st.one_of(letters, st.just("*"), st.just("?")), min_size=1, max_size=4)
    .map("".join)
    .filter(lambda c: "**" not in c and c not in (".", "..")),
)


def oracle(disk_pattern: str, disk_path: str) -> bool:
    escaped = disk_pattern.replace("\\", "\\\\")
    candidates = [escaped]
    while escaped.endswith("/**"):  # zero trailing components: the pattern without them
        escaped = escaped[: -len("/**")]
        candidates.append(escaped)
    return any(glob.globmatch(disk_path, c, flags=FLAGS) for c in candidates)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(
    pattern=st.lists(pattern_component, min_size=1, max_size=4),
    path=st.lists(name, min_size=1, max_size=5),
)
def test_matching_agrees_with_wcmatch(pattern: list[str], path: list[str]) -> None:
    disk_pattern, disk_path = "/".join(pattern), "/".join(path)
    wire_pattern, wire_path = wirepath.from_disk(disk_pattern), wirepath.from_disk(disk_path)
    check_pattern(wire_pattern)
    assert matches(wire_pattern, wire_path) is oracle(disk_pattern, disk_path)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("src/**", "src", True),  # zero components: wcmatch and pathspec say no
        ("src", "src/a.py", False),  # exactly one path: pathspec says yes (a directory)
        ("*", "a/b", False),  # within one component: pathspec says yes
        ("a/**", "a//b", False),  # not a canonical path: wcmatch and pathspec say yes
        ("a", "a/", False),  # likewise
        ("**", "/a", False),  # likewise
        ("*", ".hidden", True),
        ("?", "\\xff", True),
        ("**/**/x", "x", True),
        ("a/**/**", "a", True),
        ("**/a/**", "a", True),
    ],
)
def test_spec_edges(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


@pytest.mark.parametrize("pattern", ["src/**x", "a/[bc]", "src/", "/src", "a/./b", "a/../b"])
def test_refused_patterns(pattern: str) -> None:
    with pytest.raises(GrantInvalid):
        check_pattern(pattern)
