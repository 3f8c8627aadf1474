"""The hosts of the ledger: ``promoter hosts list|fence|admit`` (``list``: an orchestrator or
operator token; ``fence`` and ``admit``: operator).

Thin commands over ``promoter.client.sync``: a table for people, ``--json`` for scripts.
Whether a host may be fenced, and who takes its operations over, is the daemon's
decision (``promoter.engine.fencing``); this module only asks and prints.
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
    err_console,
    escape,
    folded_columns,
    read_token,
    server_url,
    whole_column,
)
from promoter.client.sync import PromoterClient

hosts_app = typer.Typer(
    help="The hosts of the ledger: list, fence a dead one off, admit.", no_args_is_help=True
)


def _client(url: str | None, token_file: Path | None) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=120.0)


def _emit(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


@hosts_app.command("list")
def list_hosts(
    json_output: JsonOpt = False, url: UrlOpt = None, token_file: TokenFileOpt = None
) -> None:
    """List the hosts of the ledger: epoch, status, host lease, fences, address (an
    orchestrator or operator token). While the database does not answer, the daemon shows
    only its own host, as it last saw it, and a line on stderr says so."""
    with _client(url, token_file) as client:
        seen = client.hosts_seen()
    items = seen["hosts"]
    if seen["source"] == "this_host":
        err_console.print(
            f"[yellow]only this host's own view[/]: {escape(seen.get('detail') or '')}"
        )
    if json_output:
        _emit(items)
        return
    from rich.table import Table

    table = Table(
        whole_column("host", [item["host_id"] for item in items]),
        *folded_columns(
            "epoch", "status", "lease until", "expired", "fenced to", "repositories", "address"
        ),
    )
    for item in items:
        expired = item["lease_expired"]
        table.add_row(
            item["host_id"] + (" (this)" if item.get("this_host") else ""),
            str(item["epoch"]),
            item["status"],
            item.get("lease_until") or "",
            "unknown" if expired is None else ("yes" if expired else "no"),
            item.get("fenced_to") or "",
            str(len(item["repositories"])),
            item.get("address") or "",
        )
    console.print(table)


@hosts_app.command("fence")
def fence(
    host: Annotated[str, typer.Argument(help="The dead host to fence off.")],
    to: Annotated[
        str, typer.Option("--to", help="The daemon host that takes its operations over.")
    ],
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Fence a host whose leases all ran out and hand its operations to --to (operator).

    A host fenced already to --to is left as it is (the answer says so, exit 0); to
    another host it is handover_refused."""
    with _client(url, token_file) as client:
        fenced = client.fence_host(host, to)
    if json_output:
        _emit(fenced)
        return
    if fenced.get("already"):  # asked again (a fence whose answer timed out): the first one's
        console.print(
            f"host {fenced['host']} was fenced already, at epoch {fenced['epoch']} by "
            f"{fenced['fenced_by']} at {fenced['fenced_at']}; its "
            f"{len(fenced['operations'])} operations were handed to {fenced['to']} then: "
            "nothing changed"
        )
        return
    console.print(
        f"host {fenced['host']} fenced at epoch {fenced['epoch']} by {fenced['fenced_by']}; "
        f"{len(fenced['operations'])} operations handed to {fenced['to']}"
    )
    for operation_id in fenced["operations"]:
        console.print(f"  {operation_id}: needs_recovery on {fenced['to']}")


@hosts_app.command("admit")
def admit(
    host: Annotated[str, typer.Argument(help="The fenced host to let write again.")],
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Let a fenced host write again; restart its daemon afterwards (operator)."""
    with _client(url, token_file) as client:
        before = {h["host_id"]: h["status"] for h in client.hosts_seen()["hosts"]}
        admitted = client.admit_host(host)
    if json_output:
        _emit(admitted)
        return
    if before.get(host) == "active":  # never fenced, or admitted already: nothing to restart
        console.print(
            f"host {admitted['host_id']} is not fenced (never, or admitted already): active "
            f"at epoch {admitted['epoch']}, nothing changed"
        )
        return
    console.print(
        f"host {admitted['host_id']} is active at epoch {admitted['epoch']}: restart its "
        "daemon to write again (until then it serves reads and writes nothing)"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(hosts_app, name="hosts")
