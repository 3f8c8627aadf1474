"""The answer of ``GET /v1/bundles/{id}/diff`` as models: the page, its files, the unseen.

These models list its members (every one) so clients and the contract tests know them; the
engine builds the answer as the ``TypedDict``s generated from them
(``promoter.domain.answers``), so mypy holds what it builds to this shape. The meaning of
each flag is in ``docs/guide/review.md`` and ``promoter.engine.review.scan``.

Deliberately not here: building or validating the answer (the engine's).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from promoter.domain.views import Reply

__all__ = ["BundleDiffView", "DiffFlag", "FileDiffView", "UnseenFileView"]

DiffFlag = Literal[
    "bidi_control",
    "binary",
    "ci_config",
    "control_character",
    "executable",
    "hook_path",
    "invisible_character",
    "large",
    "long_line",
    "mode_change",
    "not_utf8",
    "symlink",
]
Shown = Literal["full", "partial", "none"]
SHOWN = (
    "how much of the file's diff this answer holds: `full`, `partial` (cut, or begun on "
    "an earlier page) or `none`"
)


class FileDiffView(Reply):
    """One changed path: what it was, what it becomes, what to look at closely."""

    path: str
    path_shown: str = Field(description="the path with hidden characters as `<U+XXXX>`")
    operation: str
    old_mode: str | None
    new_mode: str | None
    old_bytes: int | None
    new_bytes: int | None
    old_sha256: str | None
    new_sha256: str | None
    old_lines: int | None = Field(description="lines of the old content (null: none)")
    new_lines: int | None = Field(description="lines of the new content (null: none)")
    longest_line: int | None = Field(
        description="bytes in the new content's longest line (null: summarized and no line "
        "over 1000 bytes, not measured)"
    )
    binary: bool = Field(description="a NUL byte in the first 8000 bytes of a side")
    summarized: bool = Field(
        description="not diffed in full: a side is over `max_file_bytes`, or the request's "
        "time for diffs was spent"
    )
    added: int | None = Field(
        description="lines added (null: not diffed for this page, which begins after it)"
    )
    removed: int | None
    flags: list[DiffFlag] = Field(
        description="what can hide code or make it run, sorted; from the file's own bytes, "
        "modes and path, never from whether its diff fits the answer"
    )
    symlink_target: str | None = Field(
        description="the new link's target text, hidden characters shown (null: no link)"
    )
    shown: Shown = Field(description=SHOWN)
    diff_bytes: int | None = Field(description="bytes of the file's whole diff text")
    rename_from: str | None = Field(
        default=None,
        description="a created path that is a rename: the deleted path it came from; its "
        "diff is against that path's old content (the bundle still deletes and creates)",
    )
    rename_from_shown: str | None = Field(
        default=None, description="`rename_from` with hidden characters as `<U+XXXX>`"
    )
    similarity: int | None = Field(
        default=None,
        description="a rename's similarity in percent (100: the same content; at least 50)",
    )
    renamed_to: str | None = Field(
        default=None,
        description="a deleted path that is a rename: the created path whose diff shows it",
    )


class UnseenFileView(Reply):
    """A file this answer does not show in full, and how to reach it."""

    path: str
    path_shown: str
    operation: str
    old_bytes: int | None
    new_bytes: int | None
    diff_bytes: int | None
    added: int | None
    removed: int | None
    flags: list[DiffFlag]
    shown: Shown = Field(description=SHOWN)
    summarized: bool = Field(description="its content is not diffed on any page")
    cursor: str | None = Field(
        description="the `cursor` of the page that shows it (null: summarized, nothing more)"
    )


class BundleDiffView(Reply):
    """A bundle's per-file summary and unified diff (or one path's), a page of at most
    `limit` bytes from `cursor`."""

    bundle_id: str
    files: list[FileDiffView]
    unified_diff: str
    truncated: bool
    limit: int
    max_file_bytes: int = Field(description="a side larger than this is summarized")
    path: str | None = Field(description="the one path asked for (null: the whole bundle)")
    cursor: str = Field(description="where this page begins, `I:K`")
    next_cursor: str | None = Field(description="where the next page begins (null: none)")
    unseen: list[UnseenFileView] = Field(
        description="every file this answer does not show in full, in bundle order"
    )
