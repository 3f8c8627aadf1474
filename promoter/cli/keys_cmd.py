"""``promoter keys``: list and rotate the host's receipt-signing keys, on the state dir.

Runs on the host, against ``<state>/credentials`` (no server needed), in the state
directory ``--state-dir``, ``--config`` or ``PROMOTER_STATE_DIR`` names, else the daemon's
that ``promoter serve`` recorded, else ``./.promoter``: ``rotate`` retires
the active key now and makes a new one active (``promoter.store.keyring.rotate``); a
running daemon signs with the new key from its next envelope on, and ``GET /v1/keys``
keeps listing the retired public key with its validity window. ``rotate`` then publishes
the keyring into the ledger (``promoter.engine.receipts.envelopes.publish_keyring``), so
every host lists the new key at once; when the database cannot be reached it says so
and the daemon publishes it before it signs with it. ``list`` prints the listed keys and
makes none: where there is no key it refuses (``config_error``), as only the daemon
makes its first key.

Deliberately not here: verifying receipts (``promoter receipt verify``), serving keys
(``promoter.api.routes.keys``), and any handling of the private keys beyond calling
the keyring.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from promoter.cli.common import JsonOpt, console, echo_json, err_console, escape

if TYPE_CHECKING:  # the settings, the ledger and the keyring load when a command runs:
    # ``--help`` loads none of them (the database and crypto stacks)
    from promoter.config import Settings
    from promoter.store.keyring import Keyring

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="State directory (default: the daemon's promoter serve recorded, else ./.promoter).",
    ),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]


def register(app: typer.Typer) -> None:
    """Attach the ``keys`` command group to the main app."""
    group = typer.Typer(help="The host's receipt-signing keys.", no_args_is_help=True)
    group.command("list")(list_keys)
    group.command("rotate")(rotate_keys)
    app.add_typer(group, name="keys")


def _settings(state_dir: Path | None, config: Path | None) -> Settings:
    from promoter.cli.userconfig import host_state_dir
    from promoter.config import load_settings

    return load_settings(config, state_dir=host_state_dir(state_dir, config))


def list_keys(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Print every listed key: the active one first, then the retired ones.

    It makes no key: exit 78 config_error where there is none (the daemon makes its first
    key when it starts).
    """
    from promoter.errors import ConfigError
    from promoter.store.keyring import KEY_FILE, KEYRING_FILE, load_keyring

    folder = _settings(state_dir, config).signing_dir
    if not any(os.path.lexists(folder / name) for name in (KEY_FILE, KEYRING_FILE)):
        raise ConfigError(
            f"no signing key in {folder}: it is not a daemon's state; point --state-dir at "
            "the daemon's state directory (the daemon makes its first key when it starts)"
        )
    _show(load_keyring(folder), as_json)


def rotate_keys(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Retire the active signing key now; new receipts are signed by a new key.

    Envelopes signed before still verify against the retired public key, which stays
    listed (GET /v1/keys) with its validity window. It needs the ledger and refuses,
    changing nothing, when there is none or it is not migrated. Exit codes: 0 rotated; 78
    ledger_missing (no ledger where the settings point), schema_mismatch (not migrated)
    or config_error (unreadable or inconsistent key files).
    """
    from promoter.errors import DatabaseBusy, DatabaseUnavailable
    from promoter.store import db as dbmod
    from promoter.store.keyring import rotate

    settings = _settings(state_dir, config)
    # nothing is created when there is no ledger; in an outage the key is rotated now and
    # published by the daemon before it signs with it (``_publish`` says so)
    with contextlib.suppress(DatabaseUnavailable, DatabaseBusy):
        dbmod.require_ledger(settings.db_url)
    keyring = rotate(settings.signing_dir, datetime.now(UTC))
    _publish(settings, keyring)
    _show(keyring, as_json)


def _publish(settings: Settings, keyring: Keyring) -> None:
    """The rotated keyring into the ledger; a failure only delays it to the daemon."""
    from promoter.engine.ownership import machine_host_id
    from promoter.engine.receipts.envelopes import publish_keyring
    from promoter.errors import PromoterError
    from promoter.store import db as dbmod

    host_id = settings.host_id or machine_host_id()
    try:
        dbmod.check_schema(settings.db_url)
        database = dbmod.Database(settings.db_url, settings.database_busy_timeout)
        try:
            publish_keyring(database, host_id, keyring)
        finally:
            database.dispose()
    except PromoterError as exc:
        err_console.print(
            f"[yellow]not published into the ledger yet[/] ({escape(exc.code)}: "
            f"{escape(exc.detail)}); the daemon publishes the keys before it signs with them",
            soft_wrap=True,
        )


def _show(keyring: Keyring, as_json: bool) -> None:
    if as_json:
        echo_json(json.dumps({"active_keyid": keyring.active.keyid, "keys": keyring.entries()}))
        return
    for key in keyring.listed:
        window = f"from {key.not_before or '(first key)'}"
        if key.not_after:
            window += f" until {key.not_after}"
        console.print(f"{key.status:<8} {key.keyid} {escape(window)}", soft_wrap=True)
