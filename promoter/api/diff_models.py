"""The response model of ``GET /v1/bundles/{id}/diff``, for the OpenAPI document.

The route answers the dict ``promoter.engine.review.diff.bundle_diff`` builds; these
models list its members (every one) so clients and the contract tests know them. The
meaning of each flag is in ``docs/guide/review.md`` and ``promoter.engine.review.scan``.

Deliberately not here: building or validating the answer (the engine's).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from promoter.api.models import Reply

__all__ = ["BundleDiffView", "DiffFlag", "FileDiffView"]

DiffFlag = Literal[
    "bidi_control",
    "ci_config",
    "control_character",
    "executable",
    "hook_path",
    "invisible_character",
    "long_line",
    "not_utf8",
    "symlink",
]


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
    added: int
    removed: int
    flags: list[DiffFlag] = Field(description="what can hide code or make it run, sorted")
    symlink_target: str | None = Field(
        description="the new link's target text, hidden characters shown (null: no link)"
    )


class BundleDiffView(Reply):
    """A bundle's per-file summary and unified diff, cut at `limit` bytes."""

    bundle_id: str
    files: list[FileDiffView]
    unified_diff: str
    truncated: bool
    limit: int
    max_file_bytes: int = Field(description="a side larger than this is summarized")
