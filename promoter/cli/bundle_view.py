"""How a bundle, its verification receipt and its diff are printed (protocol: api#command-line).

``print_bundle`` prints a bundle's identity and one line per change (a summary of a big
one), ``print_receipt`` each check of a verification receipt, and the ``diff_*``
functions with ``print_diff`` a diff answer of the daemon's: the flagged files, the files
not shown in full (protocol: api#every-byte-reviewable), the stat or the summary
``promoter run --yes`` shows, and the patch with git's colours, paged when longer than the
screen on a terminal. ``whole_diff`` joins the pages of one. The lines are ``Styled``
text (``promoter.cli.styled``), printed without rich off a terminal; rich's table is
imported only for a table the plain printer leaves to it.

Deliberately not here: any command or request (``promoter.cli.bundle_cmd``,
``promoter.cli.review_cmd``, ``promoter.cli.run_person``), and typer: ``promoter run``
prints with this module without loading it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from promoter.cli.common import (
    console,
    escape,
    iec,
    print_plain_table,
    rich_would_colour,
    shown_path,
)
from promoter.cli.styled import Styled

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "SUMMARY_PATHS",
    "bundle_table",
    "diff_flags",
    "diff_summary",
    "diff_text",
    "diff_unseen",
    "print_bundle",
    "print_diff",
    "print_receipt",
    "whole_diff",
]

SUMMARY_PATHS = 20  # above this many changes, a summary unless --verbose
BUNDLE_COLUMNS = ("operation", "path", "old", "new")


def print_bundle(bundle: dict[str, Any], *, verbose: bool = False, paths: bool = True) -> None:
    """The bundle's identity and one line per change, or a summary of a big bundle
    (``paths=False``: its identity only)."""
    changes = bundle["changes"]
    console.print(
        f"bundle [bold]{bundle['bundle_id']}[/]: {bundle['change_count']} change(s), "
        f"{iec(bundle['total_bytes'])} of new content, base tree {bundle['base_tree'][:12]}"
    )
    if not paths:
        return
    shown = changes if verbose or len(changes) <= SUMMARY_PATHS else changes[:SUMMARY_PATHS]
    if len(shown) < len(changes):
        counts = Counter(change["operation"] for change in changes)
        console.print("  " + ", ".join(f"{n} {op}" for op, n in sorted(counts.items())))
    rows = [
        (
            change["operation"],
            shown_path(change["path"]),
            _state(change["old"]),
            _state(change["new"]),
        )
        for change in shown
    ]
    if shown and not print_plain_table(BUNDLE_COLUMNS, rows):
        console.print(bundle_table(BUNDLE_COLUMNS, rows))
    if len(shown) < len(changes):
        console.print(f"  … and {len(changes) - len(shown)} more (--verbose lists every path)")


def bundle_table(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> Table:
    """The changes as rich prints them where the plain printer does not. On a terminal
    narrower than the table, the path folds onto more lines and every other cell stays
    whole: never `cre` for `create`, or a path cut short."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for k, column in enumerate(columns):
        if column == "path":
            table.add_column(column, overflow="fold")
            continue
        cells = [Text.from_markup(column), *(Text.from_markup(row[k]) for row in rows)]
        widest = max(cell.cell_len for cell in cells)
        table.add_column(column, overflow="fold", no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*row)
    return table


def _state(state: dict[str, Any]) -> str:
    if not state["exists"]:
        return "-"
    return f"{state['mode']} {iec(state['bytes'])}"


def print_receipt(receipt: dict[str, Any]) -> None:
    """Each check of a verification receipt, passed or failed, with its detail."""
    status = receipt["status"]
    colour = "green" if status == "passed" else "red"
    console.print(
        f"verification [bold {colour}]{status}[/] for {receipt['bundle_id']} "
        f"(receipt {receipt['receipt_sha256']})"
    )
    for check in receipt["checks"]:
        mark = "[green]passed[/]" if check["status"] == "passed" else "[red]FAILED[/]"
        detail = f"  {escape(check['detail'])}" if check["detail"] else ""
        console.print(f"  {check['name']:<20} {mark}{detail}", soft_wrap=True)


def diff_flags(result: Mapping[str, Any]) -> Styled:
    """One warning line per file whose diff carries flags (what can hide code or run)."""
    out = Styled()
    for f in result["files"]:
        flags = list(f.get("flags") or [])
        if f.get("summarized"):
            flags.append("summarized")
        if not flags:
            continue
        path = f.get("path_shown", f["path"])
        out.append(f" ! {path}: {', '.join(flags)}", style="bold yellow")
        if f.get("symlink_target") is not None:
            out.append(f" -> {f['symlink_target']}", style="bold yellow")
        out.append("\n")
    return out


