"""The wired set of services one daemon (or one CLI command) works with.

``build_services(settings)`` creates the state directory layout, migrates the database,
creates the trusted tokens on first start and checks every configured repository. Nothing
here runs at import time; the API's lifespan and the CLI call it.

Everything a daemon keeps for its lifetime is a typed field: the attempt runner (a worker
pool, made on first use by ``promoter.engine.operation.runner.runner``), the host keyring
(``promoter.engine.receipts.signing.host_keyring``), the per-repository base-tree caches, the run
quota ledger, the API's document slots and the webhook deliveries (through the
``WebhookDeliveries`` port: the HTTP dispatcher is an adapter, ``promoter.adapters.webhooks``).
Deliberately not here: creating any of them but the stores (each is made where it is used,
once), and checking the webhook targets (the adapter's ``daemon_services`` does, first).
``Services`` is the composition root: a function takes the narrow port it uses
(``promoter.engine.ports``), which ``Services`` satisfies structurally.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, overload

from promoter.config import Settings
from promoter.domain.path_state import StateWire
from promoter.engine import liveness
from promoter.engine.host_state import HostState
from promoter.engine.liveness import LiveAttempts
from promoter.engine.ownership import Owner, machine_host_id
from promoter.engine.repos import Registry
from promoter.fs import openat2
from promoter.fs.start_watch import StartWatch
from promoter.git import tree_reader
from promoter.git.shadow_watch import SnapshotWatch
from promoter.store import db as dbmod
from promoter.store import journal, state_host
from promoter.store.audit import AuditStore
from promoter.store.blobs import BlobStore
from promoter.store.credentials import Authenticator, Role, ensure_trusted_tokens
from promoter.store.durable import make_dirs

if TYPE_CHECKING:
    import anyio
    from sqlalchemy.orm import Session

    from promoter.domain.records import Ticket
    from promoter.store.keyring import Keyring
    from promoter.store.quota import RunQuota

T = TypeVar("T")
LazyField = Literal["runner", "run_quota", "document_slots"]  # the fields ``once`` makes


class AttemptRunner(Protocol):
    """Runs promotion attempts off the request thread (``promoter.engine.operation.runner``)."""

    def submit(self, ticket: Ticket) -> Future[None]: ...
    def future(self, operation_id: str) -> Future[None] | None: ...
    def shutdown(self) -> None: ...


class WebhookDeliveries(Protocol):
    """The signed webhook deliveries of the watch feed: a port, whose adapter sends them
    over HTTP (``promoter.adapters.webhooks``); the engine never imports it."""

    def kick(self) -> None: ...
    async def stop(self) -> None: ...


@dataclass
class Services:
    settings: Settings
    db: dbmod.Database
    blobs: BlobStore
    audit: AuditStore
    registry: Registry
    auth: Authenticator
    tokens: dict[Role, str]
    owner: Owner = field(default_factory=Owner.me)  # this process on this host
    runner: AttemptRunner | None = None
    # the operations a thread of this process runs now (``engine.liveness``)
    live: LiveAttempts = field(default_factory=lambda: liveness.PROCESS)
    # the keyring and the stamp of its file when read (``promoter.engine.receipts.signing``)
    host_keyring: tuple[tuple[int, int, int] | None, Keyring] | None = None
    # the keyring last published into the ledger (``promoter.engine.receipts.envelopes``)
    published_keyring: Keyring | None = None
    # base-tree states per repository identity, keyed by (tree, path): git objects never change
    base_trees: dict[str, dict[tuple[str, str], StateWire]] = field(default_factory=dict)
    # each tree's symlinks and their target texts, by tree id (``engine.link_resolution``)
    tree_links: dict[str, dict[str, bytes]] = field(default_factory=dict)
    run_quota: RunQuota | None = None
    document_slots: anyio.Semaphore | None = None
    webhooks: WebhookDeliveries | None = None  # when subscribers are configured
    # set on SIGTERM: running attempts stop after the current step and are left for recovery
    stopping: threading.Event = field(default_factory=threading.Event)
    # the long-polls held now, by the caller's token (``promoter.api.longpoll``)
    waits: Counter[str] = field(default_factory=Counter)
    # worktree watches for promotions' snapshots, by shadow repository path
    snapshot_watches: dict[str, SnapshotWatch] = field(default_factory=dict)
    # worktree watches for sandboxes' starts, by repository name (``snapshots.start_watch``)
    start_watches: dict[str, StartWatch] = field(default_factory=dict)
    # the epoch this daemon registered its host at (``promoter.engine.fencing``)
    host_epoch: int | None = None
    # this host and its database as last seen, without the database (``engine.host_state``)
    host: HostState = field(init=False)
    _once: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.host = HostState(self.owner.host)

    # ``once`` fills only these fields: the overloads tie each name to its field's type
    @overload
    def once(self, name: Literal["runner"], make: Callable[[], AttemptRunner]) -> AttemptRunner: ...
    @overload
    def once(self, name: Literal["run_quota"], make: Callable[[], RunQuota]) -> RunQuota: ...
    @overload
    def once(
        self, name: Literal["document_slots"], make: Callable[[], anyio.Semaphore]
    ) -> anyio.Semaphore: ...
    def once(self, name: LazyField, make: Callable[[], T]) -> T:
        """The field ``name``, made by ``make()`` the first time (thread-safe)."""
        value = getattr(self, name)
        if value is None:
            with self._once:
                value = getattr(self, name)
                if value is None:
                    value = make()
                    setattr(self, name, value)
        return value  # type: ignore[no-any-return]

    def claim(self, session: Session, operation_id: str) -> None:
        """Record this process as the owner of the operation, with a fresh owner lease."""
        journal.claim(session, operation_id, self.stamp())

    def stamp(self) -> tuple[int, str, str, str, str]:
        """This process as an operation's owner, with a fresh owner lease."""
        return self.owner.stamp(self.settings.owner_lease_seconds)

    def close(self) -> None:
        for watch in list(self.snapshot_watches.values()):
            watch.close()
        for start in list(self.start_watches.values()):
            start.close()
        tree_reader.close_all()  # the repositories' long-lived cat-file processes
        self.db.dispose()


