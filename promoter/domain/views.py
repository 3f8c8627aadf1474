"""The daemon's answers on the wire, as models: what a route returns and a client reads.

Each model lists the members of one JSON answer of the HTTP API (``Reply``: every
member; ``View``: the top-level ones, the nested detail the engine owns). The engine
builds its views as these models, the routes serialize them (``promoter.api.responses``)
and the OpenAPI document publishes their schemas; ``PromoterClient`` and
``AsyncPromoterClient`` parse answers into them. This module imports pydantic and the
domain's wire models only, so a client never loads the daemon to read an answer.
Not here: request bodies and their parsing (``promoter.api.models``), the bundle's diff
(``promoter.domain.diff_views``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_serializer

from promoter.domain.models import HEX40, FileState, PatchVerificationReceiptV1, Sha256
from promoter.domain.path_state import Finding, Verdict

Tree = Annotated[str, StringConstraints(pattern=HEX40)]


class Reply(BaseModel):
    """A response body the route builds itself: every member listed."""

    model_config = ConfigDict(extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON answer (every member, nulls included)."""
        return self.model_dump(mode="json", by_alias=True)


class View(BaseModel):
    """A response the engine assembles: top-level members listed, more may follow."""

    model_config = ConfigDict(extra="allow")

    def wire(self) -> dict[str, Any]:
        """The JSON answer (every member, nulls included)."""
        return self.model_dump(mode="json", by_alias=True)


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


def _receipt_document(receipt: PatchVerificationReceiptV1) -> dict[str, Any]:
    return receipt.wire()  # the document's own form: optional members only when set


class BundleSubmitted(Reply):
    bundle_id: str
    bundle_sha256: Sha256
    verification_receipt: PatchVerificationReceiptV1

    _receipt = field_serializer("verification_receipt")(_receipt_document)


class Expectation(Reply):
    """One of HEAD's facts: what the grant expects, what was read, whether they agree."""

    expected: str | None
    actual: str | None
    ok: bool


class RepositoryReadBack(Reply):
    branch: Expectation
    head: Expectation
    tree: Expectation


class IndexEntryState(Reply):
    mode: str
    oid: str
    stage: int


class PathReadBack(Reply):
    """One target as the read-back found it, against what the bundle expects."""

    path: str
    operation: str
    expected_old: dict[str, Any]
    expected_new: dict[str, Any]
    actual: dict[str, Any] | None = Field(
        description="the target as read (`promoter.domain.path_state.observed`), or "
        "`{error: code, ...}` when it could not be read"
    )
    index_expected: list[IndexEntryState]
    index_actual: list[IndexEntryState]
    verdict: Finding
    reasons: list[str]


class ReadBackReport(Reply):
    """Step 4's findings: HEAD, branch and tree, then every target."""

    repository: RepositoryReadBack
    paths: list[PathReadBack]
    drifted: list[str]
    unsafe: list[str]


class PreflightCheck(Reply):
    ok: bool


class PreflightChecks(Reply):
    """The checks that ran, in their order: each passed, or the last the refusal's (failed);
    one that did not run is not listed."""

    authority: PreflightCheck | None = None
    evidence: PreflightCheck | None = None


class Preflight(Reply):
    """The engine's preflight: the checks so far, and the read-back report once it ran."""

    bundle_id: str
    status: Literal["passed", "refused"]
    code: str | None
    detail: str
    checks: PreflightChecks
    error: dict[str, Any] | None = Field(default=None, description="the refusal's problem")
    repository: RepositoryReadBack | None = None
    paths: list[PathReadBack] | None = None
    drifted: list[str] | None = None
    unsafe: list[str] | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON answer: the members this preflight reached (no nulls for the others)."""
        return self.model_dump(mode="json", exclude_unset=True)


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


class MergedOperation(Reply):
    """A promotion of a bundle merged from this operation's (``promoter merge``)."""

    operation_id: str
    bundle_id: str
    status: str
    code: str | None


class CurrentTarget(Reply):
    """A step's target as it reads now, and which side of the step it matches."""

    path: str
    matches: Verdict
    actual: dict[str, Any] = Field(description="the state read, or `{error: code}`")


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
    merged_into: list[MergedOperation] = Field(
        description="the promotions of the bundles merged from this one, as the merges were made"
    )
    current_targets: list[CurrentTarget] | None = Field(
        default=None, description="with `current=true` only"
    )
    next: str | None = Field(
        default=None,
        description="what to do now, for an operation that needs recovery or reconciliation",
    )
    receipt: dict[str, Any] | None = Field(
        default=None,
        description="the stored promotion receipt, on a promotion request's answer of a "
        "completed promotion only",
    )

    def wire(self) -> dict[str, Any]:
        """The JSON answer; ``current_targets``, ``next`` and ``receipt`` only when set."""
        unset = {
            name for name in ("current_targets", "next", "receipt") if getattr(self, name) is None
        }
        return self.model_dump(mode="json", by_alias=True, exclude=unset or None)


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


class WorktreeChanges(Reply):
    generation: str = Field(description="the watch generation now; empty: not watched")
    clock: int = Field(description="the clock now: ask with it next time")
    paths: list[str] | None = Field(
        description="the worktree paths changed since the position asked for, sorted by "
        "their bytes; null: not known, read the whole worktree"
    )
    reason: str = Field(description="why the paths are not known, when they are not")


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


