"""``promoter review``: the promotions awaiting approval, each with its bundle's diff.

``show`` lists every promotion held in ``awaiting_approval`` with its bundle's diff
(``stat``: the summary only), a ``hunk N`` line before each hunk of a modified file
giving the number ``approve --hunks PATH=N`` takes, every file the answer does not show
in full, with its sizes and flags, and the command that approves or rejects it; with an
operation and ``path`` or ``every``, one file's diff whole or the whole bundle's, one
bounded request a page (protocol: api#every-byte-reviewable). ``json_output`` prints the
answers as JSON instead.

It imports no typer: the command's options and their help are
``promoter.cli.review_cmd``'s, and a command line of the common shape reaches ``show``
without typer (``promoter.cli.quick_args``). Deliberately not here: any decision
(``approve``, ``reject``, ``reopen``: ``promoter.cli.review_cmd``).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from promoter.cli.bundle_view import print_diff, whole_diff
from promoter.cli.common import console, escape, read_token, server_url
from promoter.client.sync import PromoterClient
from promoter.errors import OperationConflict

__all__ = ["approve_hint", "client", "echo", "show"]

WAIT_TIMEOUT = 660.0
SEEN_HINT = 10  # files named one by one in the approve hint


def client(url: str | None, token_file: Path | None) -> PromoterClient:
    """The daemon's client with the operator's token, waiting as long as an approval may."""
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=WAIT_TIMEOUT)


def echo(text: str) -> None:
    """``text`` and a newline on stdout, flushed: what ``typer.echo`` writes of a JSON
    document (ASCII, as ``json.dumps`` escapes it: no style for it to strip)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def approve_hint(operation_id: str, diff: Mapping[str, Any], token_file: Path | None = None) -> str:
    """The commands that decide; with the credential the review was read with, so that
    the decision records the same person (``--token-file``)."""
    unseen = diff.get("unseen") or []
    seen = "".join(f" --seen {shlex.quote(str(u['path']))}" for u in unseen[:SEEN_HINT])
    if len(unseen) > SEEN_HINT:
        seen = f" --seen PATH (each of the {len(unseen)} listed above) or --all-seen"
    who = f" --token-file {shlex.quote(str(token_file))}" if token_file is not None else ""
    return (
        f"  approve: promoter approve {operation_id}{seen} --note '...'{who}; "
        f"reject: promoter reject {operation_id} --note '...'{who}; "
        "a part: add --only PATH... or --except PATH..., or --hunks PATH=N,N "
        "(N as in the 'hunk N' lines of each file)"
    )


def show(
    *,
    operation: str | None,
    path: list[str] | None,
    every: bool,
    stat: bool,
    json_output: bool,
    url: str | None,
    token_file: Path | None,
) -> None:
    """What ``promoter review`` prints (``path`` and ``every`` only with an operation)."""
    with client(url, token_file) as daemon:
        waiting = daemon.list_operations(status="awaiting_approval")
        if operation is not None:
            waiting = [op for op in waiting if op["operation_id"] == operation]
            if not waiting:  # named with how it stands (an unknown one: not_found)
                status = daemon.get_operation(operation)["status"]
                raise OperationConflict(
                    f"operation {operation} is not awaiting approval: it is {status} "
                    f"(promoter ops show {operation})",
                    operation_id=operation,
                    status=status,
                )
        diffs = {op["operation_id"]: daemon.bundle_diff(str(op["bundle_id"])) for op in waiting}
        wholes: list[dict[str, Any]] = []
        for op in waiting if path or every else []:
            bundle_id = str(op["bundle_id"])
            asked: list[str | None] = list(path or []) or [None]
            for one in asked:
                wholes.append(whole_diff(daemon.bundle_diff_pages(bundle_id, path=one)))
    if json_output:
        if wholes:
            echo(json.dumps(wholes, indent=2, sort_keys=True))
            return
        items = [{**op, "diff": diffs[op["operation_id"]]} for op in waiting]
        echo(json.dumps(items, indent=2, sort_keys=True))
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
        console.print(approve_hint(operation_id, diff, token_file), highlight=False)
