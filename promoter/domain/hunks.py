"""Hunks of a text change, and the bytes of old content with chosen hunks applied.

A hunk is what the review diff shows between two ``@@`` lines: the review diff of a small
file (``promoter.engine.review.diff``) is ``difflib.unified_diff`` with three lines of
context over lines split at line feeds only, so the hunks here are its groups of
opcodes, numbered from 1 in the order the diff prints them. ``compose`` gives old with
the chosen hunks applied and the others left as they were: byte for byte what
``git apply`` of a patch holding only those hunks writes (a property test holds the two
equal).

Pure: no I/O, no store. Deliberately not here: which files may be composed (the
review's ``promoter.engine.review.partial``) or how the diff is rendered.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["CONTEXT", "Hunk", "compose", "hunks", "split_lines"]

CONTEXT = 3  # lines of context, as the review diff and git's default


@dataclass(frozen=True)
class Hunk:
    """One hunk: its number, the old and new line ranges it covers (0-based, half-open)."""

    number: int
    old_start: int
    old_end: int
    new_start: int
    new_end: int


def split_lines(data: bytes) -> list[str]:
    """Lines as git splits them (at line feeds only), decoded losslessly."""
    parts = data.decode("utf-8", "surrogateescape").split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _groups(old: list[str], new: list[str]) -> list[list[tuple[str, int, int, int, int]]]:
    matcher = difflib.SequenceMatcher(None, old, new)
    return list(matcher.get_grouped_opcodes(CONTEXT))


def hunks(old: bytes, new: bytes) -> list[Hunk]:
    """The hunks of the review diff from ``old`` to ``new``, numbered from 1."""
    found: list[Hunk] = []
    for number, group in enumerate(_groups(split_lines(old), split_lines(new)), start=1):
        changed = [op for op in group if op[0] != "equal"]
        found.append(Hunk(number, changed[0][1], changed[-1][2], changed[0][3], changed[-1][4]))
    return found


def compose(old: bytes, new: bytes, chosen: set[int] | frozenset[int]) -> bytes:
    """``old`` with the hunks numbered in ``chosen`` applied, every other line as in old.

    Raises ``ValueError`` for a number that is not a hunk of this diff.
    """
    old_lines, new_lines = split_lines(old), split_lines(new)
    groups = _groups(old_lines, new_lines)
    unknown = sorted(n for n in chosen if not 1 <= n <= len(groups))
    if unknown:
        raise ValueError(f"no hunk {unknown} (the diff has {len(groups)})")
    out: list[str] = []
    at = 0  # the next old line not yet written
    for number, group in enumerate(groups, start=1):
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                continue
            out.extend(old_lines[at:i1])
            out.extend(new_lines[j1:j2] if number in chosen else old_lines[i1:i2])
            at = i2
    out.extend(old_lines[at:])
    return "".join(out).encode("utf-8", "surrogateescape")
