"""``OutputFilter``: what a sandboxed command's output may put on the person's terminal.

Each class of control the command could use against the review
(protocol: runs#terminal-drawn-by-promoter, TESTS E1) is written between two letters and must vanish
whole; text, the four kept controls and colours pass byte for byte; a sequence split anywhere is still recognised; memory stays
bounded whatever the command writes.
"""

from __future__ import annotations

import tracemalloc

import pytest

from promoter.executor.terminal import OutputFilter

DROPPED = {
    "scroll region (DECSTBM)": b"\x1b[1;2r",
    "scroll region reset": b"\x1b[r",
    "cursor position (CUP)": b"\x1b[5;1H",
    "cursor home": b"\x1b[H",
    "cursor position (HVP)": b"\x1b[3;3f",
    "cursor up": b"\x1b[2A",
    "cursor down": b"\x1b[B",
    "cursor forward": b"\x1b[3C",
    "cursor back": b"\x1b[9D",
    "cursor previous line": b"\x1b[2F",
    "cursor column": b"\x1b[40G",
    "line position": b"\x1b[7d",
    "erase display": b"\x1b[2J",
    "erase scrollback": b"\x1b[3J",
    "erase line": b"\x1b[K",
    "insert lines": b"\x1b[5L",
    "delete lines": b"\x1b[5M",
    "scroll up": b"\x1b[4S",
    "scroll down": b"\x1b[4T",
    "alternate screen 1049": b"\x1b[?1049h",
    "alternate screen 47": b"\x1b[?47h",
    "alternate screen left": b"\x1b[?1049l",
    "hidden cursor": b"\x1b[?25l",
    "origin mode": b"\x1b[?6h",
    "autowrap off": b"\x1b[?7l",
    "mouse reports": b"\x1b[?1000h",
    "bracketed paste": b"\x1b[?2004h",
    "insert mode (SM)": b"\x1b[4h",
    "left/right margins": b"\x1b[?69h\x1b[5;10s",
    "device status report": b"\x1b[6n",
    "device attributes": b"\x1b[c",
    "secondary device attributes": b"\x1b[>c",
    "title report (window op)": b"\x1b[21t",
    "window resize (window op)": b"\x1b[8;1;1t",
    "cursor style (intermediate)": b"\x1b[2 q",
    "soft reset (DECSTR)": b"\x1b[!p",
    "modifyOtherKeys (private m)": b"\x1b[>4;1m",
    "private SGR": b"\x1b[?1m",
    "clipboard (OSC 52, BEL)": b"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07",
    "clipboard (OSC 52, ST)": b"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\",
    "title (OSC 0)": b"\x1b]0;pwned\x07",
    "title (OSC 2)": b"\x1b]2;pwned\x1b\\",
    "hyperlink (OSC 8)": b"\x1b]8;;https://evil.example\x1b\\",
    "OSC ended by C1 ST": b"\x1b]0;pwned\xc2\x9c",
    "DCS (DECRQSS)": b"\x1bP$qm\x1b\\",
    "DCS sixel": b"\x1bPq#0;2;0;0;0#0!10~\x1b\\",
    "APC": b"\x1b_Gf=100;AAAA\x1b\\",
    "PM": b"\x1b^private\x1b\\",
    "SOS": b"\x1bXstart\x1b\\",
    "full reset (RIS)": b"\x1bc",
    "save and restore cursor": b"\x1b7\x1b8",
    "index, reverse index, next line": b"\x1bD\x1bM\x1bE",
    "tab set": b"\x1bH",
    "charset G0 line drawing": b"\x1b(0",
    "charset G1": b"\x1b)0",
    "shift out and in": b"\x0e\x0f",
    "screen alignment (DECALN)": b"\x1b#8",
    "keypad modes": b"\x1b=\x1b>",
    "8-bit CSI": b"\x9b",
    "C1 CSI as UTF-8": b"\xc2\x9b",
    "C1 OSC as UTF-8": b"\xc2\x9d",
    "C1 DCS as UTF-8": b"\xc2\x90",
    "C1 reverse index as UTF-8": b"\xc2\x8d",
    "bell": b"\x07",
    "vertical tab and form feed": b"\x0b\x0c",
    "NUL and DEL": b"\x00\x7f",
    "stray ST": b"\x1b\\",
    "conceal (SGR 8)": b"\x1b[8m",
    "font (SGR 11)": b"\x1b[11m",
    "colour among a forbidden code": b"\x1b[31;8m",
    "256-colour index out of range": b"\x1b[38;5;256m",
    "truecolour missing a component": b"\x1b[38;2;1;2m",
    "truecolour sub-parameters out of range": b"\x1b[38:2::1:2:300m",
    "extended colour of an unknown kind": b"\x1b[38;3;1m",
    "parameters past the bound": b"\x1b[" + b"1;" * 200 + b"m",
}

