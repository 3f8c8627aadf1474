"""A small file's lines for ``difflib`` are cut as git cuts them: at line feeds only.

``promoter.engine.review.diff._split`` must equal the plain split at ``\\n`` (each line
with its own, a last line without one as it is), whatever else the bytes hold: carriage
returns, the separators ``str.splitlines`` would also cut at (vertical tab, form feed,
``\\x1c``-``\\x1e``, NEL, U+2028, U+2029), bytes that are not UTF-8, NUL.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.engine.review.diff import _split

PIECES = [
    b"\n",
    b"\r",
    b"\r\n",
    b"a",
    b"\x0b",
    b"\x0c",
    b"\x1c",
    b"\x1e",
    b"\x00",
    b"\xff",
    b"\xe2\x80",
    "\x85".encode(),
    "\u2028".encode(),
    "\u2029".encode(),
    "é".encode(),
]
contents = st.lists(st.sampled_from(PIECES), max_size=16).map(b"".join) | st.binary(max_size=64)


def _plain(data: bytes) -> list[str]:
    parts = data.decode("utf-8", "surrogateescape").split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


@settings(max_examples=400, deadline=None)
@given(contents)
def test_lines_are_cut_at_line_feeds_only(data: bytes) -> None:
    assert _split(data) == _plain(data)


def test_a_last_line_without_its_feed_and_an_empty_file() -> None:
    assert _split("a\r\nb\x85c\u2028\nd".encode()) == ["a\r\n", "b\x85c\u2028\n", "d"]
    assert _split(b"\xff\x0c\n") == ["\udcff\x0c\n"]
    assert _split(b"") == []
    assert _split(b"\n\n") == ["\n", "\n"]
