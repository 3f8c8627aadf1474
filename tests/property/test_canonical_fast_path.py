"""Property: the fast canonical path gives exactly rfc8785's bytes."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.domain.canonical import canonical_bytes

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
keys = st.one_of(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=8), texts)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1), texts
)
documents: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=30,
)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(documents)
def test_canonical_bytes_equal_rfc8785(document: Any) -> None:
    assert canonical_bytes(document) == rfc8785.dumps(document)


def test_control_characters_and_separators_match() -> None:
    document = {"s": "".join(chr(c) for c in range(0x20)) + '\x7f\u2028\u2029"\\/é😀'}
    assert canonical_bytes(document) == rfc8785.dumps(document)
