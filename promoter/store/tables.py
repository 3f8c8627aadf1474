"""Database tables (SQLAlchemy 2 declarative, ``Mapped[]``).

Rows only: these classes never leave ``promoter.store``; ``promoter.store.repo`` converts
them to domain objects. The schema itself is owned by the Alembic migrations in the
top-level ``migrations/`` folder; a contract test checks that they agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from promoter.domain.status import StepStatus, check_transition

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ExecutorTokenRow(Base):
    __tablename__ = "executor_tokens"
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    executor_run_id: Mapped[str] = mapped_column(String(200), index=True)
    expires_at: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[str] = mapped_column(String(20))


class BlobRow(Base):
    __tablename__ = "blobs"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[str] = mapped_column(String(20))


class GrantRow(Base):
    __tablename__ = "grants"
    grant_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    grant_sha256: Mapped[str] = mapped_column(String(64))
    repository_identity: Mapped[str] = mapped_column(String(40), index=True)
    executor_run_id: Mapped[str] = mapped_column(String(200), index=True)
    workflow_id: Mapped[str] = mapped_column(String(200))
    stage: Mapped[str] = mapped_column(String(200))
    fence: Mapped[int] = mapped_column(Integer)
    not_before: Mapped[str] = mapped_column(String(20))
    expires_at: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[str] = mapped_column(String(20))


class BundleRow(Base):
    __tablename__ = "bundles"
    bundle_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    bundle_sha256: Mapped[str] = mapped_column(String(64))
    grant_id: Mapped[str] = mapped_column(ForeignKey("grants.grant_id"), index=True)
    executor_run_id: Mapped[str] = mapped_column(String(200), index=True)
    repository_identity: Mapped[str] = mapped_column(String(40))
    # verified -> promoted | refused | expired; pinned blobs follow this state
    state: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[str] = mapped_column(String(20))
    # the host whose state directory holds the bundle's document (None: recorded before 0007)
    owner_host: Mapped[str | None] = mapped_column(String(200), nullable=True)


class BundleBlobRow(Base):
    """Blobs a bundle references: pinned while the bundle may still be promoted."""

    __tablename__ = "bundle_blobs"
    bundle_id: Mapped[str] = mapped_column(ForeignKey("bundles.bundle_id"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class VerificationRow(Base):
    """Every verification run; passed receipts also live once in the audit store."""

    __tablename__ = "verifications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[str] = mapped_column(String(40), index=True)
    receipt_sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(10))
    receipt: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[str] = mapped_column(String(20))


class LeaseRow(Base):
    __tablename__ = "leases"
    workflow_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    stage: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200))
    attempt: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    resume_epoch: Mapped[int] = mapped_column(Integer)
    fence: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[str] = mapped_column(String(20))
    updated_at: Mapped[str] = mapped_column(String(20))


class OperationRow(Base):
    __tablename__ = "operations"
    operation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # promotion | rollback | restore
    repository_identity: Mapped[str] = mapped_column(String(40), index=True)
    repository_name: Mapped[str] = mapped_column(String(200))
    grant_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    bundle_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    grant_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    bundle_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    verification_receipt_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    parent_operation_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    status: Mapped[str] = mapped_column(String(30), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    fence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    code: Mapped[str | None] = mapped_column(String(60), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    owner_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    owner_start: Mapped[str | None] = mapped_column(String(40), nullable=True)
    owner_boot: Mapped[str | None] = mapped_column(String(64), nullable=True)
    owner_host: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    owner_lease_until: Mapped[str | None] = mapped_column(String(32), nullable=True)
    receipt_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    receipt: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # the events of the current attempt that a receipt names (protocol: bundles#promotion-receipt
    # ``events``)
    decision_event_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    action_event_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    outcome_event_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    pre_snapshot: Mapped[str | None] = mapped_column(String(40), nullable=True)
    post_snapshot: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at: Mapped[str] = mapped_column(String(20))
    updated_at: Mapped[str] = mapped_column(String(20))

    # Every UPDATE of a row through the ORM says ``WHERE status = <the status it was read
    # with>``: a row another request or host moved in the meantime is not overwritten (the
    # flush raises ``StaleDataError``, answered as ``operation_conflict``). The status is
    # the version, set by the code (never generated), so a write that keeps it still checks.
    __mapper_args__ = {"version_id_col": status, "version_id_generator": False}

    @validates("status")
    def _transition(self, _key: str, status: str) -> str:
        """Every status change goes through the table of ``promoter.domain.status``."""
        return str(check_transition(self.kind, self.status, status).value)


class AttemptRow(Base):
    __tablename__ = "operation_attempts"
    operation_id: Mapped[str] = mapped_column(
        ForeignKey("operations.operation_id"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(30))
    code: Mapped[str | None] = mapped_column(String(60), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[str] = mapped_column(String(20))
    ended_at: Mapped[str | None] = mapped_column(String(20), nullable=True)


class StepRow(Base):
    __tablename__ = "steps"
    operation_id: Mapped[str] = mapped_column(
        ForeignKey("operations.operation_id"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    operation: Mapped[str] = mapped_column(String(10))
    old_state: Mapped[dict[str, Any]] = mapped_column(JSON)
    new_state: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20))  # pending | completed | failed
    temp_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)

    @validates("status")
    def _known(self, _key: str, status: str) -> str:
        return str(StepStatus(status).value)  # a step may move between any two statuses


class CreatedDirRow(Base):
    __tablename__ = "created_dirs"
    operation_id: Mapped[str] = mapped_column(
        ForeignKey("operations.operation_id"), primary_key=True
    )
    path: Mapped[str] = mapped_column(String(4096), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("operation_id", "seq"),)
    event_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.operation_id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    prev_event_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    event_sha256: Mapped[str] = mapped_column(String(64))
    at: Mapped[str] = mapped_column(String(20))


class SnapshotRow(Base):
    __tablename__ = "snapshots"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repository_identity: Mapped[str] = mapped_column(String(40))
    tree: Mapped[str] = mapped_column(String(40))
    label: Mapped[str] = mapped_column(String(200))
    captured_at: Mapped[str] = mapped_column(String(20))


Index("ix_snapshots_repo_time", SnapshotRow.repository_identity, SnapshotRow.captured_at)


class FeedRow(Base):
    """A ledger event or a status change, in the global order of commits: the watch feed."""

    __tablename__ = "event_feed"
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # none for a ``status`` entry: a status change without an event of its own
    event_id: Mapped[str | None] = mapped_column(String(40), unique=True, nullable=True)
    operation_id: Mapped[str] = mapped_column(String(40), index=True)
    operation_kind: Mapped[str] = mapped_column(String(20))
    repository_name: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(30))
    code: Mapped[str | None] = mapped_column(String(60), nullable=True)
    at: Mapped[str] = mapped_column(String(20))


class WebhookSubscriberRow(Base):
    """A webhook subscriber's place in the feed and its run of failures."""

    __tablename__ = "webhook_subscribers"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)  # feed entries up to here are queued
    failures: Mapped[int] = mapped_column(Integer)  # consecutive failed attempts
    paused: Mapped[int] = mapped_column(Integer)  # 1 once failures reached max_failures
    updated_at: Mapped[str] = mapped_column(String(20))


