"""The characters that can hide code or pose as others, and text with each of them shown.

``visible`` writes every bidirectional control, invisible character and control
character of a text (and a carriage return not ending a line) as ``<U+XXXX>``, and a byte
that is not UTF-8 (decoded with ``surrogateescape``) as ``\\xNN``, so a line or a name
reads as what it is (protocol: api#what-a-review-shows). Every surface that shows a
path or a line of a bundle to a person uses it: the review's diff, the console's pages,
the command line's tables. ``one_line`` also shows a line feed, tab and carriage return,
for a name printed inside a line of promoter's own (a directory of the person's worktree
may hold any of them): it never breaks that line or prints one that looks like promoter's.

Pure: the standard library's ``re`` only, so the person's command line can load it
without the daemon's side. Not here: flags and scans of a whole file
(``promoter.engine.review.scan``).
"""

from __future__ import annotations

import re

__all__ = ["BIDI", "CONTROL", "INVISIBLE", "one_line", "visible"]

# Bidirectional controls (Trojan Source, CVE-2021-42574): embeddings, overrides,
# isolates, marks.
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Characters that show nothing: zero-width space/joiners, line and paragraph
# separators, word joiner and invisible operators, soft hyphen, Mongolian vowel
# separator, combining grapheme joiner, Hangul fillers, tag characters, BOM (but not as
# a file's first character).
INVISIBLE = (
    "\u00ad\u034f\u115f\u1160\u180e\u200b-\u200d\u2028\u2029\u2060-\u2064"
    "\u3164\ufeff\uffa0\U000e0000-\U000e007f"
)
# C0 controls but tab and line feed, DEL, C1 controls (a carriage return is one unless
# it ends a line).
CONTROL = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
_HIDDEN = re.compile(f"[{BIDI}{INVISIBLE}{CONTROL}\udc80-\udcff]|\r(?!\n|$)")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char[0])
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"<U+{code:04X}>"


def visible(text: str) -> str:
    """``text`` (decoded with ``surrogateescape``) with every hidden character shown."""
    return _HIDDEN.sub(_escape, text)


_BREAKS = str.maketrans({"\n": "<U+000A>", "\t": "<U+0009>", "\r": "<U+000D>"})


def one_line(text: str) -> str:
    """``visible(text)`` with a line feed, tab and carriage return shown as ``<U+XXXX>``
    too: a name inside a line of promoter's own never starts a line of its own."""
    return visible(text).translate(_BREAKS)
