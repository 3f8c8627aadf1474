"""Settings of the daemon and the CLI (pydantic-settings).

Precedence: command-line flags > ``PROMOTER_*`` environment variables > the TOML config
file > defaults, merged by pydantic-settings' own sources (init, environment, and
``TomlConfigSettingsSource`` for the file). A variable replaces the file's value of its
key whole (``PROMOTER_REPOSITORIES`` is the whole table, not merged into the file's); a
``--repo`` flag adds to the repositories of the file or the variable, one name at a time.

Nothing is read at import time; ``load_settings`` builds one ``Settings`` object in
``main()`` or in a test. Defaults give a working daemon with nothing configured. Not
here: what any setting does (its users), or the command-line flags (``promoter.cli``).
"""

from __future__ import annotations

import difflib
import os
import tomllib
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from promoter.errors import ConfigError

AdmissionRole = Literal["executor", "orchestrator", "operator"]
ADMISSION_ROLE_LIMITS: dict[AdmissionRole, int] = {
    "executor": 16,
    "orchestrator": 32,
    "operator": 16,
}
ADMISSION_CREDENTIAL_LIMITS: dict[AdmissionRole, int] = {
    "executor": 4,
    "orchestrator": 32,
    "operator": 8,
}


def _host_id(value: str) -> str:
    """A host id: no space around it (it is recorded in the state directory and read back
    without it, ``promoter.store.state_host``: it would no longer name its own record),
    no control character in it."""
    if value != value.strip() or any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError(f"a host id has no space around it and no control character: {value!r}")
    return value


HostId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_host_id)]