def diff_renames(result: Mapping[str, Any]) -> Styled:
    """One line per rename the diff found: ``rename a → b (97 %)`` (the bundle itself
    deletes ``a`` and creates ``b``)."""
    out = Styled()
    for f in result["files"]:
        if f.get("rename_from") is not None:
            out.append(f" rename {_shown_path(f)}\n", style="bold")
    return out


def diff_stat(result: Mapping[str, Any]) -> Styled:
    """One line per file (``+added -removed``, ``binary`` or ``summarized``, then its
    flags in brackets; a rename as ``rename a → b (97 %)``), then the totals."""
    out = Styled()
    paths = [_shown_path(f) for f in result["files"]]
    width = max((len(p) for p in paths), default=0)
    for f, path in zip(result["files"], paths, strict=True):
        if f.get("renamed_to") is not None:
            continue  # its rename's line names it
        out.append(f" {_operation(f):<6} {path:<{width}}  ")
        flags = [flag for flag in f.get("flags") or [] if flag != "binary"]
        if f["binary"] or f.get("summarized"):
            kind = "binary" if f["binary"] else "summarized"
            old = _old_bytes(f, result["files"])
            out.append(f"{kind}, {iec(old or 0)} -> {iec(f['new_bytes'] or 0)}")
        else:
            out.append(f"+{f['added']}", style="green")
            out.append(" ")
            out.append(f"-{f['removed']}", style="red")
        if flags:
            out.append(f"  [{', '.join(flags)}]", style="bold yellow")
        out.append("\n")
    added = sum(f["added"] or 0 for f in result["files"])
    removed = sum(f["removed"] or 0 for f in result["files"])
    out.append(f" {len(result['files'])} file(s), {added} insertion(s), {removed} deletion(s)\n")
    return out


def diff_summary(result: Mapping[str, Any], hint: str = "") -> Styled:
    """The review without the patch (``promoter run --yes``): one line per file with its
    operation, path, sizes, lines added and removed and flags; the totals; every file not
    shown in full; and, with ``hint`` (a command), how to read the whole diff."""
    out = Styled()
    files = result["files"]
    paths = [_shown_path(f) for f in files]
    renamed = [f for f in files if f.get("renamed_to") is not None]
    width = max((len(p) for p in paths), default=0)
    ops = max((len(_operation(f)) for f in files), default=0)
    for f, path in zip(files, paths, strict=True):
        if f.get("renamed_to") is not None:
            continue  # its rename's line names it
        out.append(f" {_operation(f):<{ops}} {path:<{width}}  ")
        out.append(f"{_size(_old_bytes(f, files))} -> {_size(f['new_bytes'])}, ")
        if f["binary"] or f.get("summarized"):
            out.append("binary" if f["binary"] else "summarized")
        elif f["added"] is not None:
            out.append(f"+{f['added']}", style="green")
            out.append(" ")
            out.append(f"-{f['removed']}", style="red")
        flags = [flag for flag in f.get("flags") or [] if flag != "binary"]
        if flags:
            out.append(f"  [{', '.join(flags)}]", style="bold yellow")
        out.append("\n")
    added = sum(f["added"] or 0 for f in files)
    removed = sum(f["removed"] or 0 for f in files)
    renames = f" ({len(renamed)} of them renamed)" if renamed else ""
    out.append(
        f" {len(files) - len(renamed)} file(s){renames}, {added} insertion(s), "
        f"{removed} deletion(s)\n"
    )
    out.append_text(diff_unseen(result))
    if hint:
        out.append(f"   the whole diff: {hint} (or --diff)\n", style="dim")
    return out


def _operation(f: dict[str, Any]) -> str:
    """``rename`` for a file the diff pairs with the path it came from, else its operation."""
    return "rename" if f.get("rename_from") is not None else str(f["operation"])


def _old_bytes(f: Mapping[str, Any], files: Iterable[Mapping[str, Any]]) -> int | None:
    """The old side's size: for a rename the size of the path it came from, never the
    created path's absent one (``- -> 250 B`` read as a new file)."""
    came_from = f.get("rename_from")
    sides = [f] if came_from is None else [g for g in files if g["path"] == came_from]
    size: int | None = sides[0]["old_bytes"] if sides else None
    return size


def _shown_path(f: Mapping[str, Any]) -> str:
    """``old → new (97 %)`` for a rename, else the path as shown."""
    path = str(f.get("path_shown", f["path"]))
    if f.get("rename_from") is None:
        return path
    return f"{f.get('rename_from_shown', f['rename_from'])} → {path} ({f['similarity']} %)"


