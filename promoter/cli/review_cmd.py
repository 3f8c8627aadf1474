"""The approval gate from the command line: ``promoter review``, ``approve``, ``reject``,
``reopen``.

``review`` lists every promotion held in ``awaiting_approval`` with its bundle's diff
(``--stat`` for the summary only), a ``hunk N`` line before each hunk of a modified
file giving the number ``approve --hunks PATH=N`` takes; ``approve OP`` and
``reject OP`` send the operator's decision with a note, which the host journals as a
``decision`` event whose approver is the token's credential (no name is sent: the
host knows who holds the token); ``reopen OP`` holds a rejected promotion for a
decision again. All need an operator token. ``approve OP --only PATH…`` /
``--except PATH…`` / ``--hunks PATH=1,3`` accept a part of the bundle: the host
promotes a derived sub-bundle as its own operation, whose view is printed.

Deliberately thin: the gate, the binding of an approval to one operation and its expiry
are the host's (``promoter.engine.review.approval``); this module only asks and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli.bundle_cmd import print_diff
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
from promoter.errors import PromoterError, error_class

__all__ = ["print_decided", "register"]

NoteOpt = Annotated[str, typer.Option("--note", help="Why: journaled with the decision.")]
OpArg = Annotated[str, typer.Argument(help="The operation awaiting approval.")]
WAIT_TIMEOUT = 660.0


def _client(url: str | None, token_file: Path | None) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file), timeout=WAIT_TIMEOUT)


def review(
    stat: Annotated[bool, typer.Option("--stat", help="Only the diff summary.")] = False,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """List the promotions awaiting approval, each with its bundle's diff (operator)."""
    with _client(url, token_file) as client:
        waiting = client.list_operations(status="awaiting_approval")
        diffs = {op["operation_id"]: client.bundle_diff(str(op["bundle_id"])) for op in waiting}
    if json_output:
        items = [{**op, "diff": diffs[op["operation_id"]]} for op in waiting]
        typer.echo(json.dumps(items, indent=2, sort_keys=True))
        return
    if not waiting:
        console.print("nothing awaits approval")
        return
    for op in waiting:
        console.print(
            f"[bold]{op['operation_id']}[/] awaiting approval: bundle {op['bundle_id']} "
            f"into {escape(str(op['repository']))} (since {op['updated_at']})"
        )
        print_diff(diffs[op["operation_id"]], stat=stat, pager=False, hunk_labels=True)
        console.print(
            f"  approve: promoter approve {op['operation_id']} --note '...'; "
            f"reject: promoter reject {op['operation_id']} --note '...'; "
            "a part: add --only PATH... or --except PATH..., or --hunks PATH=N,N "
            "(N as in the 'hunk N' lines of each file)"
        )


def print_decided(view: dict[str, Any]) -> None:
    """The operation after a decision, and why it ended there."""
    console.print(
        f"operation [bold]{view['operation_id']}[/] {view['status']} "
        f"(attempt {view.get('attempt', 1)})"
    )
    for step in view.get("steps", []):
        console.print(f"  {step['status']:<10} {step['operation']:<7} {escape(step['path'])}")
    if view.get("code"):
        console.print(f"  {escape(str(view['code']))}: {escape(str(view.get('detail') or ''))}")
    for event in view.get("events", []):
        payload = event.get("payload") or {}
        if event.get("kind") == "decision" and payload.get("parent_operation_id"):
            console.print(
                f"  the accepted part of {payload['parent_operation_id']} "
                f"(bundle {payload.get('parent_bundle_id')})"
            )
            for path in payload.get("declined_paths", []):
                console.print(f"  declined   {escape(str(path))}")
            for item in payload.get("composed", []):
                numbers = ",".join(str(n) for n in item["hunks"])
                console.print(f"  composed   {escape(str(item['path']))} (hunks {numbers})")


def _show(view: dict[str, Any], json_output: bool) -> None:
    """The operation after a decision: its JSON, or ``print_decided``."""
    if json_output:
        typer.echo(json.dumps(view, indent=2, sort_keys=True))
    else:
        print_decided(view)


def _raise_unless_done(view: dict[str, Any], wanted: tuple[str, ...]) -> None:
    status = str(view.get("status"))
    if status in wanted:
        return
    if view.get("code"):
        raise error_class(str(view["code"]))(
            str(view.get("detail") or status), operation_id=view["operation_id"], status=status
        )
    raise PromoterError(f"operation {view['operation_id']} is {status}")


def parse_hunks(values: list[str]) -> dict[str, list[int]]:
    """``PATH=1,3`` options as ``{PATH: [1, 3]}`` (the last ``=`` splits: paths may hold one)."""
    chosen: dict[str, list[int]] = {}
    for value in values:
        path, sep, numbers = value.rpartition("=")
        try:
            parsed = [int(n) for n in numbers.split(",")]
        except ValueError:
            parsed = []
        if not sep or not path or not parsed or min(parsed) < 1:
            raise typer.BadParameter(f"{value!r}: give PATH=N[,N...] with hunk numbers from 1")
        chosen.setdefault(path, []).extend(parsed)
    return chosen


def approve(
    operation: OpArg,
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="With --only or --except: the paths (wire form).", show_default=False),
    ] = None,
    only: Annotated[
        bool, typer.Option("--only", help="Accept only PATHS; the rest are declined.")
    ] = False,
    except_: Annotated[
        bool, typer.Option("--except", help="Decline PATHS; the rest are accepted.")
    ] = False,
    hunks: Annotated[
        list[str] | None,
        typer.Option(
            "--hunks",
            help="PATH=1,3: accept only these hunks of a modified text file (numbered as in "
            "the review diff); repeatable.",
            show_default=False,
        ),
    ] = None,
    note: NoteOpt = "",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the attempt.")] = True,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Approve a held promotion (or a part: --only, --except, --hunks) (operator).

    Its attempt starts and re-checks everything; a part is derived, verified again and
    promoted as its own operation."""
    if only and except_:
        raise typer.BadParameter("give --only or --except, not both")
    if (only or except_) != bool(paths):
        raise typer.BadParameter("paths go with --only or --except (and those need paths)")
    chosen = parse_hunks(hunks or [])
    with _client(url, token_file) as client:
        view = client.approve(
            operation,
            note,
            wait=wait,
            only=list(paths or []) if only else None,
            except_=list(paths or []) if except_ else None,
            hunks=chosen or None,
        )
    _show(view, json_output)
    _raise_unless_done(view, ("completed", "in_progress", "applied_unverified"))


def reject(
    operation: OpArg,
    note: NoteOpt = "",
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Reject a held promotion: it is refused and nothing is written (operator)."""
    with _client(url, token_file) as client:
        view = client.reject(operation, note)
    _show(view, json_output)


def reopen(
    operation: Annotated[str, typer.Argument(help="The rejected operation.")],
    note: NoteOpt = "",
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Reopen a rejected promotion: it awaits a decision again (operator)."""
    with _client(url, token_file) as client:
        view = client.reopen(operation, note)
    _show(view, json_output)


def register(app: typer.Typer) -> None:
    """Attach ``review``, ``approve``, ``reject`` and ``reopen`` to the main app."""
    app.command("review")(review)
    app.command("approve")(approve)
    app.command("reject")(reject)
    app.command("reopen")(reopen)
