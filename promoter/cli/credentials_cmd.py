"""``promoter credentials``: named operator credentials, on the state dir.

Runs on the host, against ``<state>/credentials`` (no server needed). ``add NAME`` makes
an operator credential named ``NAME`` and prints its token once; ``list`` prints the
names (the trusted ``operator`` token is always there besides); ``remove NAME`` removes
one. A running daemon sees the change on its next request. The name is what an approval
or rejection made with the token records as its approver (SPEC §10.13), so give each
person their own credential.

Deliberately not here: deciding who a token is (``promoter.store.credentials``) and any
other role's tokens (the orchestrator's is created on first start; executors' are
minted by the orchestrator).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from promoter.cli.common import JsonOpt, console
from promoter.config import load_settings
from promoter.store.credentials import add_operator, operator_names, remove_operator

StateDirOpt = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory (default ./.promoter).")
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


def _dir(state_dir: Path | None, config: Path | None) -> Path:
    return load_settings(config, state_dir=state_dir).credentials_dir


def list_credentials(
    state_dir: StateDirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False
) -> None:
    """Print the names of the operator credentials (``operator`` is the trusted token)."""
    names = ["operator", *operator_names(_dir(state_dir, config))]
    if as_json:
        typer.echo(json.dumps({"operators": names}))
        return
    for name in names:
        console.print(name)


def add_credential(name: NameArg, state_dir: StateDirOpt = None, config: ConfigOpt = None) -> None:
    """Make an operator credential named NAME and print its token (only this once).

    Exit codes: 0 made; 78 config_error (a bad or taken name).
    """
    token = add_operator(_dir(state_dir, config), name)
    typer.echo(token)


def remove_credential(
    name: NameArg, state_dir: StateDirOpt = None, config: ConfigOpt = None
) -> None:
    """Remove the operator credential named NAME; its token stops working.

    Exit codes: 0 removed; 78 config_error (no such credential).
    """
    remove_operator(_dir(state_dir, config), name)
    console.print(f"removed {name}")
