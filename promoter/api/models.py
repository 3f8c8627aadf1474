"""Request and response models of the HTTP API, and ``parse`` for request bodies.

The path parameters' types are in ``promoter.api.params``: they need FastAPI, which the
client (``promoter.client.sync``, every CLI command that talks to a daemon) does not import.

Request models are strict pydantic models that reject unknown fields and coerce nothing
(a ``true`` is no integer, ``1.0`` no fence): they replace the routes' hand-written body
checks with the same outcome, ``validation_failed`` (422). Bodies still arrive through
``promoter.api.deps`` (size and JSON-shape bounds while streaming, then parsing); only
the parsed value is validated here. Grants, bundles and leases are validated by the
engine's wire models (``promoter.domain.models``), which the OpenAPI document references
for their bodies.

Response models describe what the routes answer, for the OpenAPI document; the routes
build their JSON themselves (canonical bytes for stored documents), so nothing here
serializes a response. Every member is listed, except in a preflight's read-back report
and in the key set (``View``), whose nested detail the engine owns.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)

from promoter.domain.models import (
    HEX40,
    GrantV1,
    Name,
    PatchVerificationReceiptV1,
    SafeInt,
    Sha256,
)
from promoter.errors import ValidationFailed

BUNDLE_ID = r"^bnd_[0-9a-f]{32}$"
OPERATION_ID = r"^op_[0-9a-f]{32}$"
TREE_ID = HEX40
MAX_DIGESTS = 100_000

Tree = Annotated[str, StringConstraints(pattern=TREE_ID)]


class Request(BaseModel):
    """A request body: strict, no unknown fields, no ``null`` for any field."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = sorted(str(k) for k, v in data.items() if v is None)
            if nulls:
                raise ValueError(f"fields may be left out, not null: {nulls}")
        return data


class Reply(BaseModel):
    """A response body the route builds itself: every member listed."""

    model_config = ConfigDict(extra="forbid")


class View(BaseModel):
    """A response the engine assembles: top-level members listed, more may follow."""

    model_config = ConfigDict(extra="allow")


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], body: Any) -> M:
    """``body`` (parsed JSON) as ``model``, or ``ValidationFailed`` naming the first error."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ValidationFailed(f"{where}: {first.get('msg', 'invalid')}") from None


# --- requests ------------------------------------------------------------------------------


class ExecutorTokenRequest(Request):
    executor_run_id: Name
    ttl_seconds: Annotated[int, Field(ge=1, le=2**31)] = Field(
        default=3600, description="at most the daemon's `executor_token_max_ttl`"
    )


def _as_sent(value: Any, _: Any) -> Any:
    return value


class RunLease(Request):
    """The lease of a run's workflow stage: a LeaseV1 and the stage it is for."""

    workflow_id: Name
    stage: Name
    run_id: Name
    attempt: SafeInt
    generation: SafeInt
    resume_epoch: SafeInt
    fence: SafeInt
    expires_at: str = Field(description="RFC 3339, checked as LeaseV1's")

    def lease(self) -> dict[str, Any]:
        """The LeaseV1 document (without the stage it is for)."""
        return self.model_dump(exclude={"workflow_id", "stage"})


class RunRequest(Request):
    """A run's grant, the lease of its workflow stage and its executor token's lifetime."""

    # the grant is left as sent (a validator that does not call pydantic's): the engine
    # checks it exactly as ``POST /v1/grants`` does, with the same refusals; the schema
    # is GrantV1's
    grant: Annotated[GrantV1, WrapValidator(_as_sent)]
    lease: RunLease = Field(description="the lease of the grant's workflow stage and run")
    token_ttl_seconds: Annotated[int, Field(ge=1, le=2**31)] = Field(
        default=3600, description="at most the daemon's `executor_token_max_ttl`"
    )


class PromotionRequest(Request):
    bundle_id: str = Field(description="`bnd_` and 32 hex", examples=["bnd_" + "0" * 32])
    verification_receipt_sha256: str = Field(description="the passed receipt's sha256")
    fence: SafeInt
    wait: bool = Field(default=False, description="answer only once the operation ended")


def _without_default(schema: dict[str, Any]) -> None:
    """Publish an optional, non-nullable field without its Python default (``None``)."""
    schema.pop("default", None)


class PreflightRequest(Request):
    fence: Annotated[
        SafeInt | None,
        WithJsonSchema({"type": "integer", "minimum": 0, "maximum": 2**53 - 1}),
    ] = Field(
        default=None,
        description="check the lease at this fence",
        json_schema_extra=_without_default,
    )


class RecoverRequest(Request):
    fence: SafeInt


class ReconcileRequest(Request):
    decision: str = Field(
        description="`continue`, `rollback` or `abandon` (for a restore: no `rollback`)"
    )
    note: str = ""


