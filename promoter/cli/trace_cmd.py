"""``promoter trace COMMIT [PATH…]`` and ``promoter trailers``: receipts behind the bytes.

Both ask the daemon (``GET /v1/trace``). ``trace`` prints, for each path the commit
changed against its first parent (or each PATH given), the committed bytes' sha256, a
verdict (``promoted``, ``changed_after_promotion``, ``not_promoted``, ``untouched``) and
the promotion receipts that wrote exactly those bytes. ``trailers`` traces what is
staged (the index against HEAD) and prints one ``Promoted-by: <operation> (<receipt
sha256 prefix>)`` line per promotion that wrote staged bytes exactly, for a person who
wants them in a commit message; hand edits print nothing.

Neither writes anything: not to the repository (no ref, index or commit), not to the
daemon. Deliberately not here: matching bytes to receipts (``promoter.engine.trace``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from promoter.cli.common import (
    JsonOpt,
    TokenFileOpt,
    UrlOpt,
    console,
    echo_json,
    read_token,
    server_url,
)

if TYPE_CHECKING:
    from promoter.client.sync import PromoterClient
    from promoter.domain import answers

RepoOpt = Annotated[
    str | None,
    typer.Option(
        "--repo",
        help="Name of a repository the server guards (default: the one you are in).",
        show_default=False,
    ),
]
RECEIPT_PREFIX = 12


def trace(
    commit: Annotated[str, typer.Argument(help="The commit (id or ref name) to trace.")],
    repo: RepoOpt = None,
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help=(
                "Only these paths, as the file system names them (any bytes); inside the "
                "worktree relative to the current directory, as git takes them."
            ),
            show_default=False,
        ),
    ] = None,
    json_output: JsonOpt = False,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Which promotion receipts wrote each path of a commit; writes nothing."""
    result = _trace(repo, commit, paths or [], url, token_file, staged=False)
    if json_output:
        _print_json(result)
        return
    from rich.markup import escape

    parent = result.get("parent")
    console.print(
        f"commit [bold]{escape(str(result.get('commit')))}[/] against "
        f"{escape(str(parent)) if parent else 'no parent'}",
        soft_wrap=True,
    )
    for item in result.get("paths") or []:
        sha = item.get("sha256")
        state = "deleted" if item.get("exists") is False else f"sha256 {sha}" if sha else ""
        line = f"  {item.get('verdict', '?'):<24} {escape(str(item.get('path')))}"
        console.print(line + (f"  ({state})" if state else ""), soft_wrap=True)
        for promotion in item.get("promotions") or []:
            console.print(f"      written by {_promotion(promotion)}", soft_wrap=True)
        last = item.get("last_promotion")
        if last:
            console.print(f"      last promoted by {_promotion(last)}", soft_wrap=True)


def trailers(
    repo: RepoOpt = None,
    url: UrlOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Print Promoted-by: trailers for what is staged; writes nothing."""
    result = _trace(repo, None, [], url, token_file, staged=True)
    for line in staged_trailers(result):
        typer.echo(line)


def staged_trailers(result: Mapping[str, Any]) -> list[str]:
    """One ``Promoted-by:`` line per promotion that wrote staged bytes exactly, in order."""
    seen: dict[str, str] = {}
    for item in result.get("paths") or []:
        if item.get("verdict") != "promoted":
            continue
        for promotion in item.get("promotions") or []:
            operation = str(promotion.get("operation_id"))
            receipt = str(promotion.get("receipt_sha256"))[:RECEIPT_PREFIX]
            seen.setdefault(operation, f"Promoted-by: {operation} ({receipt})")
    return list(seen.values())


def _promotion(promotion: answers.TracePromotion) -> str:
    from rich.markup import escape

    run = promotion.get("executor_run_id") or "?"
    text = (
        f"{promotion.get('operation_id')} (bundle {promotion.get('bundle_id')}, grant "
        f"{promotion.get('grant_id')}, run {run}, {promotion.get('promoted_at')}, receipt "
        f"{str(promotion.get('receipt_sha256'))[:RECEIPT_PREFIX]}, {promotion.get('status')})"
    )
    return escape(text)


def _trace(
    repo: str | None,
    commit: str | None,
    paths: list[str],
    url: str | None,
    token_file: Path | None,
    *,
    staged: bool,
) -> answers.TraceReport:
    from promoter.client.sync import PromoterClient
    from promoter.domain.wirepath import from_disk

    with PromoterClient(server_url(url), read_token(token_file, url), timeout=120.0) as client:
        if repo is None:  # the guarded worktree the current directory is in, as run does
            from promoter.cli.run_start import infer_repository

            repo = infer_repository(client)
        if paths:
            paths = _from_here(client, repo, paths)
        wire = [from_disk(path) for path in paths]
        return client.trace(repo, commit, wire, staged=staged)


def _from_here(client: PromoterClient, repo: str, paths: list[str]) -> list[str]:
    """PATHs as git takes them: inside the repository's worktree, relative to the current
    directory (``cd src && promoter trace HEAD app.py`` is ``src/app.py``); from
    elsewhere, relative to the worktree's top, as given."""
    import os
    import posixpath

    from promoter.executor.run.where import relative

    worktrees = [str(r["worktree"]) for r in client.repositories() if r["name"] == repo]
    try:
        here = os.getcwd()
    except OSError:  # the current directory was removed: nothing to be relative to
        return paths
    rel = relative(worktrees[0], here) if worktrees else None
    if rel is None:
        return paths
    named: list[str] = []
    for path in paths:
        if posixpath.isabs(path):  # an absolute name inside the worktree: from its top
            inside = relative(worktrees[0], posixpath.dirname(path))
            named.append(
                path if inside is None else posixpath.join(inside, posixpath.basename(path))
            )
            continue
        joined = posixpath.normpath(posixpath.join(rel, path))
        if joined == ".." or joined.startswith("../"):
            raise typer.BadParameter(f"{path} is outside the worktree of {repo}")
        named.append(joined)
    return named


def _print_json(result: answers.TraceReport) -> None:
    import json

    echo_json(json.dumps(result))


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
    app.command("trailers")(trailers)
