"""Client-side command groups (filled in as the API grows)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the client command groups to the main app."""
    del app