class RollbackRequest(Request):
    note: str = ""


class DecisionRequest(Request):
    """The operator's approval or rejection of a held promotion (every field optional)."""

    note: str = Field(default="", max_length=2000)
    by: str = Field(
        default="",
        max_length=2000,
        description="deprecated, decides nothing: the approver recorded is the authenticated "
        "credential; a name given here is journaled as `claimed_by` only",
    )
    wait: bool = False


class ApproveRequest(DecisionRequest):
    """An approval, of the whole bundle or of a part of it (``only`` or ``except``, ``hunks``)."""

    only: list[str] | None = Field(
        default=None,
        description="accept only these paths (wire form); the rest are declined",
    )
    except_: list[str] | None = Field(
        default=None,
        alias="except",
        description="decline these paths (wire form); the rest are accepted",
    )
    hunks: dict[str, list[Annotated[int, Field(ge=1, lt=2**31)]]] | None = Field(
        default=None,
        description="per modified text path, the hunks to accept, numbered from 1 as in "
        "the review diff; the host composes the new bytes from the old ones and these hunks",
    )
    seen: list[str] | None = Field(
        default=None,
        description="paths (wire form) the review's first page does not show in full "
        "(its `unseen`) that the approver read by path or accepts as they are; when that "
        "page is cut, every accepted one must be named here, or `all_seen` given, else "
        "`diff_not_seen`",
    )
    all_seen: bool = Field(
        default=False,
        description="the approver saw every file of the bundle, or accepts those not shown "
        "in full as they are",
    )


class ReopenRequest(Request):
    """The operator's reopening of a rejected promotion (every field optional)."""

    note: str = Field(default="", max_length=2000)


class SnapshotRequest(Request):
    label: str = ""


class RestoreRequest(Request):
    expected_current_tree: str = Field(
        description="the tree the worktree must be at now (40 hex)", examples=["0" * 40]
    )


class BlobsMissingRequest(Request):
    sha256: Annotated[list[Sha256], Field(max_length=MAX_DIGESTS)]


# --- responses -----------------------------------------------------------------------------


class Health(Reply):
    status: Literal["ok"]


class ReadyChecks(Reply):
    database: bool
    state_dir_writable: bool
    host_active: bool  # false once this daemon's host was fenced off: it writes nothing


class Readiness(Reply):
    status: Literal["ready", "not_ready"]
    checks: ReadyChecks
    reason: str | None = None  # why not ready, in a sentence (none when ready)


class RepositoryInfo(Reply):
    name: str
    repository_identity: str
    worktree: str
    branch: str | None
    head: str | None


class GuardedRepository(Reply):
    """A repository of the cluster and the host that guards it (from the ledger)."""

    repository_identity: str
    name: str | None = Field(description="its name on the host that guards it, where known")
    host_id: str
    address: str | None = Field(description="the base URL that host's daemon serves on")
    this_host: bool


class RepositoryList(Reply):
    repositories: list[RepositoryInfo] = Field(description="the repositories guarded here")
    host_id: str = Field(description="this host")
    cluster: list[GuardedRepository] | None = Field(
        default=None,
        description="every repository of the cluster and who guards it, this host's "
        "first; null while the database does not answer",
    )


class RepositoryApprovalRequest(Request):
    """``promoter repos set NAME --approval``: the setting in force from now on."""

    approval: Literal["none", "required"]


class RepositoryApproval(Reply):
    """A repository's approval setting in force and where it comes from."""

    name: str
    repository_identity: str
    approval: Literal["none", "required"]
    source: Literal["config", "ledger"] = Field(
        description="`config`: the configuration file; `ledger`: set by `repos set`"
    )
    set_by: str | None = Field(description="the credential that set it (ledger only)")
    set_at: str | None


class Caller(Reply):
    """Who the request's credential is: its role and its name (never the token)."""

    role: Literal["executor", "orchestrator", "operator"]
    name: str
    run_id: str | None = Field(description="an executor token's run")


class ExecutorToken(Reply):
    token: str
    executor_run_id: str
    expires_at: str


class GrantRegistered(Reply):
    grant_id: str
    grant_sha256: Sha256


class LeaseSet(Reply):
    workflow_id: str
    stage: str
    run_id: str
    attempt: int
    generation: int
    resume_epoch: int
    fence: int
    expires_at: str
    changed: bool


class RunOpened(Reply):
    grant: GrantRegistered
    grant_created: bool
    lease: LeaseSet
    token: ExecutorToken


class MissingBlobs(Reply):
    missing: list[Sha256]


class BlobStored(Reply):
    sha256: Sha256
    bytes: int
    created: bool


