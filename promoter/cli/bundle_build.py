"""``promoter bundle build``'s work, whoever read its command line (typer or
``promoter.cli.bundle_args``).

This module owns what the command does: read the grant (a JSON file, or fetched by id with
the executor's token), build the sealed bundle from an isolated worktree, optionally write
it to a file, and with ``--submit`` upload the missing blobs with a progress bar and submit
the bundle, printing the verification receipt check by check (or the raw JSON with
``--json``). It imports nothing of typer: ``bundle build`` of the common shape runs without
it (protocol: api#command-line). rich's progress bars, the client and the builder are
imported by the functions that use them.

Deliberately not here: the command line's options and help (``promoter.cli.bundle_cmd``),
how a bundle and a receipt are printed (``promoter.cli.bundle_view``), building and
checking (``promoter.executor``), the wire (``promoter.client.sync``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promoter.cli.bundle_view import print_bundle, print_receipt
from promoter.cli.common import (
    console,
    iec,
    read_token,
    rich_console,
    rich_would_colour,
    server_url,
)
from promoter.domain.canonical import canonical_bytes
from promoter.errors import GrantInvalid, PromoterError

if TYPE_CHECKING:
    from promoter.client.sync import PromoterClient
    from promoter.domain.bundle_records import Grant, StateLike
    from promoter.executor.builder import BuiltBundle

__all__ = ["build", "chained_base", "client"]


def client(url: str | None, token_file: Path | None) -> PromoterClient:
    """A client of the daemon; a bundle built from a grant file needs none (nor httpx)."""
    from promoter.client.sync import PromoterClient

    return PromoterClient(server_url(url), read_token(token_file, url))


def _load_grant(grant: str, url: str | None, token_file: Path | None) -> Grant:
    from promoter.executor.handover import grant_from_file

    path = Path(grant)
    if path.is_file():
        return grant_from_file(path)
    with client(url, token_file) as daemon:
        return daemon.get_grant(grant)


def _upload(daemon: PromoterClient, built: BuiltBundle) -> dict[str, Any]:
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

        return submitted_receipt(daemon, built, advance)


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
    with client(url, token_file) as daemon:
        return daemon.grant_base(grant.grant_id)


def _echo(text: str) -> None:
    """``typer.echo(text)`` of ASCII text: the text and a newline on stdout, flushed."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def build(
    worktree: Path,
    grant: str,
    submit: bool = False,
    out: Path | None = None,
    since: str | None = None,
    json_output: bool = False,
    verbose: bool = False,
    url: str | None = None,
    token_file: Path | None = None,
) -> None:
    """Build a sealed bundle of every change in ``worktree`` against the grant's base tree
    (for a chained grant, against the state its base promotion left), and print, write or
    submit it as the flags ask."""
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
                _echo(json.dumps({"bundle": built.bundle}, indent=2, sort_keys=True))
            return
        with client(url, token_file) as daemon:
            try:
                receipt = _upload(daemon, built)
            except PromoterError as exc:
                failed = exc.context.get("verification_receipt")
                if isinstance(failed, dict):
                    _report(built.bundle, failed, json_output)
                raise
    _report(built.bundle, receipt, json_output)


def _report(bundle: dict[str, Any], receipt: dict[str, Any], json_output: bool) -> None:
    if json_output:
        document = {"bundle": bundle, "verification_receipt": receipt}
        _echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_receipt(receipt)
