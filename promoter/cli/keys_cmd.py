"""``promoter keys``: list and rotate the host's receipt-signing keys, on the state dir.

Runs on the host, against ``<state>/credentials`` (no server needed): ``rotate`` retires
the active key now and makes a new one active (``promoter.engine.receipts.keyring.rotate``); a
running daemon signs with the new key from its next envelope on, and ``GET /v1/keys``
keeps listing the retired public key with its validity window. ``list`` prints the
listed keys.

Deliberately not here: verifying receipts (``promoter receipt verify``), serving keys
(``promoter.api.routes.keys``), and any handling of the private keys beyond calling
the keyring.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from promoter.cli.common import JsonOpt, console
from promoter.config import load_settings
from promoter.engine.receipts.keyring import Keyring, load_keyring, rotate

StateDirOpt = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory (default ./.promoter).")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]


def register(app: typer.Typer) -> None:
    """Attach the ``keys`` command group to the main app."""
    group = typer.Typer(help="The host's receipt-signing keys.", no_args_is_help=True)
    group.command("list")(list_keys)
    group.command("rotate")(rotate_keys)
    app.add_typer(group, name="keys")


def _credentials(state_dir: Path | None, config: Path | None) -> Path:
    return load_settings(config, state_dir=state_dir).credentials_dir


def list_keys(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Print every listed key: the active one first, then the retired ones."""
    _show(load_keyring(_credentials(state_dir, config)), as_json)


def rotate_keys(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Retire the active signing key now; new receipts are signed by a new key.

    Envelopes signed before still verify against the retired public key, which stays
    listed (GET /v1/keys) with its validity window. Exit codes: 0 rotated; 78
    config_error (unreadable or inconsistent key files).
    """
    keyring = rotate(_credentials(state_dir, config), datetime.now(UTC))
    _show(keyring, as_json)


def _show(keyring: Keyring, as_json: bool) -> None:
    if as_json:
        console.print_json(
            json.dumps({"active_keyid": keyring.active.keyid, "keys": keyring.entries()})
        )
        return
    for key in keyring.listed:
        window = f"from {key.not_before or '(first key)'}"
        if key.not_after:
            window += f" until {key.not_after}"
        console.print(f"{key.status:<8} {key.keyid} {escape(window)}", soft_wrap=True)