class WebhookDeliveryRow(Base):
    """One queued or done delivery of one feed entry to one subscriber."""

    __tablename__ = "webhook_deliveries"
    delivery_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    subscriber: Mapped[str] = mapped_column(String(200), index=True)
    position: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), index=True)  # pending | delivered
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[str] = mapped_column(String(20))


class HostRow(Base):
    """A host of the ledger and its epoch (``promoter.store.hosts``)."""

    __tablename__ = "hosts"
    host_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer)  # raised by every fence of the host
    status: Mapped[str] = mapped_column(String(20))  # active | fenced
    repositories: Mapped[list[Any]] = mapped_column(JSON)  # identities configured there
    registered_at: Mapped[str] = mapped_column(String(32))
    lease_until: Mapped[str | None] = mapped_column(String(32), nullable=True)
    fenced_at: Mapped[str | None] = mapped_column(String(32), nullable=True)
    fenced_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    fenced_to: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # the base URL its daemon serves on, and its repositories' names (from schema 0011h)
    address: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    repository_names: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class CredentialRow(Base):
    """An orchestrator or operator credential of the cluster, as its token's sha256
    (``promoter.store.credentials``); live while ``removed_at`` is null."""

    __tablename__ = "credentials"
    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # orchestrator | operator
    name: Mapped[str] = mapped_column(String(200), index=True)
    host_id: Mapped[str] = mapped_column(String(200))  # the host that published it
    added_at: Mapped[str] = mapped_column(String(32))
    removed_at: Mapped[str | None] = mapped_column(String(32), nullable=True)
    removed_on: Mapped[str | None] = mapped_column(String(200), nullable=True)


