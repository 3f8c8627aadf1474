"""The person at ``promoter run``'s terminal (protocol: runs#terminal-drawn-by-promoter).

``TerminalPerson`` is the ``promoter.executor.run.person.Person`` of the command line:
progress on stdout (stderr with ``--json``), the review (the bundle, its diff paged, the
receipt; with ``--yes`` the summary of the diff instead), questions at the terminal, and
``--yes`` a flag that never approves (protocol: runs#approvals). Before a review or a
question the terminal is reset to a known state (``_fresh_screen``): whatever the
command left of scroll regions, modes or the alternate screen is undone. A question is
typer's ``confirm`` as ``promoter.cli.question`` reads it (Ctrl-C ends it at once); Ctrl-C
at it is typer's ``Abort``, which ``interrupted`` tells from any other error without
importing typer.

Deliberately not here: the flags (``promoter.cli.run_cmd``, ``promoter.cli.run_args``)
or any step of the workflow (``promoter.executor.run``).
"""

from __future__ import annotations

import contextlib
import sys
import termios
from collections.abc import Mapping, Sequence
from typing import Any, Final

from promoter.cli.bundle_view import (
    diff_flags,
    diff_summary,
    diff_text,
    diff_unseen,
    print_bundle,
    print_diff,
    print_receipt,
)
from promoter.cli.common import console, err_console
from promoter.executor.run.person import Consent, escape
from promoter.executor.terminal import RESET

__all__ = ["TerminalPerson", "interrupted"]


def _confirm(question: str, *, default: bool = False, err: bool = False) -> bool:
    """A yes or no at the terminal (typer's ``confirm``: Ctrl-C is its ``Abort``, at once
    whenever it is pressed: ``promoter.cli.question``)."""
    from promoter.cli.question import confirm

    return confirm(question, default=default, err=err)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C: a ``KeyboardInterrupt``, or typer's ``Abort`` from a
    question (only ever raised once typer is loaded, so it is looked up, not imported)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    loaded = sys.modules.get("typer.exceptions")
    return loaded is not None and isinstance(exc, loaded.Abort)


def _fresh_screen() -> None:
    """The person's terminal to a known state before promoter draws a review or a question
    (protocol: runs#terminal-drawn-by-promoter): whatever the command left of scroll regions, modes
    or the alternate screen is undone, and keys typed before the question are discarded. Off a
    terminal, nothing."""
    sys.stdout.flush()
    if sys.stdout.isatty():
        sys.stdout.write(RESET)
        sys.stdout.flush()
    if sys.stdin.isatty():
        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


def _approve_here(
    yes: bool, unseen: Sequence[Mapping[str, Any]], gate: str = "", *, bundle: str = ""
) -> Consent:
    """``"yes"`` (the flag), ``"asked"`` (confirmed at the terminal), or None (declined).

    When the diff shown was cut (``unseen``: the files it did not show in full), the
    person confirms those files too, listed again at the question
    (protocol: api#every-byte-reviewable). ``gate``: what a yes does under the approval
    gate, said in the question (the approval itself, or only the request)."""
    return _approve_at(yes, unseen, stderr=False, gate=gate, bundle=bundle)


def _approve_at(
    yes: bool,
    unseen: Sequence[Mapping[str, Any]],
    *,
    stderr: bool,
    gate: str = "",
    bundle: str = "",
) -> Consent:
    """``_approve_here`` with the questions on stderr when ``stderr`` (``--json``)."""
    if yes:
        return "yes"
    if not sys.stdin.isatty():
        err_console.print("not a terminal: pass --yes to promote without asking")
        return None
    _fresh_screen()
    question = "Promote these changes into the worktree?"
    if gate:
        question = f"{gate}. {question}"
    if not _confirm(question, err=stderr):
        return None
    if unseen:
        out = err_console if stderr else console
        reader = f"promoter bundle diff {bundle or 'BUNDLE'}"  # the very bundle, to copy
        out.print(diff_unseen({"unseen": unseen}, reader), end="")
        question = f"Promote the {len(unseen)} file(s) not shown in full, as they are?"
        return "asked" if _confirm(question, err=stderr) else None
    return "asked"


class TerminalPerson:
    """The person at this command line (``promoter.executor.run.person.Person``): progress
    on stdout (stderr with ``--json``), questions at the terminal, ``--yes`` a flag.
    A plain class: made at each run's import, where a dataclass's methods are compiled."""

    __slots__ = ("json", "whole_diff", "yes")

    def __init__(self, yes: bool = False, whole_diff: bool = False, json: bool = False) -> None:
        self.yes: Final = yes
        self.whole_diff: Final = whole_diff  # --diff: the whole diff even with --yes
        self.json: Final = json

    def say(self, text: str) -> None:
        out = err_console if self.json else console
        out.print(text, soft_wrap=True, highlight=False)

    def warn(self, text: str) -> None:
        err_console.print(text, soft_wrap=True, highlight=False)

    def review(
        self,
        bundle: dict[str, Any] | None,
        diff: Mapping[str, Any],
        receipt: dict[str, Any] | None,
        *,
        hint: str | None,
    ) -> None:
        """At a terminal without ``--yes``: the bundle, its diff (paged) and the receipt.
        With ``--yes`` (or ``--json``) the summary of the diff instead, unless ``--diff``."""
        _fresh_screen()
        hint = hint or (f"promoter bundle diff {bundle['bundle_id']}" if bundle else "")
        if self.json:
            err_console.print(
                diff_summary(diff, hint) if not self.whole_diff else diff_text_of(diff),
                end="",
                soft_wrap=True,
                highlight=False,
            )
            return
        summary = self.yes and not self.whole_diff
        if bundle is not None:
            print_bundle(bundle, paths=not summary)  # the summary names every path
        if summary:
            console.print(diff_summary(diff, hint), end="", soft_wrap=True, highlight=False)
        else:
            print_diff(diff, pager=not self.yes, hint=hint)
        if receipt is not None:
            print_receipt(receipt)

    def approve(
        self, unseen: Sequence[Mapping[str, Any]], *, gate: str = "", bundle: str = ""
    ) -> Consent:
        if self.json:
            return _approve_at(self.yes, unseen, stderr=True, gate=gate, bundle=bundle)
        return _approve_here(self.yes, unseen, gate, bundle=bundle)

    def agree(self, question: str, *, no_terminal: str) -> Consent:
        if self.yes:
            self.say(f"{escape(question)} yes (--yes)")
            return "yes"
        if not sys.stdin.isatty():
            err_console.print(no_terminal, soft_wrap=True, highlight=False)
            return None
        return "asked" if _confirm(question, default=True, err=self.json) else None

    def agree_to_part(self, question: str) -> bool:
        if self.yes:
            err_console.print(
                "--yes never promotes a part: answer at a terminal to promote the rest"
            )
            return False
        if not sys.stdin.isatty():
            return False
        return _confirm(question, default=True, err=self.json)


def diff_text_of(diff: Mapping[str, Any]) -> Any:
    """The whole answer as ``print_diff`` shows it, for stderr (``--json --diff``)."""
    return diff_flags(diff) + diff_unseen(diff) + diff_text(diff["unified_diff"])
