"""Pages of a review diff, joined, are the whole diff, byte for byte
(protocol: api#every-byte-reviewable).

``promoter.engine.review.diff._Output`` is fed the lines of several files, from a
cursor, for a page size; following ``next`` from the start must give pages that each
fit the limit (or hold one character larger than it), always move on, and join to exactly the text of one unbounded answer,
whatever the lines (multi-byte characters, lines longer than a page, empty files), and
each file's ``shown`` must say whether this page holds all of it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.engine.review.diff import Cursor, _Output

line = st.builds(lambda text: text + "\n", st.text(alphabet="ab é€😀<>", max_size=30))
files = st.lists(st.lists(line, min_size=1, max_size=8), min_size=1, max_size=5)


def _page(
    content: list[list[str]], limit: int, start: Cursor
) -> tuple[str, Cursor | None, list[str]]:
    out = _Output(limit, start)
    shown = []
    for index, lines in enumerate(content):
        out.begin(index)
        for text in lines:
            out.add(text)
        shown.append(out.shown)
    return "".join(out.parts), out.next, shown


@settings(max_examples=300, deadline=None)
@given(content=files, limit=st.integers(min_value=1, max_value=64))
def test_pages_join_to_the_whole_diff(content: list[list[str]], limit: int) -> None:
    whole = "".join("".join(lines) for lines in content)
    pages: list[str] = []
    start: Cursor = (0, 0)
    while True:
        text, following, shown = _page(content, limit, start)
        assert len(text.encode()) <= max(limit, 4)  # a character larger than a page: alone
        pages.append(text)
        if following is None:
            break
        assert following > start  # every page moves on
        start = following
    assert "".join(pages) == whole
    first, following, shown = _page(content, 1 << 20, (0, 0))
    assert (first, following, shown) == (whole, None, ["full"] * len(content))