KEPT_SGR = [
    b"\x1b[m",
    b"\x1b[0m",
    b"\x1b[31m",
    b"\x1b[1;32m",
    b"\x1b[22;39;49m",
    b"\x1b[97;104m",
    b"\x1b[38;5;208m",
    b"\x1b[48;2;10;20;30m",
    b"\x1b[38:2::10:20:30m",
    b"\x1b[38:2:10:20:30m",
    b"\x1b[58:5:9m",
    b"\x1b[4:3m",
]


def _filtered(data: bytes, **options: bool) -> bytes:
    out = OutputFilter(**options)
    return out.feed(data) + out.finish()


@pytest.mark.parametrize("sequence", DROPPED.values(), ids=DROPPED.keys())
def test_every_control_but_colour_is_dropped_whole(sequence: bytes) -> None:
    # U+FFFD stands for the lone 8-bit CSI (invalid UTF-8): shown, never interpreted
    expected = b"A\xef\xbf\xbdB\n" if sequence == b"\x9b" else b"AB\n"
    assert _filtered(b"A" + sequence + b"B") == expected


@pytest.mark.parametrize("sequence", KEPT_SGR)
def test_colours_pass_byte_for_byte_and_are_reset_at_the_end(sequence: bytes) -> None:
    coloured = sequence not in (b"\x1b[m", b"\x1b[0m")
    tail = b"\x1b[0m" if coloured else b""
    assert _filtered(b"A" + sequence + b"B\n") == b"A" + sequence + b"B\n" + tail


def test_text_and_the_four_kept_controls_pass_unchanged() -> None:
    text = "build: 3 tests\tok\r\nprogress 50%\rprogress 100%\b!\nnaïve ✓ 漢字\n".encode()
    assert _filtered(text) == text


def test_a_sequence_split_at_every_byte_is_still_dropped() -> None:
    data = b"x\x1b]52;c;aGk=\x1b\\y\x1b[1;2rz\x1b[31m\xe2\x9c\x93\x1b[0m\n"
    out = OutputFilter()
    shown = b"".join(out.feed(data[i : i + 1]) for i in range(len(data))) + out.finish()
    assert shown == b"xyz\x1b[31m\xe2\x9c\x93\x1b[0m\n"


def test_esc_inside_a_string_ends_it_and_begins_the_next_sequence() -> None:
    assert _filtered(b"\x1b]0;t\x1b[32mgreen\x1b[0m\n") == b"\x1b[32mgreen\x1b[0m\n"
    assert _filtered(b"\x1b]0;t\x1b[1;2rtext\n") == b"text\n"


def test_cancel_abandons_a_sequence_and_what_follows_is_text() -> None:
    assert _filtered(b"\x1b[1;2\x18r\n") == b"r\n"
    assert _filtered(b"\x1b]0;title\x1a shown\n") == b" shown\n"


def test_a_c0_inside_a_sequence_is_executed_and_the_sequence_still_dropped() -> None:
    assert _filtered(b"a\x1b[1\n;2rb\n") == b"a\nb\n"


def test_invalid_utf8_is_shown_as_replacement_characters() -> None:
    assert _filtered(b"\xff\xfe ok\n") == "\ufffd\ufffd ok\n".encode()


def test_ascii_only_shows_every_other_character_as_a_question_mark() -> None:
    # in an 8-bit terminal, U+011B's second byte (0x9B) would read as a CSI
    assert _filtered("ě1;2r ✓ ok\n".encode(), ascii_only=True) == b"?1;2r ? ok\n"


def test_the_end_drops_an_unfinished_sequence_and_ends_the_line() -> None:
    out = OutputFilter()
    assert out.feed(b"\x1b[31mred\x1b[1;") == b"\x1b[31mred"
    assert out.finish() == b"\x1b[0m\n"
    assert OutputFilter().finish() == b""


def test_an_unterminated_string_is_consumed_in_bounded_memory() -> None:
    out = OutputFilter()
    chunk = b"A" * (1 << 16)
    tracemalloc.start()
    try:
        assert out.feed(b"\x1b]52;c;") == b""
        for _ in range(160):  # 10 MiB of clipboard payload, never terminated until the end
            assert out.feed(chunk) == b""
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert out.feed(b"\x07after\n") == b"after\n"


def test_an_endless_csi_is_consumed_in_bounded_memory() -> None:
    out = OutputFilter()
    tracemalloc.start()
    try:
        out.feed(b"\x1b[")
        for _ in range(24):  # 1.5 MiB: a filter that kept it would pass the bound
            assert out.feed(b"1;" * (1 << 15)) == b""
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert out.feed(b"mafter\n") == b"after\n"
