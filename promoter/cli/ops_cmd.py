"""The operator's console: ``promoter ops list|show|recover|reconcile|rollback``.

Thin commands over ``promoter.client.sync``: rich tables for people, ``--json`` for scripts.
``show`` prints, per path, the journal step, the expected old and new states and the
state the target reads as now, each approval decision with the credential that made it
(an approval in part with the paths accepted and declined and the operation of the part,
the files not shown in full that it named as seen; a merge with the bundle it made), each
drifted path with what was expected and found, and says what the operator can do next (for
a promotion refused with ``target_drift``: ``promoter merge``, or, once merged, the
operation the merge made and how it stands). Deciding anything
is the host's job; this module only asks and prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    folded_columns,
    iec,
    read_token,
    server_url,
    shown_path,
    whole_column,
)
from promoter.client.sync import PromoterClient
from promoter.domain.hidden import visible

ops_app = typer.Typer(
    help="Operations: inspect, recover, reconcile, roll back.", no_args_is_help=True
)

NEXT_STEPS = {
    "completed": "Nothing to do. `promoter receipt fetch OP` gets the receipt.",
    "refused": "Nothing was written. Fix the cause shown above and request the promotion again.",
    "needs_recovery": "Run `promoter ops recover OP --fence N` with the current lease's fence.",
    "needs_reconciliation": (
        "Inspect the paths marked 'neither'. Then `promoter ops reconcile OP continue` after "
        "fixing them by hand, `... rollback` to restore promoter's own bytes, or `... abandon`."
    ),
    "in_progress": "A daemon is working on it; look again shortly.",
    "applied_unverified": "The post-promotion check is running.",
    "rolled_back": "Rolled back; see `promoter receipt fetch OP --rollback --dsse`.",
    "rollback_partial": "Some targets were in conflict and kept; see the rollback receipt.",
    "rollback_failed": "No target could be restored; the rollback receipt gives each reason.",
    "abandoned": "Closed by the operator; files were left as they are.",
}


def _client(url: str | None, token_file: Path | None, timeout: float = 660.0) -> PromoterClient:
    return PromoterClient(server_url(url), read_token(token_file, url), timeout=timeout)


def _emit(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


def _state(state: dict[str, Any] | None) -> str:
    if not state:
        return "?"
    if "error" in state:
        return f"unsafe ({state['error']})"
    if not state.get("exists"):
        return "missing"
    digest = state.get("sha256")
    kind = str(state.get("kind", "file"))
    if kind not in ("file", "None"):
        return kind
    return f"{str(digest)[:12]} {state.get('mode')}"


@ops_app.command("list")
def list_ops(
    status: Annotated[str | None, typer.Option("--status", help="Only this status.")] = None,
    repository: Annotated[
        str | None, typer.Option("--repository", help="Name or identity.")
    ] = None,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """List operations, newest first (operator token)."""
    with _client(url, token_file, 60.0) as client:
        items = client.list_operations(status=status, repository=repository)
    if json_output:
        _emit(items)
        return
    from rich.table import Table

    table = Table(
        whole_column("operation", [item["operation_id"] for item in items]),
        *folded_columns("kind", "status", "attempt", "repository", "code", "updated"),
    )
    for item in items:
        table.add_row(
            item["operation_id"],
            item["kind"],
            item["status"],
            str(item["attempt"]),
            item["repository"],
            item.get("code") or "",
            item["updated_at"],
        )
    console.print(table)
    console.print(f"{len(items)} operations")


@ops_app.command("show")
def show(
    operation_id: Annotated[str, typer.Argument(help="The operation id (op_...).")],
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Show an operation: per path its step, expected states and actual state now."""
    with _client(url, token_file, 60.0) as client:
        _show_after(client, operation_id, json_output)


def _paths(items: Any) -> str:
    return ", ".join(visible(str(p)) for p in items) if items else "none"


def _part_lines(payload: dict[str, Any]) -> list[str]:
    """What a partial approval kept and left out, and the operation of the part."""
    lines = []
    if payload.get("approval") == "approved_in_part":
        lines.append(f"  accepted: {_paths(payload.get('accepted_paths'))}")
        lines.append(f"  declined: {_paths(payload.get('declined_paths'))}")
        lines.append(
            f"  the accepted part is operation {payload.get('derived_operation_id')} "
            f"(bundle {payload.get('derived_bundle_id')})"
        )
    elif payload.get("parent_operation_id"):
        lines.append(
            f"  the accepted part of operation {payload['parent_operation_id']} "
            f"(bundle {payload.get('parent_bundle_id')})"
        )
        if payload.get("declined_paths"):
            lines.append(f"  declined: {_paths(payload['declined_paths'])}")
    else:
        return lines
    for item in payload.get("composed") or []:
        numbers = ",".join(str(n) for n in item.get("hunks", []))
        lines.append(f"  composed: {visible(str(item.get('path')))} (hunks {numbers})")
    return lines


