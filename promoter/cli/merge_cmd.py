"""``promoter merge OP``: merge a drifted promotion away from the worktree (operator).

Asks the host (``POST /v1/operations/{id}/merge``) for a three-way merge of every file of
the operation's bundle that the person changed, and prints what came of it: the new
bundle held for approval (approve it with ``promoter approve``), or each conflict with
the merged text and its markers (nothing was written, no bundle made), or the paths that
are not text shown side by side (old, current and new hash and size). Exits with the
error's exit code when the merge made no bundle.

Deliberately thin: the merge, its scratch area and its rules are the host's
(``promoter.engine.operation.merge``); this module only asks and prints.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    read_token,
    server_url,
    shown_path,
)
from promoter.client.sync import PromoterClient
from promoter.errors import MergeConflict, MergeUnsupported

if TYPE_CHECKING:
    from promoter.domain import answers

__all__ = ["register"]


def _side(name: str, side: answers.MergeSide) -> str:
    digest = side["sha256"] or "-"
    kind = f" {side.get('kind')}" if side.get("kind") not in (None, "file") else ""
    return f"{name}={digest[:12]} {side['mode'] or '-'} {side['bytes']} bytes{kind}"


def _print_paths(paths: list[answers.MergePathReport]) -> None:
    for item in paths:
        sides = ", ".join(
            _side(name, side)
            for name, side in (
                ("old", item["old"]),
                ("current", item["current"]),
                ("new", item["new"]),
            )
        )
        reason = f" ({escape(item['reason'])})" if item["reason"] else ""
        console.print(f"  {item['result']:<11} {shown_path(item['path'])}{reason}")
        console.print(f"              {escape(sides)}")
        merged_text = item.get("merged_text")
        if merged_text is not None:
            console.print(
                f"  --- {shown_path(item['path'])} with conflict markers (not written) ---"
            )
            typer.echo(merged_text, nl=not merged_text.endswith("\n"))
            if item.get("truncated"):
                console.print("  [... cut: the text is longer ...]")


def _print_repository(checks: object) -> None:
    """What of the repository moved since the grant: each check, expected and now."""
    if not isinstance(checks, dict):
        return
    for name, check in checks.items():
        if isinstance(check, dict) and check.get("ok") is False:
            expected, actual = check.get("expected"), check.get("actual")
            console.print(escape(f"  {name}: expected {expected}, now {actual}"))


def merge(
    operation: Annotated[str, typer.Argument(help="A promotion refused with target_drift.")],
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Merge a drifted promotion's files into a new bundle held for approval (operator)."""
    with PromoterClient(server_url(url), read_token(token_file, url)) as client:
        try:
            result = client.merge(operation)
        except (MergeConflict, MergeUnsupported) as exc:
            if json_output:
                typer.echo(json.dumps(exc.to_problem(), indent=2, sort_keys=True))
            else:
                console.print(f"[bold]{exc.code}[/]: {escape(exc.detail)}")
                _print_paths(list(exc.context.get("paths") or []))
                _print_repository(exc.context.get("repository"))
            raise
    if json_output:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    console.print(
        f"merged into bundle [bold]{result['bundle_id']}[/] (from {result['merged_from']})"
    )
    _print_paths(result["paths"])
    held = result["promotion"]
    if held["operation_id"] is not None:
        console.print(
            f"operation [bold]{held['operation_id']}[/] {held['status']}: review it with "
            f"promoter review, then promoter approve {held['operation_id']}"
        )
    else:
        console.print(
            f"the promotion is not held yet ({escape(str(held['code']))}: "
            f"{escape(held['detail'])}); request it with a current fence"
        )


def register(app: typer.Typer) -> None:
    """Attach ``merge`` to the main app."""
    app.command("merge")(merge)