class HostFenceRow(Base):
    """One fence of a host: who, when, to which host, the operations handed over."""

    __tablename__ = "host_fences"
    host_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)  # the epoch it raised to
    to_host: Mapped[str] = mapped_column(String(200))
    fenced_by: Mapped[str] = mapped_column(String(200))
    fenced_at: Mapped[str] = mapped_column(String(32))
    operations: Mapped[list[Any]] = mapped_column(JSON)


class HostKeyRow(Base):
    """A receipt-signing public key a host published: the ledger's key set."""

    __tablename__ = "host_keys"
    keyid: Mapped[str] = mapped_column(String(64), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(200), index=True)
    algorithm: Mapped[str] = mapped_column(String(20))
    public_key_pem: Mapped[str] = mapped_column(Text)
    not_before: Mapped[str | None] = mapped_column(String(32), nullable=True)  # None: first key
    not_after: Mapped[str | None] = mapped_column(String(32), nullable=True)  # None: active
    published_at: Mapped[str] = mapped_column(String(20))


class ReceiptEnvelopeRow(Base):
    """The DSSE envelope of a receipt, made once by the host that made the receipt."""

    __tablename__ = "receipt_envelopes"
    receipt_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(30))  # promotion | rollback | verification receipt
    subject_id: Mapped[str] = mapped_column(String(40), index=True)  # operation or bundle
    host_id: Mapped[str] = mapped_column(String(200))
    keyid: Mapped[str] = mapped_column(String(64))
    envelope: Mapped[str] = mapped_column(Text)  # the exact canonical bytes served
    created_at: Mapped[str] = mapped_column(String(20))


class RepositorySettingRow(Base):
    """One change of a repository's setting by an operator (``promoter repos set``): the
    newest row of a repository and setting is in force, over the configuration file."""

    __tablename__ = "repository_settings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repository_identity: Mapped[str] = mapped_column(String(40), index=True)
    repository_name: Mapped[str] = mapped_column(String(200))
    setting: Mapped[str] = mapped_column(String(40))
    value: Mapped[str] = mapped_column(String(40))
    previous: Mapped[str] = mapped_column(String(40))  # what was in force before
    by_role: Mapped[str] = mapped_column(String(20))
    by_name: Mapped[str] = mapped_column(String(200))
    host_id: Mapped[str] = mapped_column(String(200))
    at: Mapped[str] = mapped_column(String(32))


class ConsoleSessionRow(Base):
    """A logged-in console browser (``promoter.store.console_sessions``), found by its
    session id's sha256 (never the id); times in wall-clock seconds."""

    __tablename__ = "console_sessions"
    session_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))
    name: Mapped[str] = mapped_column(String(200), index=True)  # the credential's name
    credential_sha256: Mapped[str] = mapped_column(String(64))  # its token's, at login
    opened_at: Mapped[float] = mapped_column(Float)
    used_at: Mapped[float] = mapped_column(Float)  # written at most once a minute
    expires_at: Mapped[float] = mapped_column(Float)  # opened_at + the lifetime


class ConsoleSessionEndedRow(Base):
    """A console session its credential's removal ended (``promoter.store.console_sessions``),
    found by the session id's sha256 and kept until the session would have ended anyway, so
    that the login page can tell that browser why; times in wall-clock seconds."""

    __tablename__ = "console_sessions_ended"
    session_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(String(20))  # "revoked"
    until: Mapped[float] = mapped_column(Float)  # the session's own latest end
