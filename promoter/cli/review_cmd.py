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

This module owns the commands' options and help; what ``review`` asks and prints is
``promoter.cli.review_list``'s (which a command line of the common shape reaches without
typer: ``promoter.cli.quick_args``). Deliberately thin: the gate, the binding of an
approval to one operation and its expiry are the host's
(``promoter.engine.review.approval``); this module only asks and prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    shown_path,
)
from promoter.cli.review_list import client, echo, show
from promoter.errors import PromoterError, error_class

__all__ = ["print_decided", "register"]

NoteOpt = Annotated[str, typer.Option("--note", help="Why: journaled with the decision.")]
OpArg = Annotated[str, typer.Argument(help="The operation awaiting approval.")]


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
    show(
        operation=operation,
        path=path,
        every=every,
        stat=stat,
        json_output=json_output,
        url=url,
        token_file=token_file,
    )


def print_decided(view: Mapping[str, Any]) -> None:
    """The operation after a decision, and why it ended there."""
    console.print(
        f"operation [bold]{view['operation_id']}[/] {view['status']} "
        f"(attempt {view.get('attempt', 1)})"
    )
    for step in view.get("steps", []):
        console.print(f"  {step['status']:<10} {step['operation']:<7} {shown_path(step['path'])}")
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
                console.print(f"  composed   {shown_path(str(item['path']))} (hunks {numbers})")


def _show(view: Mapping[str, Any], json_output: bool) -> None:
    """The operation after a decision: its JSON, or ``print_decided``."""
    if json_output:
        echo(json.dumps(view, indent=2, sort_keys=True))
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
    with client(url, token_file) as daemon:
        view = daemon.approve(
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
    with client(url, token_file) as daemon:
        view = daemon.reject(operation, note)
    _show(view, json_output)


def reopen(
    operation: Annotated[str, typer.Argument(help="The rejected operation.")],
    note: NoteOpt = "",
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Reopen a rejected promotion: it awaits a decision again (operator)."""
    with client(url, token_file) as daemon:
        view = daemon.reopen(operation, note)
    _show(view, json_output)


def register(app: typer.Typer) -> None:
    """Attach ``review``, ``approve``, ``reject`` and ``reopen`` to the main app."""
    app.command("review")(review)
    app.command("approve")(approve)
    app.command("reject")(reject)
    app.command("reopen")(reopen)