def approval_lines(view: Mapping[str, Any]) -> list[str]:
    """Per decision: the approval and the credential that made it, with the note; for an
    approval in part the paths accepted and declined, the hunks composed and the operation
    of the part (or, on that operation, the one it was part of); for a merge of a drifted
    promotion the merged bundle and its paths."""
    lines = []
    for event in view.get("events", []):
        payload = event.get("payload")
        if event.get("kind") != "decision" or not isinstance(payload, dict):
            continue
        claimed = payload.get("by")
        by: dict[str, Any] = claimed if isinstance(claimed, dict) else {}
        who = f"by {by.get('name', '?')} ({by.get('role', '?')})"
        merge = payload.get("merge")
        if isinstance(merge, dict):
            lines.append(f"merged {who} into bundle {merge.get('bundle_id')}")
            lines.append(f"  merged paths: {_paths(payload.get('paths'))}")
            continue
        if "approval" not in payload:
            continue
        line = f"{payload['approval']} {who}"
        if payload.get("note"):
            line += f": {payload['note']}"
        lines.append(line)
        lines += _part_lines(payload)
        seen = payload.get("seen")
        if isinstance(seen, dict) and (seen.get("all_seen") or seen.get("paths")):
            named = "every file" if seen.get("all_seen") else _paths(seen.get("paths"))
            lines.append(f"  files the review did not show in full, approved as seen: {named}")
    return lines


def print_view(view: Mapping[str, Any]) -> None:
    console.print(
        f"[bold]{view['operation_id']}[/] {view['kind']} in {escape(view['repository'])}: "
        f"[bold]{view['status']}[/] (attempt {view['attempt']})"
    )
    if view.get("code"):
        code, detail = escape(f"[{view['code']}]"), escape(str(view.get("detail") or ""))
        console.print(f"  {code} {detail}")
    for line in approval_lines(view):
        console.print(f"  {escape(line)}")
    current = {item["path"]: item for item in view.get("current_targets", [])}
    from rich.table import Table

    table = Table()
    table.add_column("path", overflow="fold")
    for header in ("step", "operation", "expected old", "expected new", "now", "matches"):
        table.add_column(header, overflow="fold")
    for step in view.get("steps", []):
        now = current.get(step["path"], {})
        table.add_row(
            shown_path(step["path"]),
            step["status"],
            step["operation"],
            _state(step["old"]),
            _state(step["new"]),
            _state(now.get("actual")),
            now.get("matches", "?"),
        )
    if view.get("steps"):  # an operation that wrote nothing has no table, not an empty one
        console.print(table)
    drift = (view.get("report") or {}).get("drift_report") or {}
    for name, fact in (drift.get("repository") or {}).items():
        if not fact.get("ok", True):
            console.print(f"  drift {name}: expected {fact['expected']}, found {fact['actual']}")
    for item in drift.get("paths", []):
        if item.get("verdict") == "drift":
            console.print(
                f"  drift {shown_path(item['path'])}: expected {_state(item.get('expected_old'))}, "
                f"found {_state(item.get('actual'))} ({escape('; '.join(item['reasons']))})"
            )
    for kept in (view.get("report") or {}).get("kept") or []:
        sha = str(kept.get("sha256") or "")[:12]
        console.print(
            f"  kept {escape(str(kept.get('path')))}: bytes that were not promoter's "
            f"({sha}, {iec(int(kept.get('size') or 0))}) are at {escape(str(kept.get('kept_as')))}"
        )
    check = (view.get("report") or {}).get("check")
    if check:
        console.print(
            f"  check {check['argv']}: exit {check['exit_code']}"
            f"{' (timed out)' if check['timed_out'] else ''}"
        )
    console.print(
        f"events: {len(view.get('events', []))}, chain verified: " f"{view.get('events_verified')}"
    )
    console.print("next: " + _next_step(view), soft_wrap=True)


def _status(operation: Mapping[str, Any]) -> str:
    """``status`` or ``status, code``: how a merged operation stands."""
    code = operation.get("code")
    return f"{operation['status']}, {code}" if code else str(operation["status"])


