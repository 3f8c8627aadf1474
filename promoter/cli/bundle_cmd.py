"""``promoter bundle build``, ``bundle show`` and ``bundle diff`` (protocol: api#command-line).

This module owns the command line of the executor side: read the grant (a JSON file, or
fetched by id with the executor's token), build the sealed bundle from an isolated
worktree, optionally write it to a file, and with ``--submit`` upload the missing blobs
with a progress bar and submit the bundle, printing the verification receipt check by
check (or the raw JSON with ``--json``). ``show`` prints a stored bundle (or a bundle
file) per path; ``diff`` prints the unified diff the daemon builds from the bundle's
stored blobs, coloured on a terminal and through a pager when longer than the screen.
rich's tables, text and progress bars, the bundle models and the builder are imported by
the functions that use them: ``review`` and ``run --list`` import this module for
``print_diff`` and ``print_bundle`` alone. The diff's lines are ``Styled`` text
(``promoter.cli.styled``), printed without rich off a terminal.

It deliberately holds no logic of its own: building and checking are
``promoter.executor``'s, the wire is ``promoter.client.sync``'s, and errors are printed and
turned into exit codes by ``promoter.cli.main``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    iec,
    print_plain_table,
    read_token,
    rich_console,
    rich_would_colour,
    server_url,
)
from promoter.cli.styled import Styled
from promoter.domain.canonical import canonical_bytes
from promoter.errors import ConfigError, GrantInvalid, NotFound, PromoterError, ValidationFailed

if TYPE_CHECKING:
    from promoter.client.sync import PromoterClient
    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.executor.builder import BuiltBundle

__all__ = ["diff_unseen", "print_bundle", "print_diff", "print_receipt", "register", "whole_diff"]

GrantOpt = Annotated[
    str,
    typer.Option(
        "--grant", help="A grant id (fetched from the server) or a file holding the grant JSON."
    ),
]
WorktreeOpt = Annotated[
    Path,
    typer.Option("--worktree", help="Top level of the executor's isolated worktree."),
]
SubmitOpt = Annotated[
    bool, typer.Option("--submit", help="Upload the missing blobs and submit the bundle.")
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Write the sealed bundle's canonical JSON to this file."),
]


def _client(url: str | None, token_file: Path | None) -> PromoterClient:
    """A client of the daemon; a bundle built from a grant file needs none (nor httpx)."""
    from promoter.client.sync import PromoterClient

    return PromoterClient(server_url(url), read_token(token_file, url))


def _load_grant(grant: str, url: str | None, token_file: Path | None) -> Grant:
    from promoter.executor.handover import grant_from_file

    path = Path(grant)
    if path.is_file():
        return grant_from_file(path)
    with _client(url, token_file) as client:
        return client.get_grant(grant)


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
        (change["operation"], escape(change["path"]), _state(change["old"]), _state(change["new"]))
        for change in shown
    ]
    if shown and not print_plain_table(BUNDLE_COLUMNS, rows):
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for column in BUNDLE_COLUMNS:
            table.add_column(column, overflow="fold", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    if len(shown) < len(changes):
        console.print(f"  … and {len(changes) - len(shown)} more (--verbose lists every path)")


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


def _upload(client: PromoterClient, built: BuiltBundle) -> dict[str, Any]:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from promoter.executor.handover import submitted_receipt

    columns = (
        TextColumn("uploading blobs"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        _iec_speed_column(),
    )
    with Progress(*columns, console=rich_console(stderr=True), transient=True) as bar:
        task = bar.add_task("upload", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return submitted_receipt(client, built, advance)


def _iec_speed_column() -> Any:
    """A progress column of the transfer speed in IEC units (rich's counts in kB and MB)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class IecSpeedColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("?" if speed is None else f"{iec(speed)}/s", style="progress.data.speed")

    return IecSpeedColumn()


def _hashing(
    worktree: Path, grant: Grant, since: Mapping[str, StateLike] | None = None
) -> BuiltBundle:
    from promoter.executor.builder import build_bundle

    # a transient spinner off a terminal shows nothing: rich's rule asked without rich
    # first (``--json`` into a pipe loads no rich), then rich's own answer
    if not rich_would_colour(sys.stderr) or not rich_console(stderr=True).is_terminal:
        return build_bundle(worktree, grant, since=since)
    shown = rich_console(stderr=True)
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(
        SpinnerColumn(), TextColumn("hashing changed files"), console=shown, transient=True
    ) as bar:
        bar.add_task("hash", total=None)
        return build_bundle(worktree, grant, since=since)


SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="The completed promotion this run continues from (default: the grant's "
        "base_operation; it must match it).",
    ),
]


def chained_base(
    grant: Grant, since: str | None, url: str | None, token_file: Path | None
) -> Mapping[str, StateLike] | None:
    """The states a chained grant's base operations left, fetched from the host."""
    if since is not None and since != grant.base_operation:
        raise GrantInvalid(
            f"the grant chains on {grant.base_operation or 'no operation'}, not {since}; "
            "a chained run needs a grant naming its base_operation",
            base_operation=grant.base_operation,
        )
    if grant.base_operation is None:
        return None
    with _client(url, token_file) as client:
        return client.grant_base(grant.grant_id)