class BundleSubmitted(Reply):
    bundle_id: str
    bundle_sha256: Sha256
    verification_receipt: PatchVerificationReceiptV1


class Preflight(View):
    """The engine's preflight: the checks so far, and the read-back report once it ran."""

    bundle_id: str
    status: Literal["passed", "refused"]
    code: str | None
    detail: str
    checks: dict[str, Any]
    error: dict[str, Any] | None = Field(default=None, description="the refusal's problem")
    repository: dict[str, Any] | None = None
    paths: list[dict[str, Any]] | None = None
    drifted: list[Any] | None = None
    unsafe: list[Any] | None = None


class OperationAccepted(Reply):
    operation_id: str
    status: str


class Step(Reply):
    seq: int
    path: str
    operation: str
    status: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    detail: str | None


class Attempt(Reply):
    attempt: int
    status: str
    code: str | None
    started_at: str
    ended_at: str | None


class Event(Reply):
    event_id: str
    operation_id: str
    seq: int
    kind: str
    payload: dict[str, Any]
    prev_event_sha256: str | None
    event_sha256: str
    at: str


class OwnerView(Reply):
    """Who runs (or last ran) the operation, and whether its owner lease is live."""

    host: str | None
    pid: int | None
    boot: str | None
    lease_until: str | None
    lease_expired: bool


class EventIds(Reply):
    """The current attempt's events that a promotion receipt names."""

    decision: str | None
    action: str | None
    outcome: str | None


class OperationView(Reply):
    operation_id: str
    kind: str
    status: str
    attempt: int
    repository: str
    repository_identity: str
    grant_id: str | None
    bundle_id: str | None
    verification_receipt_sha256: str | None
    fence: int | None
    code: str | None
    detail: str | None
    receipt_sha256: str | None
    owner: OwnerView
    event_ids: EventIds
    pre_snapshot: str | None
    post_snapshot: str | None
    report: dict[str, Any] | None
    created_at: str
    updated_at: str
    steps: list[Step]
    created_directories: list[str]
    attempts: list[Attempt]
    events: list[Event]
    events_verified: bool
    current_targets: list[dict[str, Any]] | None = Field(
        default=None, description="with `current=true` only"
    )


class OperationSummary(Reply):
    operation_id: str
    kind: str
    status: str
    attempt: int
    repository: str | None
    bundle_id: str | None
    code: str | None
    updated_at: str | None


class OperationList(Reply):
    operations: list[OperationSummary]


class KeySet(View):
    active_keyid: str = Field(description="the key this host signs new receipts with")
    host_id: str = Field(description="the host answering")
    keys: list[dict[str, Any]] = Field(
        description="every host's keys, each with `host_id`, `status`, `not_before`, "
        "`not_after` and the RFC 8037 OKP JWK members"
    )


class Snapshot(Reply):
    tree: Tree
    label: str
    captured_at: str


class SnapshotList(Reply):
    snapshots: list[Snapshot]


class SnapshotDiff(Reply):
    added: list[str]
    modified: list[str]
    deleted: list[str]
    unified_diff: str
    truncated: bool


class FeedEvent(Reply):
    """One ledger event or status change, with its operation's status as it committed."""

    cursor: str = Field(description="resume after this entry with `after=<cursor>`")
    event_id: str | None = Field(description="none for a `status` entry")
    operation_id: str
    operation_kind: str
    repository: str
    kind: str = Field(description="`decision`, `action`, `outcome`, or `status`")
    status: str
    code: str | None
    at: str


class EventFeed(Reply):
    events: list[FeedEvent]
    cursor: str = Field(description="resume after the events answered with `after=<cursor>`")


class FenceRequest(Request):
    to: str = Field(
        min_length=1, max_length=200, description="the daemon host that takes the operations over"
    )


class HostEntry(View):
    host_id: str
    epoch: int
    status: str = Field(description="`active` or `fenced`")
    repositories: list[str]
    lease_until: str | None
    lease_expired: bool | None = Field(description="null: not known (no database)")
    fenced_at: str | None
    fenced_by: str | None
    fenced_to: str | None
    address: str | None = Field(
        default=None, description="the URL the host's daemon serves on, where known"
    )


class HostList(Reply):
    hosts: list[HostEntry]
    source: Literal["ledger", "this_host"] = Field(
        description="`ledger`: every host, as the ledger says; `this_host`: the database "
        "does not answer, so only this host as its daemon last saw it"
    )
    database_up: bool
    detail: str | None = Field(default=None, description="why only this host is shown")


class Fenced(Reply):
    host: str
    epoch: int = Field(description="the host's epoch after the fence")
    to: str
    fenced_by: str
    fenced_at: str
    operations: list[str] = Field(description="the operations handed to `to`")
