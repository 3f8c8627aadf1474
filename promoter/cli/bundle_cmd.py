"""``promoter bundle build``, ``bundle show`` and ``bundle diff`` (protocol: api#command-line).

This module owns the command line of the executor side: read the grant (a JSON file, or
fetched by id with the executor's token), build the sealed bundle from an isolated
worktree, optionally write it to a file, and with ``--submit`` upload the missing blobs
with a progress bar and submit the bundle, printing the verification receipt check by
check (or the raw JSON with ``--json``). ``show`` prints a stored bundle (or a bundle
file) per path; ``diff`` prints the unified diff the daemon builds from the bundle's
stored blobs, coloured on a terminal and through a pager when longer than the screen.
rich's progress bars, the bundle models and the builder are imported by the functions
that use them. How a bundle, a receipt and a diff are printed is
``promoter.cli.bundle_view``'s (named here too).

It deliberately holds no logic of its own: building and checking are
``promoter.executor``'s, the wire is ``promoter.client.sync``'s, and errors are printed and
turned into exit codes by ``promoter.cli.main``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from promoter.cli.bundle_view import (
    SUMMARY_PATHS,
    diff_flags,
    diff_summary,
    diff_text,
    diff_unseen,
    print_bundle,
    print_diff,
    print_receipt,
    whole_diff,
)
from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    escape,
    iec,
    read_token,
    rich_console,
    rich_would_colour,
    server_url,
)
from promoter.domain.canonical import canonical_bytes
from promoter.errors import ConfigError, GrantInvalid, NotFound, PromoterError, ValidationFailed

if TYPE_CHECKING:
    from promoter.client.sync import PromoterClient
    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.executor.builder import BuiltBundle

__all__ = [  # the printers are ``promoter.cli.bundle_view``'s, named here as before
    "SUMMARY_PATHS",
    "diff_flags",
    "diff_summary",
    "diff_text",
    "diff_unseen",
    "print_bundle",
    "print_diff",
    "print_receipt",
    "register",
    "whole_diff",
]

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


def register(app: typer.Typer) -> None:
    """Attach the ``bundle`` command group to the main app."""
    group = typer.Typer(help="Executor side: build and submit patch bundles.", no_args_is_help=True)
    group.command("build")(build)
    group.command("show")(show)
    group.command("diff")(diff)
    app.add_typer(group, name="bundle")
