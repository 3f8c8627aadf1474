"""Allowlist patterns over names that are not UTF-8 (protocol: grants#allowlist-patterns,
documents#byte-paths).

A pattern is a wire form too and matches the decoded name: ``?`` stands for one UTF-8
character or one byte that is not UTF-8, never for one character of an escape, so a
pattern cannot reach a name by matching the text of its escapes.
"""

from __future__ import annotations

import pytest

from promoter.domain.allowlist import check_pattern, matches
from promoter.errors import GrantInvalid


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("src/caf\\xe9.txt", "src/caf\\xe9.txt", True),
        ("src/caf\\xe9.txt", "src/caf\u00e9.txt", False),  # the UTF-8 name is another file
        ("src/caf?.txt", "src/caf\\xe9.txt", True),  # one byte that is not UTF-8
        ("src/caf?.txt", "src/caf\u00e9.txt", True),  # one UTF-8 character
        ("src/caf????.txt", "src/caf\\xe9.txt", False),  # not the four escape characters
        ("src/*.txt", "src/\\xff\\xfe.txt", True),
        ("src/back\\\\*", "src/back\\\\slash", True),
        ("src/back\\\\*", "src/backslash", False),
        ("**", "src/caf\\xc3\\xa9", False),  # a path that is not canonical matches nothing
    ],
)
def test_patterns_match_the_decoded_names(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


@pytest.mark.parametrize("pattern", ["src/a\\b", "src/\\xC3", "src/caf\\xc3\\xa9", "src/\\"])
def test_a_pattern_that_is_not_a_canonical_wire_form_is_refused(pattern: str) -> None:
    with pytest.raises(GrantInvalid):
        check_pattern(pattern)
