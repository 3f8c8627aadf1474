"""Shared CLI plumbing: consoles, sizes in IEC units, server URL and token options.

Off a terminal (a pipe, a file, a CI log) the consoles neither wrap nor truncate: a path
is printed whole on one line, whatever ``COLUMNS`` says. It does not print anything itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from promoter.errors import ConfigError

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


DEFAULT_URL = "http://127.0.0.1:8787"

UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Server URL (env PROMOTER_URL).", show_default=False)
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="File holding the bearer token (env PROMOTER_TOKEN).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]


def server_url(url: str | None) -> str:
    return url or os.environ.get("PROMOTER_URL") or DEFAULT_URL


def read_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            return token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc}") from exc
    token = os.environ.get("PROMOTER_TOKEN", "").strip()
    if not token:
        raise ConfigError("no token: pass --token-file FILE or set PROMOTER_TOKEN")
    return token
