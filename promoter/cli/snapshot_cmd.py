"""``promoter snapshot list|capture|diff|restore``: shadow snapshots over HTTP
(protocol: api#command-line).

Each command is one request through ``promoter.client.sync.PromoterClient`` with the operator
token (``--token-file`` or ``PROMOTER_TOKEN``) to the server (``--url`` or
``PROMOTER_URL``). Answers are shown as rich tables, or printed as the raw JSON with
``--json``. Errors are the server's problem codes, raised as ``PromoterError`` for the
main handler to print and exit with.

Deliberately not here: any snapshot logic; ``restore`` sends exactly the tree ids given
(review ``snapshot diff`` first: the server refuses with ``snapshot_stale`` when the
worktree is not at ``--expected-current-tree``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    echo_json,
    escape,
    read_token,
    server_url,
)
from promoter.client.sync import PromoterClient

RepositoryArg = Annotated[str, typer.Argument(help="Repository name, as configured.")]
TreeArg = Annotated[str, typer.Argument(help="Tree id (40 hex) of a snapshot.")]


def register(app: typer.Typer) -> None:
    """Attach the ``snapshot`` command group to the main app."""
    group = typer.Typer(help="Shadow snapshots of a worktree.", no_args_is_help=True)
    group.command("list")(list_snapshots)
    group.command("capture")(capture)
    group.command("diff")(diff)
    group.command("restore")(restore)
    app.add_typer(group, name="snapshot")


def _client(url: str | None, token_file: Path | None) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=600.0)


def _print_json(value: Any) -> None:
    echo_json(json.dumps(value))


def list_snapshots(
    repository: RepositoryArg,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """List a repository's snapshots, oldest first."""
    with _client(url, token_file) as client:
        items = client.snapshots(repository)
    if as_json:
        _print_json({"snapshots": items})
        return
    from rich.table import Table

    table = Table("tree", "label", "captured at", title=f"snapshots of {escape(repository)}")
    for item in items:
        table.add_row(item["tree"], escape(item["label"]), item["captured_at"])
    console.print(table)


def capture(
    repository: RepositoryArg,
    label: Annotated[str, typer.Option("--label", help="A note kept with the snapshot.")] = "",
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Capture the worktree now; prints the tree id."""
    with _client(url, token_file) as client:
        result = client.capture_snapshot(repository, label)
    if as_json:
        _print_json(result)
        return
    console.print(f"[bold]{result['tree']}[/] {escape(result['label'])} ({result['captured_at']})")


def diff(
    repository: RepositoryArg,
    from_tree: Annotated[str, typer.Argument(help="Tree id to compare from.")],
    to_tree: Annotated[str, typer.Argument(help="Tree id to compare to.")],
    patch: Annotated[bool, typer.Option("--patch/--no-patch", help="Show the diff.")] = True,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """What changed between two snapshots: paths, then the unified diff."""
    with _client(url, token_file) as client:
        result = client.snapshot_diff(repository, from_tree, to_tree)
    if as_json:
        _print_json(result)
        return
    from rich.table import Table

    table = Table("change", "path", title=f"{from_tree[:12]} → {to_tree[:12]}")
    for change, paths in (
        ("added", result["added"]),
        ("modified", result["modified"]),
        ("deleted", result["deleted"]),
    ):
        for path in paths:
            table.add_row(change, escape(path))
    console.print(table)
    if patch and result.get("unified_diff"):
        typer.echo(result["unified_diff"], nl=not result["unified_diff"].endswith("\n"))
    if result.get("truncated"):
        console.print("[yellow]the diff was cut at the server's size limit[/]")


def restore(
    repository: RepositoryArg,
    tree: TreeArg,
    expected_current_tree: Annotated[
        str,
        typer.Option(
            "--expected-current-tree",
            help="The tree the worktree must be at now (from `snapshot capture`).",
        ),
    ],
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Bring the worktree to a snapshot, as a journaled operation."""
    with _client(url, token_file) as client:
        result = client.restore_snapshot(repository, tree, expected_current_tree)
    if as_json:
        _print_json(result)
        return
    colour = "green" if result.get("status") == "completed" else "yellow"
    console.print(f"{result['operation_id']} [{colour}]{escape(str(result['status']))}[/]")
