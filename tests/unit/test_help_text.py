"""``--help`` at the terminal's width: a command's help paragraphs are wrapped by the
terminal, not by the source's line breaks.

Each command's help is rendered as a person sees it (the installed ``promoter``, with
``COLUMNS`` set) at 80 and 120 columns: no line is wider than the terminal, and a line of
a paragraph ends early only where the next word would not fit (a line broken by a
docstring's newline ends early). Paragraph breaks, a synopsis of command lines and list
items stay as written (``reflow``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from promoter.cli.lazy import reflow

PROMOTER = Path(sys.executable).parent / "promoter"  # the installed entry point
COMMANDS = (
    ("keys", "rotate"),
    ("approve",),
    ("review",),
    ("receipt", "verify"),
    ("bundle", "diff"),
    ("hosts", "list"),
    ("run",),
)


def _help(width: int, *command: str) -> list[str]:
    done = subprocess.run(
        [str(PROMOTER), *command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": str(width)},
    )
    return done.stdout.splitlines()


def _paragraphs(lines: list[str]) -> list[list[str]]:
    """The help's text between its usage line and its first box, paragraph by paragraph,
    each line without the one column of padding either side."""
    body = lines[next(n for n, line in enumerate(lines) if "Usage: " in line) + 1 :]
    body = body[: next((n for n, line in enumerate(body) if line.startswith("╭")), len(body))]
    found: list[list[str]] = [[]]
    for line in body:
        if line.strip():
            found[-1].append(line[1:].rstrip())
        elif found[-1]:
            found.append([])
    return [paragraph for paragraph in found if paragraph]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_paragraphs_are_wrapped_at_the_terminals_width(
    width: int, command: tuple[str, ...]
) -> None:
    lines = _help(width, *command)
    assert all(len(line) <= width for line in lines), lines
    room = width - 2  # one column of padding either side
    synopsis = command == ("run",)
    for paragraph in _paragraphs(lines):
        if synopsis and paragraph[0].startswith("promoter run"):
            continue  # each command line of the synopsis stays a line of its own
        for line, after in pairwise(paragraph):
            # a line ends early only when the next word would not fit on it
            assert len(line) + 1 + len(after.split()[0]) > room, (line, after)


def test_keys_rotate_help_reads_as_one_paragraph_at_120_columns() -> None:
    paragraphs = _paragraphs(_help(120, "keys", "rotate"))
    assert [" ".join(p) for p in paragraphs] == [
        "Retire the active signing key now; new receipts are signed by a new key.",
        "Envelopes signed before still verify against the retired public key, which stays "
        "listed (GET /v1/keys) with its validity window. It needs the ledger and refuses, "
        "changing nothing, when there is none or it is not migrated. Exit codes: 0 rotated; "
        "78 ledger_missing (no ledger where the settings point), schema_mismatch (not "
        "migrated) or config_error (unreadable or inconsistent key files).",
    ]


def test_run_help_keeps_its_synopsis_one_command_a_line() -> None:
    starts = [line for line in _paragraphs(_help(120, "run"))[1] if line.startswith("promoter")]
    assert starts == [
        "promoter run [--repo NAME] [--allow 'src/**:create,modify,delete']... [--yes] -- CMD "
        "ARGS...",
        "promoter run --continue RUN -- CMD ARGS...   (the next step, chained on the last one)",
        "promoter run --continue RUN [--yes]   (promote the bundle its last step left "
        "submitted)",
        "promoter run --list | --remove RUN | --prune [--older-than 7d]",
    ]


def test_reflow_joins_sentences_and_keeps_paragraphs_lists_and_verbatim_blocks() -> None:
    text = (
        "First line\n    of the summary.\n\n"
        "    A sentence broken\n    by the source.\n\n"
        "    Steps:\n    - one item\n      continued\n    - two\n    1. numbered\n\n"
        "    \b\n    kept   as\n    written\n\n"
        "    indented:\n        an example line\n        another\n"
        "    \fnot shown\nat all"
    )
    assert reflow(text) == (
        "First line of the summary.\n\n"
        "A sentence broken by the source.\n\n"
        "Steps:\n- one item continued\n- two\n1. numbered\n\n"
        "\b\nkept   as\nwritten\n\n"
        "indented:\n    an example line\n    another\n"
        "\fnot shown\nat all"
    )
    assert reflow("One line.") == "One line."
    assert reflow(None) is None


def test_keys_rotate_help_loads_no_ledger_or_crypto_stack() -> None:
    probe = (
        "import sys\n"
        "from promoter.cli.main import main\n"
        "sys.argv = ['promoter', 'keys', 'rotate', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'sqlalchemy', 'alembic', 'cryptography', 'pydantic'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert done.stdout.splitlines()[-1] == "[]"
