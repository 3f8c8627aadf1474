"""Property: the quote-splitting path of the JSON shape scan equals the regular expression.

A chunk without a backslash is stripped of its strings by splitting at quotes; this must
give exactly the structure bytes and the carry that the regular expression gives, for
any bytes and either carry a chunk may start with, and whole bodies fed in any cuts must
end with the same counts either way.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.api import jsonshape
from promoter.api.jsonshape import ShapeBudget

plain = st.binary(max_size=64).map(lambda b: bytes(b'[]{}",:a\xc3'[x % 9] for x in b))
texts = st.text(alphabet='[]{}",:ab\u00e9', max_size=8)
values = st.recursive(
    st.one_of(st.none(), st.integers(), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([b"", b'"']), plain)
def test_split_equals_regex_without_backslashes(carry: bytes, chunk: bytes) -> None:
    data = carry + chunk
    assert b"\\" not in data
    assert jsonshape._outside_strings(data) == jsonshape._outside_strings_re(data)


def test_a_backslash_takes_the_regex() -> None:
    data = b'["a\\"b", "c'
    assert jsonshape._outside_strings(data) == (b"[, ", b'"')


def _fed(raw: bytes, cuts: list[int]) -> tuple[int, int, bytes]:
    budget = ShapeBudget(max_depth=1000, max_items=10**9)
    start = 0
    for cut in [*sorted({c % (len(raw) + 1) for c in cuts}), len(raw)]:
        budget.feed(raw[start:cut])
        start = cut
    return budget.items, budget.depth, budget._carry


@settings(max_examples=300, deadline=None)
@given(values, st.lists(st.integers(min_value=0), max_size=12))
def test_whole_bodies_count_alike(value: Any, cuts: list[int]) -> None:
    raw = json.dumps(value, ensure_ascii=False).encode()
    split = _fed(raw, cuts)
    with mock.patch.object(jsonshape, "_outside_strings", jsonshape._outside_strings_re):
        assert _fed(raw, cuts) == split
