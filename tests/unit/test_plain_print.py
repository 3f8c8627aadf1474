"""The command line's plain printing writes exactly what rich would, and only then.

``promoter.cli.common``'s ``console.print`` writes a string itself off a terminal when
rich would print it as it is; ``escape`` returns a string it would not change. Both are
compared with rich's own output for strings of every kind that matters: markup, emoji
codes, tabs, control and unprintable characters, wide and combining characters, blank
lines, trailing spaces, and lines far longer than any terminal.
"""

from __future__ import annotations

import io
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from rich.markup import escape as rich_escape

from promoter.cli import common

FIXED = [
    "",
    "a",
    "trailing   ",
    "  leading",
    "a\nb",
    "a\n\n",
    "\n",
    "wide 漢字, é, ﬁ, 😀",
    "x" * 5000,
    "emoji :smile: here",
    "[bold]x[/]",
    "\\[not markup]",
    "ends in a backslash\\",
    "tab\there",
    "cr\rx",
    "\x1b[31mred",
    "zero\u200bwidth",
    "run_1  demo  1 step(s), last awaiting_approval  2.1 MiB  /tmp/x/clone",
    "[bold green]valid[/] PatchVerificationReceiptV1 abc (signed by 0b)",
    "[green]✓[/] envelope: DSSE v1, payloadType application/vnd.in-toto+json",
    "[red]mismatch[/] src/a.py: urn:promoter:receipt",
    "[bold]x[/bold] [green bold]y[/bold green] [italic]z",
    "[/]",
    "[bold]a[/green]",
    "[foo]unknown style[/foo]",
    "[link=https://x]l[/link]",
    "[@click]a[/]",
    "x:[bold]:smile:",
    "[green]✓[/] statement: predicateType urn:promoter:receipt:verification:v1",
    ":thumbs_up-emoji: :not_an_emoji: :smile-text:",
    "[1] not a tag, [Bold] neither",
    "a \\[bold] escaped",
]
OPTIONS: list[dict[str, Any]] = [
    {},
    {"highlight": False},
    {"soft_wrap": True, "highlight": False},
    {"end": ""},
    {"markup": False},
    {"emoji": False, "markup": False},
    {"style": "bold"},
    {"soft_wrap": False},
]


def _samples() -> list[str]:
    rng = random.Random(7)
    alphabet = "ab \n[]:\\\t漢é😀\u0301\u00a0/.-_\x7f\r"
    drawn = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(600)]
    pieces = [
        "[bold]",
        "[/]",
        "[/bold]",
        "[green]",
        "[/green]",
        "[bold green]",
        "[foo]",
        "[/bold green]",
        "[green bold]",
        "[",
        "]",
        ":",
        "x",
        " ",
        "\\",
        ":smile:",
        "é",
    ]
    tagged = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(600)]
    return FIXED + drawn + tagged


@pytest.fixture
def off_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    common._made.clear()
    yield
    common._made.clear()


def _printed(how: Any, text: str, options: dict[str, Any]) -> tuple[str, bool]:
    """What ``how(text, **options)`` wrote to stdout (or the error rich raised), and
    whether it did so without making a rich console."""
    common._made.clear()
    out = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        how(text, **options)
    except Exception as exc:  # rich refuses some markup: the same refusal either way
        return repr(exc), False
    finally:
        sys.stdout = saved
    return out.getvalue(), False not in common._made


def test_plain_print_writes_what_rich_writes(off_terminal: None) -> None:
    plain = 0
    for text in _samples():
        for options in OPTIONS:
            ours, without_rich = _printed(common.console.print, text, options)
            theirs, _ = _printed(common.rich_console(stderr=False).print, text, options)
            assert ours == theirs, (text, options)
            plain += without_rich
    assert plain > 300  # the plain path is taken, not only the fallback
    line = "run_1  demo  1 step(s), last awaiting_approval  2.1 MiB  /tmp/x/clone"
    assert _printed(common.console.print, line, {"highlight": False}) == (line + "\n", True)
    styled = "[bold green]valid[/] PatchVerificationReceiptV1 (signed by 0b)"
    assert _printed(common.console.print, styled, {}) == (
        "valid PatchVerificationReceiptV1 (signed by 0b)\n",
        True,
    )


@pytest.mark.parametrize(("variable", "value"), [("FORCE_COLOR", "1"), ("TTY_COMPATIBLE", "1")])
def test_a_forced_terminal_is_left_to_rich(
    off_terminal: None, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    printed, without_rich = _printed(common.console.print, "plain", {})
    assert not without_rich
    assert printed == _printed(common.rich_console(stderr=False).print, "plain", {})[0]


def test_escape_is_riches_escape() -> None:
    for text in [*_samples(), "a\\", "a\\\\", "\\", "[x]\\", "x[/]", "[a]"]:
        assert common.escape(text) == rich_escape(text), text
