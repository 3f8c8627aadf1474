"""Styled text without rich: runs of text, each with a rich style name, made into a rich
``Text`` only when printed where rich colours it.

``Styled`` holds what the command line's diff and summary lines are built of (the
subset of ``rich.text.Text`` they use: ``append``, ``append_text``, ``+``, ``plain``).
Printed by ``promoter.cli.common``'s consoles, it is written as its plain text off a
terminal when rich would write the same bytes, and handed to rich (``__rich__``, the
``Text`` rich would have been given) otherwise. It neither reads markup nor prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["Styled"]


class Styled:
    """Runs of text with their styles (``""`` for none), in order."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []

    def append(self, text: str, style: str | None = None) -> Styled:
        """Add ``text`` in ``style`` (as ``Text.append`` of a string)."""
        self.runs.append((text, style or ""))
        return self

    def append_text(self, other: Styled) -> Styled:
        """Add every run of ``other`` (as ``Text.append_text``)."""
        self.runs.extend(other.runs)
        return self

    def __add__(self, other: Styled) -> Styled:
        joined = Styled()
        joined.runs = [*self.runs, *other.runs]
        return joined

    @property
    def plain(self) -> str:
        """The text without its styles."""
        return "".join(text for text, _ in self.runs)

    def __rich__(self) -> Text:
        """The rich ``Text`` of the same runs (rich strips control codes as it appends)."""
        from rich.text import Text

        out = Text()
        for text, style in self.runs:
            out.append(text, style=style or None)
        return out
