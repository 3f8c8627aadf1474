"""The approval gate from the command line: ``promoter review``, ``approve``, ``reject``,
``reopen``.

``review`` lists every promotion held in ``awaiting_approval`` with its bundle's diff
(``--stat`` for the summary only), a ``hunk N`` line before each hunk of a modified
file giving the number ``approve --hunks PATH=N`` takes, and every file the answer does
not show in full, with its sizes and flags; ``review OP --path PATH`` prints one file's
diff whole and ``review OP --all`` the whole bundle's, one bounded request a page
(protocol: api#every-byte-reviewable). ``approve OP`` and
``reject OP`` send the operator's decision with a note, which the host journals as a
``decision`` event whose approver is the token's credential (no name is sent: the
host knows who holds the token); ``reopen OP`` holds a rejected promotion for a
decision again. All need an operator token. ``approve OP --only PATH…`` /
``--except PATH…`` / ``--hunks PATH=1,3`` accept a part of the bundle: the host
promotes a derived sub-bundle as its own operation, whose view is printed. When the
review's first page does not show every file in full, ``approve`` names each file it
accepts that the page did not show (``--seen PATH``) or says ``--all-seen``; the host
refuses anything less (``diff_not_seen``, naming them).

Deliberately thin: the gate, the binding of an approval to one operation and its expiry
are the host's (``promoter.engine.review.approval``); this module only asks and prints.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli.bundle_cmd import print_diff, whole_diff
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
from promoter.errors import OperationConflict, PromoterError, error_class

__all__ = ["print_decided", "register"]

NoteOpt = Annotated[str, typer.Option("--note", help="Why: journaled with the decision.")]
OpArg = Annotated[str, typer.Argument(help="The operation awaiting approval.")]
WAIT_TIMEOUT = 660.0
SEEN_HINT = 10  # files named one by one in the approve hint


def _client(url: str | None, token_file: Path | None) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=WAIT_TIMEOUT)


def _approve_hint(operation_id: str, diff: Mapping[str, Any]) -> str:
    unseen = diff.get("unseen") or []
    seen = "".join(f" --seen {shlex.quote(str(u['path']))}" for u in unseen[:SEEN_HINT])
    if len(unseen) > SEEN_HINT:
        seen = f" --seen PATH (each of the {len(unseen)} listed above) or --all-seen"
    return (
        f"  approve: promoter approve {operation_id}{seen} --note '...'; "
        f"reject: promoter reject {operation_id} --note '...'; "
        "a part: add --only PATH... or --except PATH..., or --hunks PATH=N,N "
        "(N as in the 'hunk N' lines of each file)"
    )


def review(
    operation: Annotated[
        str | None,
        typer.Argument(help="Only this held operation.", show_default=False),
    ] = None,
    path: Annotated[
        list[str] | None,
        typer.Option(
            "--path",
            help="With OPERATION: this path's diff (wire form), whole, page by page; "
            "repeatable.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        bool,
        typer.Option("--all", help="With OPERATION: the whole diff, page by page: every byte."),
    ] = False,
    stat: Annotated[bool, typer.Option("--stat", help="Only the diff summary.")] = False,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """List the promotions awaiting approval, each with its bundle's diff (operator).

    An answer is one bounded page: the files it does not show in full are listed with
    their sizes and flags; --path PATH or --all print them whole."""
    if (path or every) and operation is None:
        raise typer.BadParameter("--path and --all go with an OPERATION")
    with _client(url, token_file) as client:
        waiting = client.list_operations(status="awaiting_approval")
        if operation is not None:
            waiting = [op for op in waiting if op["operation_id"] == operation]
            if not waiting:
                raise OperationConflict(
                    f"operation {operation} is not awaiting approval", operation_id=operation
                )
        diffs = {op["operation_id"]: client.bundle_diff(str(op["bundle_id"])) for op in waiting}
        wholes: list[dict[str, Any]] = []
        for op in waiting if path or every else []:
            bundle_id = str(op["bundle_id"])
            asked: list[str | None] = list(path or []) or [None]
            for one in asked:
                wholes.append(whole_diff(client.bundle_diff_pages(bundle_id, path=one)))
    if json_output:
        if wholes:
            typer.echo(json.dumps(wholes, indent=2, sort_keys=True))
            return
        items = [{**op, "diff": diffs[op["operation_id"]]} for op in waiting]
        typer.echo(json.dumps(items, indent=2, sort_keys=True))
        return
    if not waiting:
        console.print("nothing awaits approval")
        return
    for whole in wholes:
        print_diff(whole, stat=stat, pager=False, hunk_labels=True)
    for op in waiting:
        operation_id = op["operation_id"]
        diff = diffs[operation_id]
        if not wholes:
            console.print(
                f"[bold]{operation_id}[/] awaiting approval: bundle {op['bundle_id']} "
                f"into {escape(str(op['repository']))} (since {op['updated_at']})"
            )
            hint = f"promoter review {operation_id}"
            print_diff(diff, stat=stat, pager=False, hunk_labels=True, hint=hint)
        console.print(_approve_hint(operation_id, diff), highlight=False)


def print_decided(view: Mapping[str, Any]) -> None:
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


def _show(view: Mapping[str, Any], json_output: bool) -> None:
    """The operation after a decision: its JSON, or ``print_decided``."""
    if json_output:
        typer.echo(json.dumps(view, indent=2, sort_keys=True))
    else:
        print_decided(view)


def _raise_unless_done(view: Mapping[str, Any], wanted: tuple[str, ...]) -> None:
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
    seen: Annotated[
        list[str] | None,
        typer.Option(
            "--seen",
            help="A file the review did not show in full that you read (review OP --path) "
            "or accept as it is; repeatable. Needed for each such file approved.",
            show_default=False,
        ),
    ] = None,
    all_seen: Annotated[
        bool,
        typer.Option("--all-seen", help="You saw every file, or accept those not shown in full."),
    ] = False,
    note: NoteOpt = "",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the attempt.")] = True,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Approve a held promotion (or a part: --only, --except, --hunks) (operator).

    Its attempt starts and re-checks everything; a part is derived, verified again and
    promoted as its own operation. A file the review's first page did not show in full
    is approved only when named (--seen PATH) or with --all-seen."""
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
            seen=list(seen or []) or None,
            all_seen=all_seen,
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
