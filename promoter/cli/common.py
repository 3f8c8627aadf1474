"""Shared CLI plumbing: consoles, sizes in IEC units, server URL and token options.

The URL and token are found by ``promoter.cli.userconfig.resolve``: the flags, the
environment, the daemon ``promoter serve`` recorded for this user, then ./.promoter
(imported when first asked: a command that asks no daemon never loads it).

Off a terminal (a pipe, a file, a CI log) the consoles neither wrap nor truncate: a path
is printed whole on one line, whatever ``COLUMNS`` says. Each console is made (and rich
imported) when first used, so a command that prints JSON or nothing never loads rich,
nor one that prints only plain or merely styled lines off a terminal: ``console.print``
of a string rich would print as it is, or with only its style tags dropped (no other
markup, no emoji code, tab or control character; no colour), writes it itself.
``escape`` is rich's markup escape, loaded only for a string it changes.
``echo_json`` prints a document as rich's ``print_json`` does off a terminal, without
rich. Nothing here prints unless called to. The options ``UrlOpt``, ``TokenFileOpt`` and
``JsonOpt`` are made (and typer imported) when a command module first imports them, so
a command line read without typer prints with this module (``promoter.cli.run_args``).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

from promoter.cli.styled import Styled
from promoter.domain.hidden import visible

if TYPE_CHECKING:
    from rich.console import Console

UNBOUNDED = 1_000_000  # columns when not on a terminal: lines are never wrapped or cut


def _isatty(stream: Any) -> bool:
    """``stream.isatty()``, False for a stream without one or closed (as rich takes it)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(callable(isatty) and isatty())
    except ValueError:
        return False


def _console(stderr: bool) -> Console:
    from rich.console import Console

    if _isatty(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=UNBOUNDED, soft_wrap=True)


_made: dict[bool, Console] = {}


def rich_console(*, stderr: bool) -> Console:
    """The rich console behind ``err_console`` (``stderr``) or ``console``, made once: what
    to hand to rich itself (a progress bar, a live display)."""
    if stderr not in _made:
        _made[stderr] = _console(stderr)
    return _made[stderr]


_PLAIN_OPTIONS = frozenset({"end", "soft_wrap", "highlight", "markup", "emoji"})


def rich_would_colour(stream: Any) -> bool:
    """Whether a rich console on ``stream`` would take it for a terminal (rich's own rule:
    ``TTY_COMPATIBLE``, then ``FORCE_COLOR``, then ``isatty``), or render for a notebook."""
    if "IPython" in sys.modules:
        return True  # rich may render for a notebook there: leave it to rich
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    return _isatty(stream)


# rich's markup tags (``rich.markup.RE_TAGS``), and those that only style the text
_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")
_STYLE = re.compile(r"/?([a-z_]+( [a-z_]+)*)?")
_EMOJI = re.compile(r":\S*?:")  # what any of rich's emoji codes matches


def _unstyled(text: str) -> list[str] | None:
    """The pieces of ``text`` between its tags, as rich reads its markup, when the markup
    only styles it: tags of style names (``[bold green]``, ``[/]``, ``[/bold green]``)
    closing what is open, no backslash before a ``[`` (rich reads ``\\[`` as an escape;
    any other backslash it prints as it is); None for anything else (rich then reads it,
    or refuses it)."""
    if "[" not in text:
        return [text]
    if "\\[" in text:
        return None
    opened: list[str] = []
    for match in _TAG.finditer(text):
        name = match.group(2)
        if _STYLE.fullmatch(name) is None:
            return None
        if not name.startswith("/"):
            opened.append(name)
        elif name == "/" and opened:
            opened.pop()
        elif name[1:] in opened:
            del opened[len(opened) - 1 - opened[::-1].index(name[1:])]
        else:
            return None
    return _TAG.split(text)[::3]  # each tag adds its two groups between the pieces


def _no_emoji(piece: str) -> bool:
    """Whether rich's emoji codes leave ``piece`` as it is (a name between two colons
    that names no emoji is kept; rich's table is loaded only for such a pair)."""
    if _EMOJI.search(piece) is None:
        return True
    from rich._emoji_replace import _emoji_replace

    return _emoji_replace(piece) == piece


def _plain(text: str, markup: bool, emoji: bool) -> str | None:
    """What rich prints for ``text`` when it only drops style tags from it: no other
    markup or emoji code it would read, no tab it would expand, no control or
    unprintable character it would drop or keep; None when it may do more."""
    pieces = _unstyled(text) if markup else [text]
    if pieces is None or (emoji and not all(_no_emoji(piece) for piece in pieces)):
        return None
    shown = "".join(pieces)
    return shown if shown.replace("\n", "").isprintable() else None


def _print_plain(stderr: bool, objects: tuple[Any, ...], options: dict[str, Any]) -> bool:
    """``console.print`` of one string (or ``Styled`` text) off a terminal, written without
    rich when rich would write the same bytes (the string and its end, flushed, as rich
    does); False when not."""
    if stderr in _made or len(objects) != 1 or not isinstance(objects[0], str | Styled):
        return False
    if not options.keys() <= _PLAIN_OPTIONS or options.get("soft_wrap", True) is not True:
        return False
    end = options.get("end", "\n")
    markup, emoji = options.get("markup") is not False, options.get("emoji") is not False
    if isinstance(objects[0], Styled):  # rich reads no markup or emoji in a Text
        shown = _plain(objects[0].plain, False, False)
    else:
        shown = _plain(objects[0], markup, emoji)
    if shown is None or not isinstance(end, str) or _plain(end, False, False) is None:
        return False
    stream = sys.stderr if stderr else sys.stdout
    if rich_would_colour(stream):
        return False
    stream.write(shown + end)
    stream.flush()
    return True


