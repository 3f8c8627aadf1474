"""Shared CLI plumbing: console, error handling, server URL and token options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from promoter.errors import ConfigError

console = Console()
err_console = Console(stderr=True)

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
