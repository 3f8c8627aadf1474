"""The narrow ports a function takes instead of the whole ``Services``.

Each port is a ``typing.Protocol`` naming a few of ``Services``' fields, as read-only
properties (or methods, or a settable attribute where the function fills a cache); a
composite port joins the ones a use case needs. ``Services`` (``promoter.engine.services``)
stays the composition root and satisfies every port structurally, so a caller keeps
passing ``services`` and mypy checks the fit at each call; a test may pass a small object
that has only the port's fields. Nothing here makes or holds anything: only types.

To add a port: a Protocol of the fields, or a composite inheriting the ports it joins and
``Protocol``, named after its use case, with a one-line docstring.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol, overload

if TYPE_CHECKING:
    import anyio
    from sqlalchemy.orm import Session

    from promoter.config import Settings
    from promoter.domain.path_state import StateWire
    from promoter.engine.host_state import HostState
    from promoter.engine.liveness import LiveAttempts
    from promoter.engine.ownership import Owner
    from promoter.engine.repos import Registry
    from promoter.engine.services import AttemptRunner, WebhookDeliveries
    from promoter.fs.start_watch import StartWatch
    from promoter.git.shadow_watch import SnapshotWatch
    from promoter.store.audit import AuditStore
    from promoter.store.blobs import BlobStore
    from promoter.store.credentials import Authenticator
    from promoter.store.db import Database
    from promoter.store.keyring import Keyring
    from promoter.store.quota import RunQuota


# the parts, one or a few fields each


class Ledger(Protocol):
    """The database: the journal, the operations and every row."""

    @property
    def db(self) -> Database: ...


class Configured(Protocol):
    """The daemon's settings."""

    @property
    def settings(self) -> Settings: ...


class Archive(Protocol):
    """The content-addressed blobs and the audit store of signed documents."""

    @property
    def blobs(self) -> BlobStore: ...
    @property
    def audit(self) -> AuditStore: ...


class Repositories(Protocol):
    """The configured repositories (the registry)."""

    @property
    def registry(self) -> Registry: ...


class Ownership(Protocol):
    """This process as an owner: its identity, its running attempts, its host, its stop."""

    @property
    def owner(self) -> Owner: ...
    @property
    def live(self) -> LiveAttempts: ...
    @property
    def host(self) -> HostState: ...
    @property
    def stopping(self) -> threading.Event: ...

    host_epoch: int | None  # set when the host registers (``promoter.engine.fencing``)

    def stamp(self) -> tuple[int, str, str, str, str]: ...
    def claim(self, session: Session, operation_id: str) -> None: ...


class Signing(Protocol):
    """The host keyring as read, and the one last published (both filled on first use)."""

    host_keyring: tuple[tuple[int, int, int] | None, Keyring] | None
    published_keyring: Keyring | None


class TreeCaches(Protocol):
    """The base-tree states per repository and each tree's links (git objects never change)."""

    @property
    def base_trees(self) -> dict[str, dict[tuple[str, str], StateWire]]: ...
    @property
    def tree_links(self) -> dict[str, dict[str, bytes]]: ...


class Watches(Protocol):
    """The worktree watches for snapshots, by shadow repository path."""

    @property
    def snapshot_watches(self) -> dict[str, SnapshotWatch]: ...


class StartWatching(Configured, Repositories, Protocol):
    """The worktree watches for sandboxes' starts, by repository name."""

    @property
    def start_watches(self) -> dict[str, StartWatch]: ...


class Credentials(Protocol):
    """Who a token is."""

    @property
    def auth(self) -> Authenticator: ...


class Lazy(Protocol):
    """The parts made on first use: the attempt runner, the run quota, the document slots."""

    @overload
    def once(self, name: Literal["runner"], make: Callable[[], AttemptRunner]) -> AttemptRunner: ...
    @overload
    def once(self, name: Literal["run_quota"], make: Callable[[], RunQuota]) -> RunQuota: ...
    @overload
    def once(
        self, name: Literal["document_slots"], make: Callable[[], anyio.Semaphore]
    ) -> anyio.Semaphore: ...


