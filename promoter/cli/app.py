"""The ``promoter`` command line's Typer app: one module per command group.

Command groups are listed here by name and help only (``promoter.cli.lazy``); each
group's module is imported when one of its commands runs, so ``promoter --help`` and
shell completion start fast. The commands defined here are the daemon's (``serve``,
``db upgrade``, ``gc``). The program (``promoter.cli.main``) imports this module only
for a command line it does not read itself; it catches ``PromoterError`` once and exits
with the error's exit code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from promoter import __version__
from promoter.cli.lazy import PromoterGroup

if TYPE_CHECKING:
    import logging

    from promoter.api.logs import LogFormat
    from promoter.config import Settings

PHASE_TIMING = "PROMOTER_PHASE_TIMING"  # promoter.api.phases.ENV, without importing the server
EXIT_CODES = """\b
Exit codes: (every code: docs/reference/errors.md)
  0   success
  1   aborted (Ctrl-C; promoter run: 130)
  2   usage error (bad option or argument; promoter run without --repo outside a guarded worktree)
  64  bad request
  65  invalid data (validation_failed, path_invalid, bundle_hash_mismatch, ...)
  66  not found (bundle_unknown, operation_unknown, blob_missing, ...)
  69  unavailable (server_unavailable: the daemon is down; confinement_unavailable; address_in_use)
  70  internal error
  71  command_failed: the command promoter run ran failed, was killed or timed out
  73  quota exceeded
  74  storage, git or write error
  75  conflict or refusal, try again later (target_drift, lease_stale, not_confirmed, ...)
  77  unauthenticated or forbidden
  78  configuration error (config_error, repository_invalid)
  130 interrupted: promoter run stopped by Ctrl-C (what was kept is named)"""


def _version(value: bool) -> None:
    if value:
        print(f"promoter {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="promoter",
    cls=PromoterGroup,
    help="The trusted gate between low-trust executors and a real git worktree.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(
    help="Database maintenance.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(db_app, name="db")


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """The trusted gate between low-trust executors and a real git worktree."""


StateDirOpt = Annotated[
    Path | None, typer.Option("--state-dir", help="State directory (default ./.promoter).")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]
# a command on the host's own files (gc) finds the daemon's state as credentials and keys do
RecordedStateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="State directory (default: the daemon's promoter serve recorded, else ./.promoter).",
    ),
]


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
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy URL of the ledger, e.g. postgresql+psycopg://user@host/db "
            "(needs the postgres extra; default: SQLite in the state directory).",
        ),
    ] = None,
    host_id: Annotated[
        str | None,
        typer.Option(
            "--host-id",
            help="This host's id in a ledger shared by many hosts (default: from the machine id).",
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="json or text (default: text on a terminal, json otherwise).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            envvar="PROMOTER_WORKERS",
            help="Serving processes on one ledger and state directory (default: one per "
            "usable core; docs/operator/workers.md).",
            show_default=False,
        ),
    ] = None,
    phase_timing: Annotated[
        bool,
        typer.Option(
            "--phase-timing",
            help="Log each promotion's time and processor time by phase (a debug switch; "
            "also PROMOTER_PHASE_TIMING=1).",
        ),
    ] = False,
) -> None:
    """Run the daemon: listen, migrate the database, check repositories, serve HTTP.

    Once it listens it records its URL, state directory and the person's credential in
    the per-user configuration (~/.config/promoter/), so the CLI finds it from anywhere.
    It serves from one process per usable core, or from N with --workers N
    (docs/operator/workers.md).
    """
    from promoter.adapters.webhooks import daemon_services
    from promoter.api import fleet, logs, metrics_dir
    from promoter.api.app import create_app
    from promoter.api.connections import ClientBounds
    from promoter.api.fd_limit import NEEDED, raise_open_files
    from promoter.api.gc_policy import tune_for_serving
    from promoter.api.server import listen, make_server
    from promoter.config import load_settings, parse_repo_flags
    from promoter.errors import ConfigError

    if phase_timing:  # read from the environment by every worker (promoter.api.phases)
        os.environ[PHASE_TIMING] = "1"
    if log_format not in (None, "json", "text"):
        raise ConfigError(f"--log-format must be json or text, not {log_format!r}")
    fmt = logs.default_format() if log_format is None else cast("LogFormat", log_format)

    overrides: dict[str, Any] = {
        "state_dir": None if state_dir is None else str(state_dir),
        "host": host,
        "port": port,
        "repositories": repo or None,
        "database_url": database_url,
        "host_id": host_id,
    }
    settings = load_settings(
        config, **{**overrides, "repositories": parse_repo_flags(repo) if repo else None}
    )
    count = fleet.default_count() if workers is None else workers
    # the port first: a taken one is refused before a migration or a key publication
    sock = listen(settings.host, settings.port)
    logs.configure(fmt, settings.log_level)
    services = daemon_services(settings, claim=True)  # the state directory is this host's
    import logging  # the daemon's only: a client command loads none of it

    started = logging.getLogger("promoter.serve")
    logs.event(
        started,
        f"state {settings.state_dir.resolve()}, {len(services.registry.all())} repositories",
        state_dir=str(settings.state_dir.resolve()),
    )
    for repository in services.registry.all():
        logs.event(
            started,
            f"guarding {repository.name}",
            repository=repository.name,
            worktree=str(repository.worktree),
            repository_identity=repository.identity,
        )
    if count > 1:
        from promoter.engine import state_sharing
        from promoter.engine.receipts.envelopes import published_keyring

        published_keyring(services)  # once, before any worker starts
        shared_with = state_sharing.others(
            settings.state_dir, services.owner.host, settings.replaces_host, services.db
        )
        services.close()  # each worker opens its own
        bound = f"http://{settings.host}:{sock.getsockname()[1]}"

        def ready() -> None:
            print(f"promoter: ready on {bound}", file=sys.stderr, flush=True)
            logs.event(started, f"{count} workers serve", workers=count)
            _record_for_the_person(bound, settings, started)

        overrides["port"] = sock.getsockname()[1]
        # one set of metrics, every worker's
        shared = metrics_dir.prepare(settings.state_dir, shared_with=shared_with)
        try:
            code = fleet.Fleet(
                count,
                sock,
                config=config,
                overrides=overrides,
                log_format=fmt,
                metrics_dir=shared,
            ).run(ready)
        finally:
            sock.close()
            metrics_dir.remove(shared)
        if code:
            raise typer.Exit(code)
        return
    app_ = create_app(settings, services)
    # a full blob batch holds a descriptor per blob; the connections' cap is half the limit
    open_files = raise_open_files()
    server = make_server(
        app_,
        settings.host,
        settings.port,
        log_level=settings.log_level,
        announce=True,
        on_exit=services.stopping.set,
        on_ready=lambda url: _record_for_the_person(url, settings, started),
        bounds=ClientBounds.of(settings),
    )
    if open_files < NEEDED:
        logs.event(
            started,
            f"open-file limit {open_files} is below {NEEDED}: a full blob batch may be "
            "refused (raise LimitNOFILE or ulimit -n)",
            logging.WARNING,
            open_files=open_files,
            needed=NEEDED,
        )
    tune_for_serving()  # start-up objects frozen: no long GC pauses on the event loop
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        services.close()


# a daemon listening on every address is reached by its own CLI over loopback
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "[::]": "[::1]"}  # noqa: S104


def _record_for_the_person(url: str, settings: Settings, log: logging.Logger) -> None:
    """The daemon's URL, state directory, the person's credential and the worktrees it
    serves, into the per-user configuration; a configuration that cannot be written is
    logged, never fatal."""
    import logging

    from promoter.api import logs
    from promoter.cli import userconfig
    from promoter.errors import PromoterError

    scheme, _, rest = url.partition("://")
    host, _, port = rest.rpartition(":")
    address = f"{scheme}://{_WILDCARDS.get(host, host)}:{port}"
    state_dir = settings.state_dir
    token_file = state_dir / "credentials" / "operator.token"
    served = {name: repository.path for name, repository in settings.repositories.items()}
    try:
        path = userconfig.record(address, state_dir, token_file, repositories=served)
    except (OSError, PromoterError) as exc:
        detail = exc.detail if isinstance(exc, PromoterError) else (exc.strerror or str(exc))
        logs.event(
            log,
            f"the per-user configuration was not written ({detail}): the CLI finds this "
            f"daemon only with --url {address} --token-file {token_file.resolve()}",
            logging.WARNING,
        )
        return
    logs.event(log, f"recorded for this user's CLI in {path}", user_config=str(path))


@db_app.command("upgrade")
def db_upgrade(state_dir: StateDirOpt = None, config: ConfigOpt = None) -> None:
    """Migrate the database to the newest schema."""
    from promoter.cli.common import err_console
    from promoter.config import load_settings
    from promoter.engine.services import prepare_state_dir
    from promoter.store.db import upgrade

    settings = load_settings(config, state_dir=state_dir)
    prepare_state_dir(settings.state_dir)
    upgrade(settings.db_url)
    err_console.print(f"database at {settings.db_url} is at the newest schema")


@app.command()
def gc(
    state_dir: RecordedStateDirOpt = None,
    config: ConfigOpt = None,
    repo: Annotated[
        list[str] | None, typer.Option("--repo", help="NAME=PATH (for snapshot pruning).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    keep_snapshots: Annotated[
        int,
        typer.Option(
            "--keep-snapshots",
            min=1,
            help="Snapshots kept per repository, the newest (not with --dry-run).",
        ),
    ] = 100,
) -> None:
    """Remove unreferenced blobs older than the retention period; prune old snapshots.

    Runs in the state directory --state-dir, --config or PROMOTER_STATE_DIR names, else
    the daemon's that promoter serve recorded, else ./.promoter. Needs the daemon's
    ledger: exit 78 (ledger_missing, schema_mismatch) when there is none where the
    settings point or it is not migrated; nothing is created."""
    from promoter.adapters.webhooks import daemon_services
    from promoter.cli.common import err_console, escape, iec
    from promoter.cli.userconfig import host_repositories, host_state_dir
    from promoter.config import load_settings, parse_repo_flags
    from promoter.engine.gc import collect
    from promoter.store.db import require_ledger

    if repo:
        repositories = parse_repo_flags(repo)
        gone: list[str] = []
    else:  # the recorded daemon's, when its state directory is the one used
        from promoter.config import RepositoryConfig

        recorded = host_repositories(state_dir, config)
        gone = sorted(name for name, path in recorded.items() if not path.is_dir())
        repositories = {
            name: RepositoryConfig(path=path) for name, path in recorded.items() if name not in gone
        }
    settings = load_settings(
        config,
        state_dir=host_state_dir(state_dir, config),
        repositories=repositories or None,
    )
    require_ledger(settings.db_url)  # no ledger, or not migrated: refused, nothing created
    services = daemon_services(settings)
    try:
        report = collect(services, dry_run=dry_run, keep_snapshots=keep_snapshots)
    finally:
        services.close()
    verb = "would remove" if dry_run else "removed"
    count = len(report.snapshots_pruned)
    pruned = f"pruned snapshots of {count} {'repository' if count == 1 else 'repositories'}"
    if count:
        names = escape(", ".join(report.snapshots_pruned))
        pruned += f" ({names}; the newest {keep_snapshots} kept)"
    if dry_run:  # nothing was looked at to prune: say so, not "of 0 repositories"
        pruned = "snapshots not pruned (--dry-run)"
    err_console.print(
        f"examined {report.blobs_examined} blobs; {verb} {len(report.blobs_removed)} "
        f"({iec(report.bytes_freed)}); {pruned}"
    )
    for name, why in report.snapshots_failed:
        err_console.print(f"snapshots of {escape(name)} not pruned: {escape(why)}")
    for name in gone:
        err_console.print(
            f"snapshots of {escape(name)} not pruned: its recorded worktree is not a "
            "directory (name it with --repo NAME=PATH)"
        )