def prepare_state_dir(state_dir: Path) -> None:
    make_dirs(state_dir, mode=0o700)
    for sub in ("audit", "audit/blobs", "audit/tmp", "snapshots", "credentials"):
        make_dirs(state_dir / sub, mode=0o700)
    if not os.access(state_dir, os.W_OK):
        raise PermissionError(f"state directory {state_dir} is not writable")


def build_services(settings: Settings, *, migrate: bool = True, claim: bool = False) -> Services:
    """The wired services; the daemon checks its webhook targets first
    (``promoter.adapters.webhooks.daemon_services``). ``claim`` (``promoter serve``'s
    start, not its workers'): the state directory is this host's, or the start refuses
    (``promoter.store.state_host``)."""
    # each repository found first: one that is not refuses before anything is made
    registry = Registry.from_settings(settings)
    host_id = settings.host_id or machine_host_id()
    if claim:  # another host's state directory refuses before anything is made
        state_host.check(settings.state_dir, host_id, replaces=settings.replaces_host)
    prepare_state_dir(settings.state_dir)
    openat2.choose(settings.chain_recheck_openat2)  # process-wide, as the fs layer is
    server = dbmod.ServerOptions(
        connect_timeout=settings.database_connect_timeout,
        lock_timeout=settings.database_lock_timeout,
        statement_timeout=settings.database_statement_timeout,
        idle_transaction_timeout=settings.database_idle_transaction_timeout,
        application_name=f"promoter/{host_id}",
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_max_overflow,
    )
    if migrate:
        dbmod.upgrade(settings.db_url, server)  # under the migration lock; refuses a newer schema
    else:
        dbmod.check_schema(settings.db_url)
    database = dbmod.Database(settings.db_url, settings.database_busy_timeout, server)
    if claim:  # the checks passed: recorded now, before the host's credentials are written
        state_host.claim(settings.state_dir, host_id, replaces=settings.replaces_host)
    tokens = ensure_trusted_tokens(settings.credentials_dir)
    auth = Authenticator(database, tokens, settings.credentials_dir, host_id)
    auth.publish()  # this host's credentials into the ledger: valid on every host
    for guarded in registry.all():
        tree_reader.serve(guarded.layout)  # a long-lived cat-file for the daemon's own
    return Services(
        settings=settings,
        db=database,
        blobs=BlobStore(settings.audit_dir),
        audit=AuditStore(settings.audit_dir, settings.group_sync_limit),
        registry=registry,
        auth=auth,
        tokens=tokens,
        owner=Owner.me(host_id),
    )