def _next_step(view: Mapping[str, Any]) -> str:
    if view.get("code") == "approved_in_part":
        derived = next(
            (
                e["payload"].get("derived_operation_id")
                for e in view.get("events", [])
                if e.get("kind") == "decision" and isinstance(e.get("payload"), dict)
                if e["payload"].get("derived_operation_id")
            ),
            None,
        )
        if derived:
            return (
                "Nothing of this operation was written as such; the accepted part is "
                f"operation {derived}: `promoter ops show {derived}`."
            )
    merged = view.get("merged_into") or []
    if merged:
        return "; ".join(
            f"merged: operation {m['operation_id']} ({_status(m)}): "
            f"`promoter ops show {m['operation_id']}`"
            for m in merged
        )
    if view.get("code") == "target_drift" and view.get("kind", "promotion") == "promotion":
        return (
            "Nothing was written: the files above changed under it. Merge its change into "
            "them away from the worktree: `promoter merge OP` (a clean merge is a new bundle "
            "held for approval; a conflict is shown and nothing is written)."
        ).replace("OP", view["operation_id"])
    if view.get("code") == "approval_rejected" and view["status"] == "refused":
        return (
            "Nothing was written. A rejection is final: asking again is refused. "
            "`promoter reopen OP --note '...'` holds it for a decision again; otherwise a "
            "new grant is a new operation."
        ).replace("OP", view["operation_id"])
    if view["status"] == "needs_recovery" and view.get("kind") in ("rollback", "restore"):
        return (
            f"Run `promoter ops recover OP --fence 0`: a {view['kind']} holds no lease, so "
            "any fence does."
        ).replace("OP", view["operation_id"])
    if view["status"] == "needs_recovery" and (fence := _requested_fence(view)) is not None:
        return (
            f"Run `promoter ops recover OP --fence {fence}`: the lease's fence when it was "
            "requested (if the lease moved on since, the current one)."
        ).replace("OP", view["operation_id"])
    return NEXT_STEPS.get(view["status"], "").replace("OP", view["operation_id"])


def _requested_fence(view: Mapping[str, Any]) -> int | None:
    """The fence the operation was requested with, from its last decision that names one."""
    fences = [
        e["payload"]["fence"]
        for e in view.get("events", [])
        if e.get("kind") == "decision" and isinstance(e.get("payload"), dict)
        if isinstance(e["payload"].get("fence"), int)
    ]
    return fences[-1] if fences else None


def _show_after(client: PromoterClient, operation_id: str, json_output: bool) -> None:
    """Print the operation as it stands now, each target read now."""
    view = client.get_operation(operation_id, current=True)
    if json_output:
        _emit(view)
    else:
        print_view(view)


@ops_app.command("recover")
def recover(
    operation_id: Annotated[str, typer.Argument(help="The operation id.")],
    fence: Annotated[int, typer.Option("--fence", help="The current lease's fence.")],
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Recover an operation that needs recovery (orchestrator or operator token)."""
    with _client(url, token_file) as client:
        client.recover(operation_id, fence)
        _show_after(client, operation_id, json_output)


class Decision(str, Enum):
    """What ``reconcile`` takes; any other word is a usage error (2), never asked of the
    daemon."""

    continue_ = "continue"
    rollback = "rollback"
    abandon = "abandon"


@ops_app.command("reconcile")
def reconcile(
    operation_id: Annotated[str, typer.Argument(help="The operation id.")],
    decision: Annotated[Decision, typer.Argument(help="continue, rollback or abandon.")],
    note: Annotated[str, typer.Option("--note", help="Why; kept in the journal.")] = "",
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Carry out an operator's decision on an operation that needs reconciliation."""
    with _client(url, token_file) as client:
        client.reconcile(operation_id, decision.value, note)
        _show_after(client, operation_id, json_output)


@ops_app.command("rollback")
def rollback(
    operation_id: Annotated[str, typer.Argument(help="The operation id.")],
    note: Annotated[str, typer.Option("--note", help="Why; kept in the journal.")] = "",
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Restore promoter's own bytes of a promotion; prints the rollback receipt."""
    with _client(url, token_file) as client:
        receipt = client.rollback(operation_id, note)
    if json_output:
        _emit(receipt)
        return
    console.print(f"rollback of {operation_id}: [bold]{receipt['status']}[/]")
    from rich.table import Table

    table = Table()
    for header in ("path", "result", "actual now"):
        table.add_column(header, overflow="fold")
    for target in receipt["targets"]:
        table.add_row(shown_path(target["path"]), target["result"], _state(target["actual"]))
    console.print(table)
    for directory in receipt["removed_directories"]:
        console.print(f"  removed directory {escape(directory)}")


def register(app: typer.Typer) -> None:
    app.add_typer(ops_app, name="ops")
