"""``promoter bundle build``, ``bundle show`` and ``bundle diff`` (protocol: api#command-line).

This module owns the command line of the executor side: the options and help of
``build``, whose work (read the grant, build the sealed bundle, write, print or submit
it) is ``promoter.cli.bundle_build``'s, the same whether typer or
``promoter.cli.bundle_args`` read the command line; ``show`` prints a stored bundle (or a
bundle file) per path; ``diff`` prints the unified diff the daemon builds from the
bundle's stored blobs, coloured on a terminal and through a pager when longer than the
screen. The bundle models are imported by the functions that use them. How a bundle, a
receipt and a diff are printed is ``promoter.cli.bundle_view``'s (named here too), and
``chained_base`` ``promoter.cli.bundle_build``'s (named here as before).

It deliberately holds no logic of its own: building and checking are
``promoter.executor``'s, the wire is ``promoter.client.sync``'s, and errors are printed and
turned into exit codes by ``promoter.cli.main``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from promoter.cli import bundle_build
from promoter.cli.bundle_build import chained_base
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
from promoter.cli.common import JsonOpt, TokenFileOpt, UrlOpt, console, escape
from promoter.errors import ConfigError, NotFound, PromoterError, ValidationFailed

__all__ = [  # the printers are ``promoter.cli.bundle_view``'s, named here as before
    "SUMMARY_PATHS",
    "chained_base",
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
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="The completed promotion this run continues from (default: the grant's "
        "base_operation; it must match it).",
    ),
]


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
    bundle_build.build(worktree, grant, submit, out, since, json_output, verbose, url, token_file)


BundleArg = Annotated[str, typer.Argument(help="A bundle id, or a file holding a bundle.")]


BUNDLE_ID = re.compile(r"^bnd_[0-9a-f]{32}$")


def _load_bundle(bundle: str, url: str | None, token_file: Path | None) -> dict[str, Any]:
    """A bundle id (``bnd_`` and 32 hex) is asked of the daemon; anything else is a file,
    read and parsed here: a missing, unreadable or damaged file is one line, never an id."""
    from promoter.domain.models import PatchBundleV1
    from promoter.domain.parsing import load_json, parse_model

    if BUNDLE_ID.fullmatch(bundle) and not Path(bundle).exists():
        with bundle_build.client(url, token_file) as client:
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
    with bundle_build.client(url, token_file) as client:
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