class Deliveries(Protocol):
    """The webhook deliveries, set by their adapter when subscribers are configured."""

    webhooks: WebhookDeliveries | None


# the composites, one per use case


class Journaling(Ledger, Ownership, Protocol):
    """Writes the ledger as this process: claims, leases, hosts, decisions."""


class Locking(Configured, Ownership, Protocol):
    """Takes a repository's lock as this process."""


class Records(Ledger, Archive, Protocol):
    """Reads the documents the ledger points at in the audit store."""


class Contents(Configured, Archive, Protocol):
    """Reads stored contents within the configured limits."""


class Pacing(Ledger, Configured, Protocol):
    """Works the ledger within the configured limits and timeouts."""


class Writing(Ledger, Configured, Ownership, Protocol):
    """Writes a worktree as this host: within the configured limits, its epoch checked
    while its host lease may have run out (``promoter.engine.fencing``)."""


class Catalogue(Ledger, Repositories, Protocol):
    """Lists what the ledger holds for the configured repositories."""


class Slots(Configured, Lazy, Protocol):
    """Makes the daemon's parts made on first use, from the settings."""


class Routing(Ledger, Ownership, Repositories, Protocol):
    """Finds which host guards a repository and whether it is this one."""


class Loading(Ledger, Archive, Ownership, Protocol):
    """Loads a stored document and the state of its operation."""


class Provenance(Loading, Repositories, Protocol):
    """Admits and follows grants, bundles and receipts to their repositories."""


class Guarding(Ledger, Configured, Ownership, Repositories, Protocol):
    """Acts on a guarded repository as this host: restores, registration, health."""


class Reviewing(Loading, Configured, Protocol):
    """Shows a bundle's changes to its reviewer, within the configured limits."""


class Sealing(Ledger, Configured, Ownership, Signing, Protocol):
    """Signs receipts with the host keyring and publishes it into the ledger."""


class Serving(Loading, Configured, Signing, Protocol):
    """Serves signed receipts and verifications."""


class Checking(Loading, Repositories, TreeCaches, Protocol):
    """Checks a bundle against its repository's base tree before it is promoted."""


class Operating(Loading, Configured, Repositories, Protocol):
    """Runs an operation's steps on a repository as this process."""


class Placing(Operating, Signing, Protocol):
    """Places files in a repository and signs the outcome: finish, rollback."""


class Capturing(Operating, Watches, Protocol):
    """Captures and collects a repository's snapshots."""


class Reconciling(Operating, Signing, TreeCaches, Protocol):
    """Submits a bundle, or reconciles an operation with its repository."""


class Attempting(Operating, Signing, TreeCaches, Watches, Protocol):
    """Runs a promotion attempt or its recovery, end to end."""


class Promoting(Attempting, Lazy, Protocol):
    """Requests, decides or merges a promotion and hands it to the attempt runner."""


class Uploading(Ledger, Archive, Configured, Ownership, Lazy, Protocol):
    """Receives uploaded blobs into the store, within the run's quota."""


class LinkChecks(Archive, TreeCaches, Protocol):
    """Checks a tree's links on disk against the stored contents."""


class KeyringFile(Configured, Signing, Protocol):
    """Reads the host keyring from its file once per change."""


class Tokens(Configured, Credentials, Protocol):
    """Checks and mints tokens under the configured limits."""


class Polling(Tokens, Ownership, Protocol):
    """Waits for a change on behalf of an authenticated caller, until the daemon stops;
    ``waits``: the waits held now, by the caller's token (on the event loop only)."""

    @property
    def waits(self) -> Counter[str]: ...


class Observing(Polling, Ledger, Repositories, Protocol):
    """Answers an operation or the event feed, waiting for a change for its caller."""


class Delivering(Ledger, Configured, Ownership, Deliveries, Protocol):
    """Starts the webhook deliveries of the watch feed."""
