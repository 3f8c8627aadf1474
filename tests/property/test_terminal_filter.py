"""Property: whatever a command writes, the filtered bytes leave a terminal as they found it.

The oracle is a terminal emulator (pyte): promoter's two lines are drawn first, then the
filtered output of any byte string built from the pieces terminals act on. Afterwards
promoter's lines are intact, the cursor is at or below the line it started on, no scroll
region, mode, title or charset changed, and the bytes are the same however the input was
split into reads.
"""

from __future__ import annotations

import re

import pyte
from hypothesis import given, settings
from hypothesis import strategies as st

from promoter.executor.terminal import OutputFilter

_PIECES = [
    b"\x1b",
    b"[",
    b"]",
    b"P",
    b"_",
    b"^",
    b"X",
    b"?",
    b">",
    b"1",
    b"2",
    b"5",
    b"8",
    b"25",
    b"38",
    b"1049",
    b";",
    b":",
    b" ",
    b"!",
    b"#",
    b"(",
    b"0",
    b"m",
    b"r",
    b"H",
    b"A",
    b"J",
    b"h",
    b"l",
    b"c",
    b"M",
    b"7",
    b"8",
    b"\\",
    b"\x07",
    b"\x18",
    b"\x0e",
    b"\n",
    b"\r",
    b"\t",
    b"\b",
    b"\x9b",
    b"\x9d",
    b"\xc2\x9b",
    b"\xc2\x9d",
    b"\xc2\x9c",
    b"\xe2\x9c\x93",
    b"\xe2",
    b"text",
]
# a sequence as terminals read it: an introducer, parameters, a final (or none)
_SEQUENCE = st.tuples(
    st.sampled_from(
        [b"\x1b[", b"\x1b]", b"\x1bP", b"\x1b_", b"\x1b(", b"\x1b#", b"\x1b", b"\xc2\x9b"]
    ),
    st.lists(
        st.sampled_from(
            [b"1", b"2", b"5", b"8", b"25", b"38", b"1049", b";", b":", b"?", b">", b" "]
        ),
        max_size=6,
    ),
    st.sampled_from(
        [
            b"m",
            b"r",
            b"H",
            b"A",
            b"J",
            b"h",
            b"l",
            b"c",
            b"M",
            b"7",
            b"q",
            b"t",
            b"0",
            b"\x07",
            b"\x1b\\",
            b"",
        ]
    ),
).map(lambda parts: parts[0] + b"".join(parts[1]) + parts[2])
_INPUT = st.lists(st.one_of(st.sampled_from(_PIECES), _SEQUENCE), max_size=40).map(b"".join)
_SHAPE = re.compile(r"(?:[^\x00-\x1f\x7f-\x9f]|[\n\r\t\b]|\x1b\[[0-9;:]*m)*", re.DOTALL)
PROMOTER = b"promoter line one\r\npromoter line two\r\n"


def _filtered(data: bytes, cuts: list[int]) -> bytes:
    out = OutputFilter()
    shown, start = [], 0
    for cut in sorted(cuts):
        shown.append(out.feed(data[start:cut]))
        start = cut
    shown.append(out.feed(data[start:]))
    return b"".join(shown) + out.finish()


@settings(max_examples=400, deadline=None)
@given(_INPUT, st.lists(st.integers(min_value=0, max_value=240), max_size=8))
def test_filtered_output_leaves_the_terminal_as_it_found_it(data: bytes, cuts: list[int]) -> None:
    whole = _filtered(data, [])
    assert _filtered(data, [min(c, len(data)) for c in cuts]) == whole
    assert _SHAPE.fullmatch(whole.decode("utf-8"))

    screen = pyte.Screen(80, 200)
    stream = pyte.ByteStream(screen)
    stream.feed(PROMOTER)
    modes, charsets = set(screen.mode), (screen.charset, screen.g0_charset, screen.g1_charset)
    stream.feed(whole)
    assert screen.display[0].rstrip() == "promoter line one"
    assert screen.display[1].rstrip() == "promoter line two"
    assert screen.cursor.y >= 2
    assert screen.margins is None
    assert set(screen.mode) == modes
    assert (screen.title, screen.icon_name) == ("", "")
    assert not screen.cursor.hidden
    assert (screen.charset, screen.g0_charset, screen.g1_charset) == charsets
