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

from promoter.cli import bundle_view, common
from promoter.cli.bundle_cmd import print_diff
from promoter.cli.styled import Styled
from promoter.executor.run import person

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
    "[bold]running[/] sh -c printf '\\n# edited\\n' >> a.py in /tmp/x/clone (bwrap)",
    "[bold]x[/] a\\[bold]b",
    "[bold]x[/] a\\\\[bold]b[/]",
    "[bold]x[/] ends in a backslash\\",
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


def _printed(how: Any, text: Any, options: dict[str, Any]) -> tuple[str, bool]:
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
        assert person.escape(text) == rich_escape(text), text


def test_a_run_line_with_backslashes_is_written_without_rich(off_terminal: None) -> None:
    """A command's words keep their backslashes (``printf '\\n'``): rich reads a backslash
    only before a tag, so the line is still plain."""
    words = person.escape("sh -c printf '\\n# edited\\n' >> a.py")
    line = f"[bold]running[/] {words} in /tmp/x/clone (bwrap)"
    printed = "running sh -c printf '\\n# edited\\n' >> a.py in /tmp/x/clone (bwrap)\n"
    assert _printed(common.console.print, line, {"soft_wrap": True, "highlight": False}) == (
        printed,
        True,
    )


STYLES = ["", "bold", "green", "red", "cyan", "bold yellow", "dim", "bold magenta"]
DIFF_OPTIONS: list[dict[str, Any]] = [
    {"end": "", "soft_wrap": True, "highlight": False},
    {},
    {"end": ""},
    {"soft_wrap": False},
]


def _styled_samples() -> list[Styled]:
    rng = random.Random(11)
    alphabet = "ab \n[]:\\\t漢é😀\u0301\u00a0/.-_+@\x7f\r\x1b"
    samples = []
    for _ in range(800):
        styled = Styled()
        for _ in range(rng.randint(0, 6)):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
            styled.append(text, rng.choice(STYLES))
        samples.append(styled)
    return samples


def test_styled_text_prints_what_rich_prints_of_its_text(off_terminal: None) -> None:
    plain = 0
    for styled in _styled_samples():
        for options in DIFF_OPTIONS:
            ours, without_rich = _printed(common.console.print, styled, options)
            text = styled.__rich__()
            theirs, _ = _printed(common.rich_console(stderr=False).print, text, options)
            assert ours == theirs, (styled.runs, options)
            plain += without_rich
    assert plain > 300


