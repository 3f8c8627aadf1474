"""The person a run talks to: what the workflow shows and asks, as one small protocol.

The workflow (``flow.py``, ``drift.py``, ``links.py``, ``answers.py``) never prints and
never reads a terminal: it calls a ``Person``. ``promoter run`` passes one that prints to
the console and asks at the terminal (``promoter.cli.run_person``); ``--json`` passes one
whose words go to stderr. Text is console markup (``[bold]``…); a value put into it is
``escape``d first.

An answer is a ``Consent``: ``"yes"`` (the person's flag, given before anything was
shown: never an approval), ``"asked"`` (a yes at the terminal: a person saw the
question), or None (no, or nobody to ask).

Deliberately not here: what is asked when (the workflow's), and how a terminal is reset
or a diff paged (the CLI's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

__all__ = ["Consent", "Person", "escape"]

Consent = Literal["yes", "asked"] | None


def escape(text: str) -> str:
    """``text`` shown as it is, never read as console markup: rich's ``escape``, loaded
    only for a string it changes (one with a ``[`` or ending in a backslash)."""
    if "[" not in text and not text.endswith("\\"):
        return text
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class Person(Protocol):
    """Who runs ``promoter run``: told what happens, shown the review, asked."""

    @property
    def yes(self) -> bool:
        """Whether the person's flag (``--yes``) answered before anything was shown: nobody
        will be asked, so a step's bundle is promoted with its evidence in one request."""

    def say(self, text: str) -> None:
        """A line of progress (stdout for the CLI)."""

    def warn(self, text: str) -> None:
        """A line about something that went wrong or needs the person (stderr)."""

    def review(
        self,
        bundle: dict[str, Any] | None,
        diff: Mapping[str, Any],
        receipt: dict[str, Any] | None,
        *,
        hint: str | None,
    ) -> None:
        """The bundle to decide on: its summary, its diff (``hint``: how to see the rest of a
        cut diff) and its verification receipt (a merged bundle: its diff only)."""

    def approve(
        self, unseen: Sequence[Mapping[str, Any]], *, gate: str = "", bundle: str = ""
    ) -> Consent:
        """Promote what was shown? ``unseen``: the files the diff did not show in full,
        confirmed as well (protocol: api#every-byte-reviewable), ``bundle`` named in the
        command that reads one whole; ``gate``: what a yes does when the promotion is held
        for approval, said with the question."""

    def agree(self, question: str, *, no_terminal: str) -> Consent:
        """A yes/no question whose default is yes (``no_terminal``: said when nobody can be
        asked and no flag answered)."""

    def agree_to_part(self, question: str) -> bool:
        """A question a flag never answers (a part is never promoted unasked)."""