def _size(count: int | None) -> str:
    return "-" if count is None else iec(count)


def diff_unseen(result: Mapping[str, Any], hint: str = "") -> Styled:
    """Every file the answer does not show in full (protocol: api#every-byte-reviewable), with its
    sizes, lines, flags and, with ``hint`` (a command), how to read one whole."""
    unseen = result.get("unseen") or []
    out = Styled()
    if not unseen:
        return out
    out.append(f" {len(unseen)} file(s) not shown in full here:\n", style="bold yellow")
    for u in unseen:
        kind = "summarized, never diffed" if u["summarized"] else f"shown: {u['shown']}"
        counts = "" if u["added"] is None else f", +{u['added']} -{u['removed']}"
        flags = f" [{', '.join(u['flags'])}]" if u["flags"] else ""
        out.append(
            f" ? {u['path_shown']}: {kind}, {_size(u['old_bytes'])} -> "
            f"{_size(u['new_bytes'])}{counts}{flags}\n",
            style="bold yellow",
        )
    if hint:
        out.append(f"   read one whole: {hint} --path PATH\n", style="yellow")
    return out


def diff_text(patch: str, *, hunk_labels: bool = False) -> Styled:
    """The unified diff with git's colours (rich drops them when not on a terminal).

    ``hunk_labels``: before each ``@@`` line of a modified file, a ``hunk N`` line with the
    number ``promoter approve --hunks PATH=N`` takes (counted from 1 in each file; none
    in a created or deleted file, whose change is taken whole)."""
    out = Styled()
    number, whole = 0, False
    for line in patch.splitlines(keepends=True):
        style = ""
        heads = ("diff --git", "--- ", "+++ ", "new file", "deleted file", "old mode", "new mode")
        if line.startswith("diff --git"):
            number, whole = 0, False
        elif line.startswith(("new file", "deleted file")):
            whole = True
        if line.startswith(heads):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
            number += 1
            if hunk_labels and not whole:
                out.append(f"hunk {number}\n", style="bold magenta")
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        out.append(line, style=style)
    return out


def print_diff(
    result: Mapping[str, Any],
    *,
    stat: bool = False,
    pager: bool = True,
    hunk_labels: bool = False,
    hint: str = "",
) -> None:
    """Print a bundle diff answer: the stat, or the flagged files, the files it does not
    show in full, then the patch (paged when long; ``hunk_labels`` as in ``diff_text``;
    ``hint`` as in ``diff_unseen``)."""
    unseen = diff_renames(result) + diff_unseen(result, hint)
    if stat:
        body = diff_stat(result) + unseen
    else:
        body = (
            diff_flags(result) + unseen + diff_text(result["unified_diff"], hunk_labels=hunk_labels)
        )
    if not stat and result["truncated"]:
        count = len(result.get("unseen") or [])
        body.append(
            f"... the diff was cut at {result['limit']} bytes: {count} file(s) not shown in "
            "full, listed above\n",
            style="yellow",
        )
    # off a terminal (rich's rule, asked first without rich) never paged, and printed
    # without rich when rich would print the same bytes
    terminal = rich_would_colour(sys.stdout) and console.is_terminal
    if pager and terminal and body.plain.count("\n") > console.height:
        with _less_shows_colour(), console.pager(styles=True):
            console.print(body, end="", soft_wrap=True, highlight=False)
    else:
        console.print(body, end="", soft_wrap=True, highlight=False)


@contextlib.contextmanager
def _less_shows_colour() -> Iterator[None]:
    """``LESS=FRX`` for the pager (``less`` unless ``PAGER`` names another) when the person
    set no ``LESS``, as git does: ``R`` shows the colours (without it ``less`` printed each
    as ``ESC[32m`` text), ``X`` leaves the last screen above the question that follows, ``F``
    ends at once on a screen's worth. A ``LESS`` of the person's own is theirs."""
    if "LESS" in os.environ:
        yield
        return
    os.environ["LESS"] = "FRX"
    try:
        yield
    finally:
        os.environ.pop("LESS", None)


def whole_diff(pages: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One answer from every page of a diff (``PromoterClient.bundle_diff_pages``): the
    first page's files, the pages' text joined; unseen only what no page shows (the
    summarized files)."""
    first: Mapping[str, Any] | None = None
    parts: list[str] = []
    for page in pages:
        first = first or page
        parts.append(page["unified_diff"])
    assert first is not None
    files = [{**f, "shown": "full"} for f in first["files"]]
    return {
        **first,
        "files": files,
        "unified_diff": "".join(parts),
        "truncated": False,
        "next_cursor": None,
        "unseen": [{**u, "cursor": None} for u in first["unseen"] if u["summarized"]],
    }
