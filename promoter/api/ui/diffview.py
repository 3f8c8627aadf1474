"""A bundle diff cut into per-file blocks of classified lines, for the review page.

``file_blocks`` splits the unified diff of ``promoter.engine.review.diff`` at its
``diff --git`` headers and tags every line (``add``, ``del``, ``hunk``, ``meta``,
``ctx``) so the template can colour it; a block longer than ``FOLD_LINES`` is marked to
be folded. The lines stay text: escaping is the template's (autoescape). ``page_bytes``
is the console's page of a diff: the review page's first page, and each page of one
file's own page (never more than the daemon's ``review_diff_page_bytes``).

Deliberately not here: building the diff (the engine's) or any HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from promoter.config import Settings

FOLD_LINES = 200
PAGE_BYTES = 256 * 1024


def page_bytes(settings: Settings) -> int:
    """The console's page of a diff: ``PAGE_BYTES``, or the daemon's page when smaller."""
    return min(PAGE_BYTES, settings.review_diff_page_bytes)


@dataclass
class Block:
    lines: list[tuple[str, str]] = field(default_factory=list)
    # set by the review page for a file whose hunks may be chosen one by one
    choosable: bool = False
    path: str = ""
    index: int = 0

    @property
    def hunks(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "hunk")

    @property
    def folded(self) -> bool:
        return len(self.lines) > FOLD_LINES


def _kind(line: str, in_hunk: bool) -> str:
    if line.startswith("@@"):
        return "hunk"
    if in_hunk and line.startswith("+"):
        return "add"
    if in_hunk and line.startswith("-"):
        return "del"
    if in_hunk:
        return "ctx"
    return "meta"


def file_blocks(unified_diff: str) -> list[Block]:
    blocks: list[Block] = []
    in_hunk = False
    for line in unified_diff.splitlines():
        if line.startswith("diff --git ") or not blocks:
            blocks.append(Block())
            in_hunk = False
        kind = _kind(line, in_hunk)
        in_hunk = in_hunk or kind == "hunk"
        blocks[-1].lines.append((kind, line))
    return blocks
