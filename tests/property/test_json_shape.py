"""Property: the streaming JSON shape count never undercounts, however the body is cut.

For any JSON value and any split of its bytes into chunks, ``ShapeBudget`` counts at least
as many values as ``json.loads`` builds and refuses exactly the values that nest deeper
than its limit; brackets, quotes and backslashes inside strings are text, not structure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.api.jsonshape import ShapeBudget
from promoter.errors import JsonTooDeep, JsonTooManyItems

tricky = st.text(alphabet='[]{}",:\\ab\u00e9\U0001f600', max_size=8)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), tricky)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(tricky, inner, max_size=4)
    ),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


def _count(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(map(_count, value))
    if isinstance(value, dict):
        return 1 + sum(map(_count, value.values()))
    return 1


def _feed(budget: ShapeBudget, raw: bytes, cuts: list[int]) -> None:
    start = 0
    for cut in [*sorted({c % (len(raw) + 1) for c in cuts}), len(raw)]:
        budget.feed(raw[start:cut])
        start = cut


@settings(max_examples=300, deadline=None)
@given(values, st.lists(st.integers(min_value=0), max_size=12), st.booleans())
def test_counts_never_undercount_and_depth_is_exact(
    value: Any, cuts: list[int], ascii_only: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    budget = ShapeBudget(max_depth=1000, max_items=10**9)
    _feed(budget, raw, cuts)
    assert budget.items >= _count(value)
    assert budget.depth == 0
    depth = _depth(value)
    _feed(ShapeBudget(max_depth=depth, max_items=10**9), raw, cuts)
    if depth:
        with pytest.raises(JsonTooDeep):
            _feed(ShapeBudget(max_depth=depth - 1, max_items=10**9), raw, cuts)
    with pytest.raises(JsonTooManyItems):
        _feed(ShapeBudget(max_depth=1000, max_items=_count(value) - 1), raw, cuts)