_TABLE_WIDTH = 10_000  # wider tables are left to rich (its console is UNBOUNDED wide)


def print_plain_table(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> bool:
    """A borderless table (rich's ``Table(box=None, pad_edge=False)``, a header row, cells
    that never wrap) written to stdout off a terminal without rich, when rich would write
    the same bytes: every cell markup rich prints as printable ASCII once its style tags
    are dropped (so one character is one column), each cell padded to its column's
    width, the columns two spaces apart. False, having written nothing, otherwise."""
    if False in _made or rich_would_colour(sys.stdout) or not rows:
        return False
    shown: list[list[str]] = []
    for row in [columns, *rows]:
        cells = [_plain(cell, True, True) for cell in row]
        if any(c is None or not (c.isascii() and c.isprintable()) for c in cells):
            return False
        shown.append(cast("list[str]", cells))
    widths = [max(len(row[k]) for row in shown) for k in range(len(columns))]
    if 0 in widths or sum(widths) + 2 * len(widths) > _TABLE_WIDTH:
        return False  # rich gives an empty column a width of its own
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        for row in shown
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return True


class _LazyConsole:
    """A rich ``Console`` made on first use: every attribute is the real console's, and
    ``print`` of a plain string off a terminal writes it without making one."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr

    def print(self, *objects: Any, **options: Any) -> None:
        if not _print_plain(self._stderr, objects, options):
            rich_console(stderr=self._stderr).print(*objects, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(rich_console(stderr=self._stderr), name)


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))


def whole_column(header: str, values: Sequence[str]) -> Any:
    """A rich table column that keeps each of ``values`` whole on one line, however narrow
    the terminal: an id the person copies into the next command is never cut to ``…``."""
    from rich.table import Column

    return Column(header, no_wrap=True, min_width=max(map(len, values), default=0))


def folded_columns(*headers: str) -> list[Any]:
    """Rich table columns that fold a value too long for a narrow terminal onto more
    lines instead of cutting it to ``…``."""
    from rich.table import Column

    return [Column(header, overflow="fold") for header in headers]


def shown_path(path: str) -> str:
    """A path as a person may read it: its hidden characters as ``<U+XXXX>`` (a name never
    poses as another one, protocol: api#what-a-review-shows), never read as markup."""
    return escape(visible(path))


def escape(markup: str) -> str:
    """rich's ``escape``: ``markup`` printed as it is, never read as markup. A string with
    no ``[`` that does not end in a backslash is its own escape (rich's rule changes
    nothing else), returned without loading rich."""
    if "[" not in markup and not markup.endswith("\\"):
        return markup
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


def echo_json(text: str) -> None:
    """``console.print_json(text)``: coloured on a terminal (by rich), and off one the
    same bytes rich prints there (``json.dumps`` with indent 2, a newline), without rich."""
    if _isatty(sys.stdout):
        console.print_json(text)
        return
    document = json.loads(text)
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def iec(count: float) -> str:
    """``count`` bytes in IEC units: ``512 B``, ``1.5 KiB``, ``3.0 MiB``, ``2.0 GiB``."""
    if count < 1024:
        return f"{int(count)} B"
    value = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


if TYPE_CHECKING:  # their types; the options themselves are made with typer on first use
    UrlOpt = Annotated[str | None, "--url"]
    TokenFileOpt = Annotated[Path | None, "--token-file"]
    JsonOpt = Annotated[bool, "--json"]


def _option(name: str) -> Any:
    """``UrlOpt``, ``TokenFileOpt`` or ``JsonOpt``: typer imported by the commands that
    declare them, not by this module (``promoter run`` parsed without typer prints with it)."""
    import typer

    if name == "UrlOpt":
        return Annotated[
            str | None,
            typer.Option(
                "--url",
                help="Server URL (env PROMOTER_URL; else the daemon promoter serve recorded).",
                show_default=False,
            ),
        ]
    if name == "TokenFileOpt":
        return Annotated[
            Path | None,
            typer.Option(
                "--token-file",
                help="File holding the bearer token (env PROMOTER_TOKEN; else the recorded one).",
                show_default=False,
            ),
        ]
    return Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]


def __getattr__(name: str) -> Any:
    if name in ("UrlOpt", "TokenFileOpt", "JsonOpt"):
        made = globals()[name] = _option(name)  # made once
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def server_url(url: str | None) -> str:
    """The daemon's URL: ``--url``, ``PROMOTER_URL``, the recorded daemon, the default."""
    from promoter.cli import userconfig

    return userconfig.resolve(url).url


def read_token(token_file: Path | None, url: str | None = None) -> str:
    """The credential for the daemon at ``url`` (the ``--url`` given, if any): the flag,
    ``PROMOTER_TOKEN``, the recorded one (only for the recorded daemon), ./.promoter's."""
    from promoter.cli import userconfig

    target = userconfig.resolve(url, token_file)
    if target.token is None:
        raise userconfig.no_token(target)
    return target.token