class HostFence(Reply):
    """One fence of a host: its epoch after it, who fenced, when, what was handed over."""

    epoch: int
    to: str | None
    by: str | None
    at: str | None
    operations: list[str]


class HostEntry(View):
    host_id: str
    epoch: int
    status: str = Field(description="`active` or `fenced`")
    repositories: list[str]
    registered_at: str | None = Field(description="null: not known (no database)")
    this_host: bool
    fences: list[HostFence]
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
    already: bool = Field(
        default=False,
        description="the host was fenced already, to `to`: this answer is that fence's, "
        "nothing changed",
    )


class MergeSide(Reply):
    kind: str | None = None
    sha256: str | None
    mode: str | None
    bytes: int | None


class MergePathReport(Reply):
    path: str
    result: str
    reason: str
    old: MergeSide
    current: MergeSide
    new: MergeSide
    conflicts: int | None = None
    merged_text: str | None = None
    truncated: bool | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON answer: a side's ``kind`` and a conflict's text only where set."""
        return self.model_dump(mode="json", exclude_unset=True)


class HeldPromotion(Reply):
    operation_id: str | None
    status: str
    code: str | None
    detail: str


class MergeResult(Reply):
    operation_id: str
    bundle_id: str
    bundle_sha256: str
    verification_receipt_sha256: str
    merged_from: str
    paths: list[MergePathReport]
    promotion: HeldPromotion

    def wire(self) -> dict[str, Any]:
        """The JSON answer: each path's members as ``MergePathReport.wire`` gives them."""
        return self.model_dump(mode="json", exclude_unset=True)


class TracePromotion(Reply):
    operation_id: str
    status: str
    bundle_id: str
    grant_id: str
    executor_run_id: str | None
    promoted_at: str
    receipt_sha256: str


TraceChange = Literal["A", "M", "D", "T"]
TraceVerdict = Literal["promoted", "changed_after_promotion", "not_promoted", "untouched"]


class TracePath(Reply):
    path: str
    change: TraceChange | None
    exists: bool | None
    sha256: str | None
    mode: str | None
    verdict: TraceVerdict
    promotions: list[TracePromotion]
    last_promotion: TracePromotion | None


class TraceReport(Reply):
    repository: str
    commit: str | None
    parent: str | None
    paths: list[TracePath]


CarriedPart = Literal["diff", "receipt"]


class NotCarried(Reply):
    """A part of the review asked for that the answer does not carry: the error reading
    it met (its stable code and detail); its own request reads it."""

    part: CarriedPart
    code: str
    detail: str


class PromotedWithEvidence(Reply):
    """The stored bundle, its passed verification receipt and the promotion: its final
    view once it ended (200, with ``wait``), else its id and status (202); asked for, the
    bundle's first diff page and the promotion receipt (each left out otherwise), and
    each one asked for that could not be read, with why (``not_carried``)."""

    bundle_id: str
    bundle_sha256: Sha256
    verification_receipt: PatchVerificationReceiptV1
    operation: OperationView | OperationAccepted
    diff: dict[str, Any] | None = Field(
        default=None,
        description="with `diff=true`: the BundleDiffView `GET /v1/bundles/{id}/diff` answers",
    )
    receipt: dict[str, Any] | None = Field(
        default=None,
        description="with `receipt=true`, once completed: the PatchPromotionReceiptV1 "
        "`GET /v1/operations/{id}/receipt` serves",
    )
    not_carried: list[NotCarried] | None = Field(
        default=None,
        description="each part asked for (`diff`, or `receipt` of a completed promotion) "
        "that could not be read, with the error's code and detail: its own request reads "
        "it; left out when everything asked for is carried",
    )

    _receipt = field_serializer("verification_receipt")(_receipt_document)

    @field_serializer("operation")
    def _operation(self, operation: OperationView | OperationAccepted) -> dict[str, Any]:
        return operation.wire()

    def wire(self) -> dict[str, Any]:
        """The JSON answer; ``diff``, ``receipt`` and ``not_carried`` only when there."""
        unasked = {k for k in ("diff", "receipt", "not_carried") if getattr(self, k) is None}
        return self.model_dump(mode="json", by_alias=True, exclude=unasked or None)


class BlobBatchItem(Reply):
    """One blob of a batch: stored (201 new, 200 already there) or refused with a code."""

    sha256: Sha256
    bytes: int
    created: bool
    status: int
    code: str | None
    detail: str | None


class BlobBatchStored(Reply):
    responses: list[BlobBatchItem]


class BundleOperation(Reply):
    """One promotion of a bundle, as its executor may see it."""

    operation_id: str
    status: str
    attempt: int
    code: str | None
    detail: str | None
    receipt_sha256: str | None
    updated_at: str


class BundleOperations(Reply):
    bundle_id: str
    operations: list[BundleOperation]


class BaseState(Reply):
    path: str
    state: FileState


class GrantBase(Reply):
    """A chained grant's base: per path, the state its completed base promotions left."""

    grant_id: str
    base_operation: str | None
    states: list[BaseState]
