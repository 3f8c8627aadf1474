"""Shared CLI plumbing: consoles, sizes in IEC units, server URL and token options.

The URL and token are found by ``promoter.cli.userconfig.resolve``: the flags, the
environment, the daemon ``promoter serve`` recorded for this user, then ./.promoter.

Off a terminal (a pipe, a file, a CI log) the consoles neither wrap nor truncate: a path
is printed whole on one line, whatever ``COLUMNS`` says. It does not print anything itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from promoter.cli import userconfig

UNBOUNDED = 1_000_000  # columns when not on a terminal: lines are never wrapped or cut


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=UNBOUNDED, soft_wrap=True)


console = _console(stderr=False)
err_console = _console(stderr=True)


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


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Server URL (env PROMOTER_URL; else the daemon promoter serve recorded).",
        show_default=False,
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="File holding the bearer token (env PROMOTER_TOKEN; else the recorded one).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]


def server_url(url: str | None) -> str:
    """The daemon's URL: ``--url``, ``PROMOTER_URL``, the recorded daemon, the default."""
    return userconfig.resolve(url).url


def read_token(token_file: Path | None, url: str | None = None) -> str:
    """The credential for the daemon at ``url`` (the ``--url`` given, if any): the flag,
    ``PROMOTER_TOKEN``, the recorded one (only for the recorded daemon), ./.promoter's."""
    target = userconfig.resolve(url, token_file)
    if target.token is None:
        raise userconfig.no_token(target)
    return target.token
