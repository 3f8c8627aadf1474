"""The ``promoter`` command line: one Typer app, one module per command group.

Every command catches ``PromoterError`` once here and exits with the error's exit code,
printing its code and detail; nothing else is caught.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from promoter.cli import (
    bundle_cmd,
    mcp_cmd,
    ops_cmd,
    orchestrate_cmd,
    receipt_cmd,
    review_cmd,
    run_cmd,
    snapshot_cmd,
)
from promoter.cli.common import err_console
from promoter.config import load_settings, parse_repo_flags
from promoter.errors import PromoterError

app = typer.Typer(
    name="promoter",
    help="The trusted gate between low-trust executors and a real git worktree.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
receipt_cmd.register(app)
bundle_cmd.register(app)
orchestrate_cmd.register(app)
snapshot_cmd.register(app)
ops_cmd.register(app)
review_cmd.register(app)
run_cmd.register(app)
mcp_cmd.register(app)

StateDirOpt = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory (default ./.promoter).")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]


@app.command()
def serve(
    state_dir: StateDirOpt = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port (0: any free).")] = None,
    repo: Annotated[
        list[str] | None,
        typer.Option("--repo", help="NAME=PATH of a guarded worktree (repeatable)."),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run the daemon: migrate the database, check repositories, serve HTTP."""
    from promoter.api.app import create_app
    from promoter.api.server import make_server
    from promoter.engine.services import build_services

    settings = load_settings(
        config,
        state_dir=state_dir,
        host=host,
        port=port,
        repositories=parse_repo_flags(repo) if repo else None,
    )
    services = build_services(settings)
    err_console.print(
        f"promoter: state {settings.state_dir.resolve()}, "
        f"{len(services.registry.all())} repositories"
    )
    for repository in services.registry.all():
        err_console.print(f"  {repository.name}: {repository.worktree} ({repository.identity})")
    app_ = create_app(settings, services)
    server = make_server(
        app_,
        settings.host,
        settings.port,
        log_level=settings.log_level,
        announce=True,
        on_exit=services.stopping.set,
    )
    try:
        server.run()
    finally:
        services.close()


@db_app.command("upgrade")
def db_upgrade(state_dir: StateDirOpt = None, config: ConfigOpt = None) -> None:
    """Migrate the database to the newest schema."""
    from promoter.engine.services import prepare_state_dir
    from promoter.store.db import upgrade

    settings = load_settings(config, state_dir=state_dir)
    prepare_state_dir(settings.state_dir)
    upgrade(settings.db_url)
    err_console.print(f"database at {settings.db_url} is at the newest schema")


@app.command()
def gc(
    state_dir: StateDirOpt = None,
    config: ConfigOpt = None,
    repo: Annotated[
        list[str] | None, typer.Option("--repo", help="NAME=PATH (for snapshot pruning).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    keep_snapshots: Annotated[int, typer.Option("--keep-snapshots", min=1)] = 100,
) -> None:
    """Remove unreferenced blobs older than the retention period; prune old snapshots."""
    from promoter.engine.gc import collect
    from promoter.engine.services import build_services

    settings = load_settings(
        config, state_dir=state_dir, repositories=parse_repo_flags(repo) if repo else None
    )
    services = build_services(settings)
    try:
        report = collect(services, dry_run=dry_run, keep_snapshots=keep_snapshots)
    finally:
        services.close()
    verb = "would remove" if dry_run else "removed"
    err_console.print(
        f"examined {report.blobs_examined} blobs; {verb} {len(report.blobs_removed)} "
        f"({report.bytes_freed} bytes); pruned snapshots of {report.snapshot_repositories} "
        "repositories"
    )


def main() -> None:
    try:
        app()
    except PromoterError as exc:
        err_console.print(f"[bold red]error[/] {escape(f'[{exc.code}]')} {escape(exc.detail)}")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
