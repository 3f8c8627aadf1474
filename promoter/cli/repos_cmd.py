"""``promoter repos list|set``: the guarded repositories and their approval gate.

``list`` prints each repository the daemon guards with its worktree, HEAD and approval
setting (and whether the configuration file or an operator set it). ``set NAME
--approval required|none`` turns the approval gate on or off at run time (operator
credential): the host records the change in the ledger with the credential's name and
logs it; it holds from the next promotion request on, on every host.

Deliberately not here: the gate itself (``promoter.engine.review.approval``) or the
configuration file, which this never edits.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    read_token,
    server_url,
)
from promoter.client.sync import PromoterClient

__all__ = ["register"]


class ApprovalChoice(str, Enum):
    required = "required"
    none = "none"


def _client(url: str | None, token_file: TokenFileOpt) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=60.0)


def list_repositories(
    url: UrlOpt = None, token_file: TokenFileOpt = None, as_json: JsonOpt = False
) -> None:
    """The guarded repositories: name, worktree, HEAD, approval setting."""
    with _client(url, token_file) as client:
        rows = [(repo, client.repository_approval(repo["name"])) for repo in client.repositories()]
    if as_json:
        listed = [{**repo, "approval": setting} for repo, setting in rows]
        typer.echo(json.dumps({"repositories": listed}, indent=2, sort_keys=True))
        return
    for row, setting in rows:
        by = f" by {setting['set_by']} at {setting['set_at']}" if setting["set_by"] else ""
        console.print(
            f"{escape(str(row['name']))}  {escape(str(row['worktree']))}  "
            f"{str(row.get('head') or '')[:12] or 'no commit'}  approval "
            f"{setting['approval']} ({setting['source']}{escape(by)})",
            soft_wrap=True,
            highlight=False,
        )


def set_repository(
    name: Annotated[str, typer.Argument(help="The repository's name.")],
    approval: Annotated[
        ApprovalChoice,
        typer.Option(
            "--approval",
            help="required: every promotion waits for an operator's decision; none: it does not.",
        ),
    ],
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Turn NAME's approval gate on or off (operator credential; recorded in the ledger)."""
    with _client(url, token_file) as client:
        answer = client.set_repository_approval(name, approval.value)
    if as_json:
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    console.print(
        f"{escape(name)}: approval {answer['approval']} from the next promotion on "
        f"(set by {escape(str(answer['set_by']))} at {answer['set_at']})",
        soft_wrap=True,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Attach the ``repos`` command group to the main app."""
    group = typer.Typer(
        help="The guarded repositories: list; turn the approval gate on or off (operator).",
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    group.command("list")(list_repositories)
    group.command("set")(set_repository)
    app.add_typer(group, name="repos")