def build(
    worktree: WorktreeOpt,
    grant: GrantOpt,
    submit: SubmitOpt = False,
    out: OutOpt = None,
    since: SinceOpt = None,
    json_output: JsonOpt = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="List every path of a big bundle.")
    ] = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Build a sealed bundle of every change in WORKTREE against the grant's base tree.

    For a chained grant, against the state its base promotion left: only newer edits.
    """
    grant_doc = _load_grant(grant, url, token_file)
    base = chained_base(grant_doc, since, url, token_file)
    with _hashing(worktree, grant_doc, base) as built:
        if out is not None:
            out.write_bytes(canonical_bytes(built.bundle))
        if not json_output:
            print_bundle(built.bundle, verbose=verbose)
            if out is not None:
                console.print(f"wrote {out}")
        if not submit:
            if json_output:
                typer.echo(json.dumps({"bundle": built.bundle}, indent=2, sort_keys=True))
            return
        with _client(url, token_file) as client:
            try:
                receipt = _upload(client, built)
            except PromoterError as exc:
                failed = exc.context.get("verification_receipt")
                if isinstance(failed, dict):
                    _report(built.bundle, failed, json_output)
                raise
    _report(built.bundle, receipt, json_output)


def _report(bundle: dict[str, Any], receipt: dict[str, Any], json_output: bool) -> None:
    if json_output:
        document = {"bundle": bundle, "verification_receipt": receipt}
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_receipt(receipt)


BundleArg = Annotated[str, typer.Argument(help="A bundle id, or a file holding a bundle.")]


BUNDLE_ID = re.compile(r"^bnd_[0-9a-f]{32}$")


def _load_bundle(bundle: str, url: str | None, token_file: Path | None) -> dict[str, Any]:
    """A bundle id (``bnd_`` and 32 hex) is asked of the daemon; anything else is a file,
    read and parsed here: a missing, unreadable or damaged file is one line, never an id."""
    from promoter.domain.models import PatchBundleV1
    from promoter.domain.parsing import load_json, parse_model

    if BUNDLE_ID.fullmatch(bundle) and not Path(bundle).exists():
        with _client(url, token_file) as client:
            return client.get_bundle(bundle).wire()
    path = Path(bundle)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(
            f"no file {bundle} (and not a bundle id, which is bnd_ and 32 hex digits)",
            path=bundle,
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {bundle}: {exc.strerror or exc}", path=bundle) from exc
    try:
        document = load_json(data)
    except PromoterError as exc:
        raise ValidationFailed(f"{bundle} is not a bundle: {exc.detail}", path=bundle) from exc
    loaded: dict[str, Any] = parse_model(PatchBundleV1, document).wire()
    return loaded


def show(
    bundle: BundleArg,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Summary of a bundle: identity, grant, base, and per path its operation, modes, sizes."""
    document = _load_bundle(bundle, url, token_file)
    if json_output:
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    console.print(
        f"grant {escape(document['grant_id'])}, run {escape(document['executor_run_id'])}, "
        f"repository {document['repository_identity']}, base commit "
        f"{document['base_commit'][:12]}, created {document['created_at']}"
    )
    print_bundle(document)


def diff(
    bundle: Annotated[str, typer.Argument(help="A bundle id.")],
    stat: Annotated[bool, typer.Option("--stat", help="Only lines added and removed.")] = False,
    max_bytes: Annotated[
        int | None, typer.Option("--max-bytes", min=1, help="Cap on one answer's size.")
    ] = None,
    path: Annotated[
        str | None,
        typer.Option("--path", help="Only this path (wire form), printed whole, page by page."),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="The whole diff, page by page: every byte.")
    ] = False,
    pager: Annotated[bool, typer.Option("--pager/--no-pager", help="Page long output.")] = True,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """The unified diff a promotion of BUNDLE would write (orchestrator or operator token).

    One answer is bounded (--max-bytes, else the daemon's page); the files it does not
    show in full are listed with their sizes and flags. --path or --all print them
    whole, one bounded request a page."""
    with _client(url, token_file) as client:
        result: Mapping[str, Any]
        if path is not None or every:
            result = whole_diff(client.bundle_diff_pages(bundle, max_bytes, path=path))
        else:
            result = client.bundle_diff(bundle, max_bytes)
    if json_output:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    print_diff(result, stat=stat, pager=pager, hint=f"promoter bundle diff {bundle}")


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
            out.append(f"{kind}, {iec(f['old_bytes'] or 0)} -> {iec(f['new_bytes'] or 0)}")
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
        out.append(f"{_size(f['old_bytes'])} -> {_size(f['new_bytes'])}, ")
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
        with console.pager(styles=True):
            console.print(body, end="", soft_wrap=True, highlight=False)
    else:
        console.print(body, end="", soft_wrap=True, highlight=False)


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


def register(app: typer.Typer) -> None:
    """Attach the ``bundle`` command group to the main app."""
    group = typer.Typer(help="Executor side: build and submit patch bundles.", no_args_is_help=True)
    group.command("build")(build)
    group.command("show")(show)
    group.command("diff")(diff)
    app.add_typer(group, name="bundle")
