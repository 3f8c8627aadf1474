"""``promoter credentials``: named operator credentials, on the state dir and the ledger.

Runs on the host, against ``<state>/credentials`` and the ledger the settings name (no
server needed). The state directory is ``--state-dir``, else the one ``--config`` or
``PROMOTER_STATE_DIR`` names, else the daemon's that ``promoter serve`` recorded for this
user (``promoter.cli.userconfig``), else ``./.promoter``: run from anywhere, even inside
a guarded worktree, it finds the daemon's own state and never makes one there.
``add NAME`` makes an operator credential named ``NAME``, publishes its sha256 in the
ledger (valid on every host of it) and prints its token once; ``list`` prints the names
(the trusted ``operator`` token is always there besides) with their live console
sessions (from the ledger, every host's); ``remove NAME`` removes one from
the ledger, wherever it was added, and ends its console sessions there. Every daemon of
the ledger sees the change on its next request: the credential's token and its
long-polls are refused from then on. With no ledger yet (a SQLite file not made) only
the file is written, and the daemon publishes it when it starts. The name is
what an approval or rejection made with the token records as its approver
(protocol: runs#approvals), so give each person their own credential.

Deliberately not here: deciding who a token is (``promoter.store.credentials``) and any
other role's tokens (the orchestrator's is created on first start; executors' are
minted by the orchestrator).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli.common import JsonOpt, console
from promoter.config import load_settings
from promoter.engine.ownership import machine_host_id
from promoter.errors import LedgerMissing
from promoter.store import console_sessions
from promoter.store.credentials import (
    add_operator,
    operator_names,
    remove_operator,
)
from promoter.store.db import Database, require_ledger

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="State directory (default: the daemon's promoter serve recorded, else ./.promoter).",
    ),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]
NameArg = Annotated[str, typer.Argument(help="The credential's name (a-z 0-9 . _ -).")]


def register(app: typer.Typer) -> None:
    """Attach the ``credentials`` command group to the main app."""
    group = typer.Typer(
        help="Named operator credentials: the approver an approval records.", no_args_is_help=True
    )
    group.command("list")(list_credentials)
    group.command("add")(add_credential)
    group.command("remove")(remove_credential)
    app.add_typer(group, name="credentials")


def _state(state_dir: Path | None, config: Path | None) -> Path | None:
    """The state directory the settings get: without a flag, a config file or
    ``PROMOTER_STATE_DIR``, the recorded daemon's (None: the settings' default)."""
    from promoter.cli import userconfig

    return userconfig.host_state_dir(state_dir, config)


@contextlib.contextmanager
def _ledger(
    state_dir: Path | None, config: Path | None
) -> Iterator[tuple[Path, Database | None, str]]:
    """The credentials folder, the ledger (None where there is none yet) and this host."""
    settings = load_settings(config, state_dir=_state(state_dir, config))
    host_id = settings.host_id or machine_host_id()
    try:
        require_ledger(settings.db_url)
    except LedgerMissing:
        yield settings.credentials_dir, None, host_id
        return
    database = Database(settings.db_url, settings.database_busy_timeout)
    try:
        yield settings.credentials_dir, database, host_id
    finally:
        database.dispose()


def _live_sessions(
    db: Database | None, idle_seconds: float, names: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """The live console sessions in the ledger (none without one), per name: those of a
    credential that still exists, with when each opened and ends at the latest."""
    live: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    if db is None:
        return live
    with db.session() as session:
        found = console_sessions.live(session, time.time(), idle_seconds)
    for item in found:
        if item.name in live:
            live[item.name].append(
                {"opened_at": _stamp(item.opened_at), "expires_at": _stamp(item.expires_at)}
            )
    return live


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_credentials(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Print the operator credentials (operator is the trusted token) and their live
    console sessions: how many, and when the last of them ends at the latest."""
    idle = load_settings(config, state_dir=_state(state_dir, config)).console_session_idle_seconds
    with _ledger(state_dir, config) as (folder, db, _):
        names = ["operator", *operator_names(folder, db)]
        sessions = _live_sessions(db, idle, names)
    if as_json:
        typer.echo(json.dumps({"operators": names, "sessions": sessions}))
        return
    for name in names:
        mine = sessions[name]
        if not mine:
            console.print(name)
            continue
        last = max(item["expires_at"] for item in mine)
        console.print(f"{name}  {len(mine)} console session(s), the last ends by {last}")


def add_credential(name: NameArg, state_dir: StateDirOpt = None, config: ConfigOpt = None) -> None:
    """Make an operator credential named NAME and print its token (only this once).

    Exit codes: 0 made; 78 config_error (a bad or taken name).
    """
    with _ledger(state_dir, config) as (folder, db, host_id):
        token = add_operator(folder, name, db, host_id)
    typer.echo(token)


def remove_credential(
    name: NameArg, state_dir: StateDirOpt = None, config: ConfigOpt = None
) -> None:
    """Remove the operator credential named NAME; its token stops working.

    Exit codes: 0 removed; 78 config_error (no such credential).
    """
    with _ledger(state_dir, config) as (folder, db, host_id):
        remove_operator(folder, name, db, host_id)
    console.print(
        f"removed {name} on every host of the ledger; its console sessions are ended and "
        "its long-polls end at their next re-check"
    )
