"""The builder's index reader refuses, never crashes on, an index it cannot read."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.executor.seed_index import NotPlain, plain_index


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([2, 3, 4]), count=st.integers(0, (1 << 32) - 1), body=st.binary())
def test_any_bytes_after_a_header_give_gitlinks_or_not_plain(
    version: int, count: int, body: bytes
) -> None:
    data = b"DIRC" + struct.pack(">II", version, count) + body
    try:
        result = plain_index(data)
    except NotPlain:
        return
    assert isinstance(result.gitlinks, tuple) and isinstance(result.attributes, tuple)