def _diff_answer(rng: random.Random) -> dict[str, Any]:
    """A diff answer of random files, flags, renames, unseen files and patch lines."""
    words = ["a", "b c", "[x]", ":smile:", "漢", "\t", "  ", "é", "x" * 300, "\x1b[31m", ""]
    files, patch = [], []
    for n in range(rng.randint(0, 4)):
        path = f"src/{rng.choice(words)}{n}.py"
        renamed = rng.random() < 0.2
        files.append(
            {
                "path": path,
                "operation": rng.choice(["create", "modify", "delete"]),
                "flags": rng.sample(["bidi", "executable", "binary"], rng.randint(0, 2)),
                "summarized": rng.random() < 0.2,
                "binary": rng.random() < 0.2,
                "added": rng.randint(0, 9),
                "removed": rng.randint(0, 9),
                "old_bytes": rng.choice([None, 10, 5000]),
                "new_bytes": rng.choice([None, 20, 3_000_000]),
                "rename_from": "old.py" if renamed else None,
                "similarity": 97,
                "symlink_target": rng.choice([None, "target"]),
            }
        )
        patch.append(f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n")
        for _ in range(rng.randint(0, 3)):
            patch.append("@@ -1 +1 @@\n")
            for _ in range(rng.randint(0, 4)):
                patch.append(rng.choice("+- ") + rng.choice(words) + rng.choice(["\n", " \n"]))
    unseen = [
        {
            "path_shown": f"docs/{rng.choice(words)}",
            "summarized": rng.random() < 0.5,
            "shown": "none",
            "added": rng.choice([None, 3]),
            "removed": 1,
            "old_bytes": 1,
            "new_bytes": None,
            "flags": rng.sample(["bidi", "binary"], rng.randint(0, 2)),
        }
        for _ in range(rng.randint(0, 2))
    ]
    truncated = bool(unseen) and rng.random() < 0.5
    return {
        "files": files,
        "unified_diff": "".join(patch),
        "unseen": unseen,
        "truncated": truncated,
        "limit": 1000,
    }


def _diff_printed(
    result: dict[str, Any], options: dict[str, Any], by_rich: bool
) -> tuple[str, bool]:
    def show(answer: dict[str, Any], **kwargs: Any) -> None:
        if by_rich:  # a console made first: ``console.print`` leaves the printing to rich
            common.rich_console(stderr=False)
        print_diff(answer, **kwargs)

    return _printed(show, result, options)


def test_the_diff_off_a_terminal_is_what_rich_prints(off_terminal: None) -> None:
    """``print_diff`` (``review``'s diff) writes rich's bytes, mostly without rich."""
    rng = random.Random(5)
    plain = 0
    for _ in range(300):
        result = _diff_answer(rng)
        for options in [
            {"pager": False, "hunk_labels": True, "hint": "promoter review op_1"},
            {"stat": True, "pager": False},
            {"pager": True},
        ]:
            ours, without_rich = _diff_printed(result, options, by_rich=False)
            theirs, _ = _diff_printed(result, options, by_rich=True)
            assert ours == theirs, (result, options)
            plain += without_rich
    assert plain > 200


def test_the_diff_keeps_its_colours_on_a_terminal(
    off_terminal: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    result = {
        "files": [{"path": "a.py", "flags": [], "summarized": False}],
        "unified_diff": "diff --git a/a.py b/a.py\n@@ -1 +1 @@\n-old\n+new\n",
        "unseen": [],
        "truncated": False,
    }
    shown, without_rich = _diff_printed(result, {"pager": False, "hunk_labels": True}, False)
    assert not without_rich
    assert shown == (
        "\x1b[1mdiff --git a/a.py b/a.py\x1b[0m\n"
        "\x1b[1;35mhunk 1\x1b[0m\n"
        "\x1b[36m@@ -1 +1 @@\x1b[0m\n"
        "\x1b[31m-old\x1b[0m\n"
        "\x1b[32m+new\x1b[0m\n"
    )


def _rich_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """The table as ``print_bundle`` has rich print it."""
    common.rich_console(stderr=False).print(bundle_view.bundle_table(columns, rows))


def test_a_narrow_terminal_folds_the_path_and_cuts_no_cell(
    off_terminal: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 60 columns the table once read `cre  src/very_long…/and_a_l  10`: the operation,
    the path and the new state cut short. Every cell is whole now, the path folded."""
    from rich.console import Console

    monkeypatch.setenv("FORCE_COLOR", "1")
    screen = io.StringIO()
    common._made[False] = Console(file=screen, width=60, force_terminal=True, color_system=None)
    path = "src/very_long_directory_name_here_for_width/and_a_long_file_name.py"
    new = {"exists": True, "mode": "100644", "bytes": 6}
    bundle_view.print_bundle(
        {
            "bundle_id": "bnd_1",
            "change_count": 1,
            "total_bytes": 6,
            "base_tree": "d2dec84e9d85" * 3,
            "changes": [
                {"operation": "create", "path": path, "old": {"exists": False}, "new": new}
            ],
        }
    )
    printed = screen.getvalue().splitlines()
    lines = printed[next(k for k, line in enumerate(printed) if line.startswith("operation")) :]
    assert all(len(line) <= 60 for line in lines)
    assert lines[0].split() == ["operation", "path", "old", "new"]
    assert lines[1].split()[0] == "create"
    assert lines[1].rstrip().endswith("  -    100644 6 B")
    column = lines[0].index("path")
    assert "".join(line[column:].split(" ")[0] for line in lines[1:]) == path


def _table_samples() -> list[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
    rng = random.Random(13)
    words = ["a", "src/app.py", "100644 1.0 KiB", "-", " lead", "trail ", "[bold]x[/]", "x" * 90]
    words += ["漢字.py", ":smile:", "a\\[b]", "tab\tx", "", "[/]", "é", "a  b", "x:y:z"]
    samples = []
    for _ in range(400):
        width = rng.randint(1, 4)
        columns = tuple(
            rng.choice(["operation", "path", "old", "new", "a", ""]) for _ in range(width)
        )
        rows = [tuple(rng.choice(words) for _ in range(width)) for _ in range(rng.randint(1, 5))]
        samples.append((columns, rows))
    return samples


def test_plain_table_writes_what_rich_writes(off_terminal: None) -> None:
    plain = 0
    for columns, rows in _table_samples():
        ours, without_rich = _printed(
            lambda c, rows: common.print_plain_table(c, rows) or _rich_table(c, rows),
            columns,
            {"rows": rows},
        )
        theirs, _ = _printed(_rich_table, columns, {"rows": rows})
        assert ours == theirs, (columns, rows)
        plain += without_rich
    assert plain > 50  # the plain path is taken, not only the fallback
    bundle = [("modify", "src/a.py", "100644 1.0 KiB", "100644 2.0 KiB"), ("create", "b", "-", "x")]
    assert _printed(
        common.print_plain_table, ("operation", "path", "old", "new"), {"rows": bundle}
    ) == (
        "operation  path      old             new           \n"
        "modify     src/a.py  100644 1.0 KiB  100644 2.0 KiB\n"
        "create     b         -               x             \n",
        True,
    )


def _file(path: str, operation: str, old: int | None, new: int | None, **more: Any) -> Any:
    return {
        "path": path,
        "path_shown": path,
        "operation": operation,
        "old_bytes": old,
        "new_bytes": new,
        "binary": False,
        "summarized": False,
        "added": 0,
        "removed": 0,
        "flags": [],
        **more,
    }


def test_a_renames_summary_and_stat_give_the_size_it_came_from() -> None:
    """`rename a → b (100 %)  - -> 250 B` read as a new file: the old size is a's."""
    moved = {"rename_from": "src/old.txt", "rename_from_shown": "src/old.txt", "similarity": 100}
    blob = {"rename_from": "a.bin", "rename_from_shown": "a.bin", "similarity": 100}
    result = {
        "files": [
            _file("src/new.txt", "create", None, 250, **moved),
            _file("src/old.txt", "delete", 250, None, renamed_to="src/new.txt"),
            _file("b.bin", "create", None, 2048, binary=True, **blob),
            _file("a.bin", "delete", 2048, None, binary=True, renamed_to="b.bin"),
        ],
        "unseen": [],
    }
    summary = bundle_view.diff_summary(result).plain
    assert " rename src/old.txt → src/new.txt (100 %)  250 B -> 250 B, +0 -0\n" in summary
    assert " rename a.bin → b.bin (100 %)              2.0 KiB -> 2.0 KiB, binary\n" in summary
    stat = bundle_view.diff_stat(result).plain
    assert " rename a.bin → b.bin (100 %)              binary, 2.0 KiB -> 2.0 KiB\n" in stat