class RepositoryConfig(BaseModel):
    """One guarded worktree, configured by the operator only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    check_command: list[str] | None = None
    check_timeout: float = Field(default=300.0, gt=0)
    on_check_failure: Literal["hold", "rollback"] = "hold"
    # after a write failed once writing began: hold (needs_reconciliation) or roll back by CAS
    on_write_failure: Literal["hold", "rollback"] = "hold"
    snapshots: bool = False
    # a promotion's snapshots from the last one plus the paths an inotify watch saw change
    snapshot_watch: bool = True
    # "required": every promotion waits in awaiting_approval for the operator's decision
    approval: Literal["none", "required"] = "none"


class WebhookConfig(BaseModel):
    """One webhook subscriber, configured by the operator only (never from a bundle)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2000)
    secret: str = Field(min_length=16, max_length=400, repr=False)
    # feed entry kinds to deliver (decision, action, outcome, status); none: every kind
    kinds: list[Literal["decision", "action", "outcome", "status"]] | None = None
    # consecutive failed attempts after which the subscriber is paused
    max_failures: int = Field(default=8, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PROMOTER_", extra="forbid", frozen=True)

    state_dir: Path = Path(".promoter")
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    database_url: str | None = None
    repositories: dict[str, RepositoryConfig] = Field(default_factory=dict)
    lock_timeout: float = Field(default=30.0, gt=0)
    max_blob_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    max_document_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # Structural bounds on every JSON body, checked while it streams in
    # (protocol: api#hostile-input). 250 000 values hold a bundle of about 12 000 changes (about 20
    # values per change).
    max_json_depth: int = Field(default=64, ge=2)
    max_json_items: int = Field(default=250_000, ge=16)
    # Large executor documents (bundles, digest queries) parsed and verified at once; more
    # wait on the event loop. Verification is GIL-bound: more would add latency, not speed.
    max_concurrent_documents: int = Field(default=2, ge=1)
    # A bundle diff (docs/guide/review.md): a side larger than this is summarized, not diffed;
    # at most this many diffs are built at once; a git diff of one file may take this long.
    review_diff_max_file_bytes: int = Field(default=4 * 1024 * 1024, ge=0)
    review_diff_concurrency: int = Field(default=2, ge=1)
    # A review diff's page unless asked otherwise, and the bound of the approval rule: an
    # approval names the files the bundle's first page does not show in full
    # (protocol: api#every-byte-reviewable).
    review_diff_page_bytes: int = Field(default=1024 * 1024, ge=1, le=8 * 1024 * 1024)
    review_diff_timeout: float = Field(default=30.0, gt=0)
    # Bytes of new blobs one executor run may store (protocol: storage#storage-quota).
    executor_quota_bytes: int = Field(default=2 * 1024 * 1024 * 1024, ge=0)
    # How long a database write waits for another writer's lock before database_busy.
    database_busy_timeout: float = Field(default=30.0, gt=0)
    # PostgreSQL (docs/operator/many-hosts.md): seconds to connect, to wait for a row or
    # table lock before database_busy, and for one statement (0: no limit); the pool of
    # connections each host keeps, and the extra ones it may open under load.
    database_connect_timeout: float = Field(default=10.0, ge=0)
    database_lock_timeout: float = Field(default=5.0, ge=0)
    database_statement_timeout: float = Field(default=60.0, ge=0)
    # PostgreSQL: seconds a transaction may stay open between statements before the server
    # ends it and its locks (a host hung inside one; 0: no limit).
    database_idle_transaction_timeout: float = Field(default=60.0, ge=0)
    database_pool_size: int = Field(default=5, ge=1)
    database_max_overflow: int = Field(default=10, ge=0)
    executor_token_max_ttl: int = Field(default=7 * 24 * 3600, gt=0)
    auto_recover: bool = False
    # Where this host's receipt-signing keys live (default: <state dir>/credentials). Two
    # daemons sharing one state directory (a replacement taking a fenced host's work over)
    # each need their own: the ledger refuses one key published by two hosts.
    signing_key_dir: Path | None = None
    # Rehearse a promotion's journal before serving, rolled back, so the first promotion
    # finds its statements compiled (promoter.engine.operation.rehearsal).
    rehearse_at_start: bool = True
    # One syncfs for a group of files where it is as durable as an fsync of each
    # (promoter.fs.group_sync); false: an fsync per file and directory, always.
    group_sync: bool = True
    # ...and only while at most this many bytes wait to be written system-wide (syncfs
    # writes other programs' dirty pages too: on a busy disk an fsync each costs less).
    group_sync_max_pending_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # A held directory's chain re-checked by one openat2 beneath the root where the kernel
    # has it (promoter.fs.openat2); false: the component walk, always.
    chain_recheck_openat2: bool = True
    metrics_public: bool = True
    blob_retention_seconds: int = Field(default=7 * 24 * 3600, ge=0)
    log_level: str = "info"
    # This daemon's host in a ledger shared by many hosts (default: from the machine id).
    host_id: HostId | None = None
    # The host whose state directory this daemon shares as its replacement (it takes that
    # host's work over once it is fenced); a state directory is otherwise one host's.
    replaces_host: HostId | None = None
    # The base URL clients and the other hosts reach this daemon at, published in the
    # ledger (421 answers name it); default: the address it listens on.
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+/?$")
    # How long an operation's owner lease lasts; the heartbeat renews it every third.
    owner_lease_seconds: float = Field(default=60.0, ge=1.0, le=3600.0)
    # How long an attempt that lost its database keeps trying to put its operation back
    # (bounded backoff, 0.25 s doubling to 2 s); past that the watchdog does it.
    outage_retry_seconds: float = Field(default=600.0, ge=0.0)
    # How often the watchdog looks for this daemon's operations left `in_progress` by an
    # attempt that no longer runs (and for its host's orphans), marking them needs_recovery.
    watchdog_seconds: float = Field(default=15.0, gt=0.0)
    # The longest a long-poll (`GET /v1/events?wait=`, an operation's `wait`) is held.
    max_wait_seconds: float = Field(default=300.0, ge=0.0, le=300.0)
    # The long-polls one credential may hold at once, in each serving process; past them a
    # wait is `429 too_many_requests` at once (docs/operator/limits.md). Keep it well below
    # `max_connections`: a held wait is a connection the cap may not close.
    max_waits_per_credential: int = Field(default=16, ge=1, le=1024)
    # Admission of costly reads (protocol: api#work-bounded-per-caller, docs/operator/limits.md):
    # per role, how many may run at once, in all and per credential (an executor's credential is its
    # run); how many more may wait, per role, and for how long, before `429 too_many_requests`
    # with `Retry-After` (seconds). A role left out keeps its default.
    admission_role_limits: dict[AdmissionRole, PositiveInt] = Field(
        default_factory=lambda: dict(ADMISSION_ROLE_LIMITS)
    )
    admission_credential_limits: dict[AdmissionRole, PositiveInt] = Field(
        default_factory=lambda: dict(ADMISSION_CREDENTIAL_LIMITS)
    )
    admission_queue: int = Field(default=64, ge=0)
    admission_wait_seconds: float = Field(default=5.0, ge=0.0, le=300.0)
    admission_retry_after_seconds: int = Field(default=2, ge=1, le=3600)
    # Worker threads of the operator's own (its routes, its console, /readyz): a flood of
    # another role's requests never takes them.
    operator_workers: int = Field(default=8, ge=1, le=256)
    # A console session ends this long after its login whatever its use, and after this
    # long unused; removing its credential ends it at once.
    console_session_lifetime_seconds: float = Field(default=12 * 3600.0, gt=0.0)
    console_session_idle_seconds: float = Field(default=8 * 3600.0, gt=0.0)
    # Webhook subscribers by name; deliveries wait in a bounded queue in the database.
    webhooks: dict[str, WebhookConfig] = Field(default_factory=dict)
    webhook_queue_max: int = Field(default=1000, ge=1)
    webhook_backoff_seconds: float = Field(default=1.0, gt=0)
    webhook_backoff_max_seconds: float = Field(default=600.0, gt=0)
    # One delivery's whole time (resolve, connect, send, headers, body) before it fails.
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    # The most of a receiver's answer read; the rest is never read (the connection closes).
    webhook_max_response_bytes: int = Field(default=64 * 1024, ge=0, le=16 * 1024 * 1024)
    # Targets the policy would refuse (loopback, link-local, private…) allowed by the
    # operator: host names as written in a URL, or networks in CIDR form.
    webhook_allowed_targets: list[str] = Field(default_factory=list)
    # The client's side of a connection (docs/operator/http-edges.md#slow-clients): seconds
    # from its opening or last answer to a request's complete head, the longest a body being
    # read may stay silent, the longest an answer may wait with none of it taken, and the
    # most connections open at once (never more than half the open-file limit: the rest
    # stays for the daemon's own files).
    request_head_seconds: float = Field(default=30.0, gt=0)
    request_body_silence_seconds: float = Field(default=30.0, gt=0)
    response_drain_silence_seconds: float = Field(default=30.0, gt=0)
    max_connections: int = Field(default=1024, ge=1)
    # Host header names served besides loopback names and the bound address (DNS rebinding).
    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("state_dir", "signing_key_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """A relative directory (``make serve``'s ``--state-dir .promoter``) made absolute
        against the current directory once, at load: every path derived from it (a blob's
        file, given to a ``git diff`` run from ``/``) then names the same file wherever it is
        used. Not resolved: a symbolic link in it stays the operator's."""
        return None if value is None else value.absolute()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = ConfigFileSource(settings_cls, toml_file=_CONFIG_FILE.get())
        return (init_settings, env_settings, config_file)

    @property
    def group_sync_limit(self) -> int | None:
        """The most bytes pending under which a group sync is asked for (None: never)."""
        return self.group_sync_max_pending_bytes if self.group_sync else None

    @property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'promoter.db').resolve()}"

    @property
    def audit_dir(self) -> Path:
        return self.state_dir / "audit"

    @property
    def credentials_dir(self) -> Path:
        return self.state_dir / "credentials"

    @property
    def signing_dir(self) -> Path:
        """This host's receipt-signing keyring (``signing_key_dir``, else the credentials)."""
        return self.signing_key_dir or self.credentials_dir

    @property
    def snapshots_dir(self) -> Path:
        return self.state_dir / "snapshots"


def parse_repo_flags(flags: list[str]) -> dict[str, RepositoryConfig]:
    """``NAME=PATH`` items from ``--repo`` flags."""
    repos: dict[str, RepositoryConfig] = {}
    for flag in flags:
        name, sep, path = flag.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--repo takes NAME=PATH, got {flag!r}")
        repos[name] = RepositoryConfig(path=Path(path))
    return repos


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings: ``overrides`` (flags) > environment > TOML file > defaults.

    An override of ``None`` is a flag not given. Each repository of a ``repositories``
    override replaces the file's or the environment's repository of its name whole (a
    model, never merged key by key as two tables would be). A file that cannot be read
    or parsed, any value that does not validate, and a ``PROMOTER_*`` variable that is
    neither a setting nor one of ``OTHER_VARIABLES`` (``check_environment``), is a
    ``ConfigError``.
    """
    check_environment(os.environ)
    flags = {k: v for k, v in overrides.items() if v is not None}
    try:
        if "repositories" in flags:
            flags["repositories"] = {
                name: RepositoryConfig.model_validate(repository)
                for name, repository in flags["repositories"].items()
            }
        with _reading(config_file):
            return Settings(**flags)
    except ValidationError as exc:
        lines = [x for x in str(exc).splitlines() if not x.startswith(_WEB_LINK)]
        unknown = _unknown_keys(exc)
        if unknown and config_file is not None:  # only the file can name a key
            lines.append(f"unknown keys in {config_file}: {unknown} (docs/operator/config.md)")
        raise ConfigError("invalid settings: " + "\n".join(lines)) from exc


def _unknown_keys(exc: ValidationError) -> str:
    """The keys a ``ValidationError`` refused as unknown, each with the known key of its
    table closest to it, as a mistyped ``PROMOTER_*`` variable is told."""
    named = []
    for error in exc.errors():
        if error["type"] != "extra_forbidden":
            continue
        where = [str(part) for part in error["loc"]]
        table = where[:-1]
        fields = (
            RepositoryConfig.model_fields
            if table[:1] == ["repositories"]
            else Settings.model_fields
        )
        found = difflib.get_close_matches(where[-1], sorted(fields), 1, 0.75)
        key = ".".join(where)
        named.append(key if not found else f"{key} (did you mean {'.'.join([*table, found[0]])}?)")
    return ", ".join(sorted(named))


# Every PROMOTER_* variable promoter reads besides its settings' (one a setting field,
# matched in any case as pydantic-settings does), by its exact name: a name the package
# reads that is missing here is found by tests/contract/test_environment_names.py.
OTHER_VARIABLES = frozenset(
    {
        # the CLI's (promoter.cli.userconfig, promoter.cli.mcp_cmd) and serve's --workers
        "PROMOTER_URL",
        "PROMOTER_TOKEN",
        "PROMOTER_ORCHESTRATOR_TOKEN",
        "PROMOTER_WORKERS",
        "PROMOTER_PHASE_TIMING",
        "PROMOTER_STARTED_BY",
        # set by promoter run inside a sandbox (promoter.executor.run), and for a check
        "PROMOTER_GRANT",
        "PROMOTER_RUN",
        "PROMOTER_START_TREE",
        "PROMOTER_SUBMITTED_FILE",
        "PROMOTER_CHECK",
        # the sandbox's own (promoter.executor.confine, promoter.executor.layers)
        "PROMOTER_BWRAP",
        "PROMOTER_SANDBOX_LAYOUT",
        # fault points (promoter.faults)
        "PROMOTER_FAULTS",
        "PROMOTER_FAULTS_TRACE",
        "PROMOTER_FAULTS_PAUSE_LIMIT",
        # the test suite's browser (tests/console/browser.py)
        "PROMOTER_CHROMIUM",
    }
)
# Families of variables the test suite, CI (.ci/run) and the benchmarks set for every
# process they start: PROMOTER_TEST_DATABASE, PROMOTER_REQUIRE_BWRAP, PROMOTER_BENCH_DIR...
VARIABLE_FAMILIES = ("PROMOTER_TEST_", "PROMOTER_REQUIRE_", "PROMOTER_BENCH_")
_PREFIX = "PROMOTER_"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``PROMOTER_*`` names of ``environ`` (in any case) promoter does not read, sorted."""
    return sorted(
        name
        for name in environ
        if name.upper().startswith(_PREFIX)
        and name.upper()[len(_PREFIX) :].lower() not in Settings.model_fields
        and name not in OTHER_VARIABLES
        and not name.startswith(VARIABLE_FAMILIES)
    )


def _closest(name: str) -> str | None:
    """The known name closest to ``name`` (difflib), compared without the prefix."""
    known = {f.upper() for f in Settings.model_fields} | {
        v[len(_PREFIX) :] for v in OTHER_VARIABLES
    }
    found = difflib.get_close_matches(name.upper()[len(_PREFIX) :], sorted(known), 1, 0.75)
    return _PREFIX + found[0] if found else None


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``PROMOTER_*`` variable that is neither a setting nor another variable
    promoter reads, as the file refuses a key it does not know: a typo would otherwise
    leave the default in place unseen (docs/operator/config.md)."""
    unknown = unknown_variables(environ)
    if not unknown:
        return
    named = []
    for name in unknown:
        closest = _closest(name)
        named.append(name if closest is None else f"{name} (did you mean {closest}?)")
    noun = "variable" if len(unknown) == 1 else "variables"
    raise ConfigError(
        f"unknown environment {noun} {', '.join(named)}: neither a setting nor a variable "
        "promoter reads (docs/operator/config.md)"
    )


_WEB_LINK = "    For further information visit "  # pydantic's line after each error


class ConfigFileSource(TomlConfigSettingsSource):
    """The TOML config file, below the environment: a key a ``PROMOTER_*`` variable sets
    is left out here, so the variable's value replaces the file's instead of being merged
    into it. A file that is named must exist and parse (no file named: nothing read)."""

    @staticmethod
    def _existing_files(files: Any) -> list[Any]:
        # a named file is read even when it is missing or a directory: the error says so
        return [] if files is None else [files]

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {file_path}: {exc}") from exc

    def __call__(self) -> dict[str, Any]:
        from_env = self.settings_sources_data.get("EnvSettingsSource", {})
        return {k: v for k, v in super().__call__().items() if k not in from_env}


_CONFIG_FILE: ContextVar[Path | None] = ContextVar("promoter_config_file", default=None)


@contextmanager
def _reading(config_file: Path | None) -> Iterator[None]:
    """``Settings()`` built inside reads ``config_file`` as its TOML source."""
    token = _CONFIG_FILE.set(config_file)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)
