"""The daemon's answers as ``TypedDict``s: what ``PromoterClient`` returns, what the
engine builds as a dict.

Written by ``python -m scripts.answers`` from the answer models (``promoter.domain.views``,
``promoter.domain.diff_views``); do not edit by hand. A member with a default may be left
out (``NotRequired``). Importing this module loads ``typing`` only: a command reads a
typed answer, and the engine types the dicts it answers, without loading pydantic.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

CarriedPart = Literal["diff", "receipt"]
DiffFlag = Literal[
    "bidi_control",
    "binary",
    "ci_config",
    "control_character",
    "executable",
    "hook_path",
    "invisible_character",
    "large",
    "long_line",
    "mode_change",
    "not_utf8",
    "symlink",
]
Shown = Literal["full", "partial", "none"]
TraceChange = Literal["A", "M", "D", "T"]
TraceVerdict = Literal["promoted", "changed_after_promotion", "not_promoted", "untouched"]


class Attempt(TypedDict):
    attempt: int
    status: str
    code: str | None
    started_at: str
    ended_at: str | None


class BaseState(TypedDict):
    path: str
    state: dict[str, Any]


class BlobBatchItem(TypedDict):
    """One blob of a batch: stored (201 new, 200 already there) or refused with a code."""

    sha256: str
    bytes: int
    created: bool
    status: int
    code: str | None
    detail: str | None


class BlobBatchStored(TypedDict):
    responses: list[BlobBatchItem]


class BlobStored(TypedDict):
    sha256: str
    bytes: int
    created: bool


class BundleDiffView(TypedDict):
    """A bundle's per-file summary and unified diff (or one path's), a page of at most
    `limit` bytes from `cursor`."""

    bundle_id: str
    files: list[FileDiffView]
    unified_diff: str
    truncated: bool
    limit: int
    max_file_bytes: int
    path: str | None
    cursor: str
    next_cursor: str | None
    unseen: list[UnseenFileView]


class BundleOperation(TypedDict):
    """One promotion of a bundle, as its executor may see it."""

    operation_id: str
    status: str
    attempt: int
    code: str | None
    detail: str | None
    receipt_sha256: str | None
    updated_at: str


class BundleOperations(TypedDict):
    bundle_id: str
    operations: list[BundleOperation]


class BundleSubmitted(TypedDict):
    bundle_id: str
    bundle_sha256: str
    verification_receipt: dict[str, Any]


class Caller(TypedDict):
    """Who the request's credential is: its role and its name (never the token)."""

    role: Literal["executor", "orchestrator", "operator"]
    name: str
    run_id: str | None


class CurrentTarget(TypedDict):
    """A step's target as it reads now, and which side of the step it matches."""

    path: str
    matches: Literal["old", "new", "neither"]
    actual: dict[str, Any]


class Event(TypedDict):
    event_id: str
    operation_id: str
    seq: int
    kind: str
    payload: dict[str, Any]
    prev_event_sha256: str | None
    event_sha256: str
    at: str


class EventFeed(TypedDict):
    events: list[FeedEvent]
    cursor: str


class EventIds(TypedDict):
    """The current attempt's events that a promotion receipt names."""

    decision: str | None
    action: str | None
    outcome: str | None


class ExecutorToken(TypedDict):
    token: str
    executor_run_id: str
    expires_at: str


class Expectation(TypedDict):
    """One of HEAD's facts: what the grant expects, what was read, whether they agree."""

    expected: str | None
    actual: str | None
    ok: bool


class FeedEvent(TypedDict):
    """One ledger event or status change, with its operation's status as it committed."""

    cursor: str
    event_id: str | None
    operation_id: str
    operation_kind: str
    repository: str
    kind: str
    status: str
    code: str | None
    at: str


class Fenced(TypedDict):
    host: str
    epoch: int
    to: str
    fenced_by: str
    fenced_at: str
    operations: list[str]
    already: NotRequired[bool]


class FileDiffView(TypedDict):
    """One changed path: what it was, what it becomes, what to look at closely."""

    path: str
    path_shown: str
    operation: str
    old_mode: str | None
    new_mode: str | None
    old_bytes: int | None
    new_bytes: int | None
    old_sha256: str | None
    new_sha256: str | None
    old_lines: int | None
    new_lines: int | None
    longest_line: int | None
    binary: bool
    summarized: bool
    added: int | None
    removed: int | None
    flags: list[DiffFlag]
    symlink_target: str | None
    shown: Shown
    diff_bytes: int | None
    rename_from: NotRequired[str | None]
    rename_from_shown: NotRequired[str | None]
    similarity: NotRequired[int | None]
    renamed_to: NotRequired[str | None]


class GrantBase(TypedDict):
    """A chained grant's base: per path, the state its completed base promotions left."""

    grant_id: str
    base_operation: str | None
    states: list[BaseState]


class GrantRegistered(TypedDict):
    grant_id: str
    grant_sha256: str


class GuardedRepository(TypedDict):
    """A repository of the cluster and the host that guards it (from the ledger)."""

    repository_identity: str
    name: str | None
    host_id: str
    address: str | None
    this_host: bool


class Health(TypedDict):
    status: Literal["ok"]


class HeldPromotion(TypedDict):
    operation_id: str | None
    status: str
    code: str | None
    detail: str


class HostEntry(TypedDict):
    host_id: str
    epoch: int
    status: str
    repositories: list[str]
    registered_at: str | None
    this_host: bool
    fences: list[HostFence]
    lease_until: str | None
    lease_expired: bool | None
    fenced_at: str | None
    fenced_by: str | None
    fenced_to: str | None
    address: NotRequired[str | None]


class HostFence(TypedDict):
    """One fence of a host: its epoch after it, who fenced, when, what was handed over."""

    epoch: int
    to: str | None
    by: str | None
    at: str | None
    operations: list[str]


class HostList(TypedDict):
    hosts: list[HostEntry]
    source: Literal["ledger", "this_host"]
    database_up: bool
    detail: NotRequired[str | None]


class IndexEntryState(TypedDict):
    mode: str
    oid: str
    stage: int


class KeySet(TypedDict):
    active_keyid: str
    host_id: str
    keys: list[dict[str, Any]]


class LeaseSet(TypedDict):
    workflow_id: str
    stage: str
    run_id: str
    attempt: int
    generation: int
    resume_epoch: int
    fence: int
    expires_at: str
    changed: bool


class MergePathReport(TypedDict):
    path: str
    result: str
    reason: str
    old: MergeSide
    current: MergeSide
    new: MergeSide
    conflicts: NotRequired[int | None]
    merged_text: NotRequired[str | None]
    truncated: NotRequired[bool | None]


class MergeResult(TypedDict):
    operation_id: str
    bundle_id: str
    bundle_sha256: str
    verification_receipt_sha256: str
    merged_from: str
    paths: list[MergePathReport]
    promotion: HeldPromotion


class MergeSide(TypedDict):
    kind: NotRequired[str | None]
    sha256: str | None
    mode: str | None
    bytes: int | None


class MergedOperation(TypedDict):
    """A promotion of a bundle merged from this operation's (``promoter merge``)."""

    operation_id: str
    bundle_id: str
    status: str
    code: str | None


class MissingBlobs(TypedDict):
    missing: list[str]


class NotCarried(TypedDict):
    """A part of the review asked for that the answer does not carry: the error reading
    it met (its stable code and detail); its own request reads it."""

    part: CarriedPart
    code: str
    detail: str


class OperationAccepted(TypedDict):
    operation_id: str
    status: str


class OperationList(TypedDict):
    operations: list[OperationSummary]


class OperationSummary(TypedDict):
    operation_id: str
    kind: str
    status: str
    attempt: int
    repository: str | None
    bundle_id: str | None
    code: str | None
    updated_at: str | None


class OperationView(TypedDict):
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
    merged_into: list[MergedOperation]
    current_targets: NotRequired[list[CurrentTarget] | None]
    next: NotRequired[str | None]
    receipt: NotRequired[dict[str, Any] | None]


class OwnerView(TypedDict):
    """Who runs (or last ran) the operation, and whether its owner lease is live."""

    host: str | None
    pid: int | None
    boot: str | None
    lease_until: str | None
    lease_expired: bool


class PathReadBack(TypedDict):
    """One target as the read-back found it, against what the bundle expects."""

    path: str
    operation: str
    expected_old: dict[str, Any]
    expected_new: dict[str, Any]
    actual: dict[str, Any] | None
    index_expected: list[IndexEntryState]
    index_actual: list[IndexEntryState]
    verdict: Literal["old", "new", "neither", "drift", "unsafe"]
    reasons: list[str]


class Preflight(TypedDict):
    """The engine's preflight: the checks so far, and the read-back report once it ran."""

    bundle_id: str
    status: Literal["passed", "refused"]
    code: str | None
    detail: str
    checks: PreflightChecks
    error: NotRequired[dict[str, Any] | None]
    repository: NotRequired[RepositoryReadBack | None]
    paths: NotRequired[list[PathReadBack] | None]
    drifted: NotRequired[list[str] | None]
    unsafe: NotRequired[list[str] | None]


class PreflightCheck(TypedDict):
    ok: bool


class PreflightChecks(TypedDict):
    """The checks that ran, in their order: each passed, or the last the refusal's (failed);
    one that did not run is not listed."""

    authority: NotRequired[PreflightCheck | None]
    evidence: NotRequired[PreflightCheck | None]


class PromotedWithEvidence(TypedDict):
    """The stored bundle, its passed verification receipt and the promotion: its final
    view once it ended (200, with ``wait``), else its id and status (202); asked for, the
    bundle's first diff page and the promotion receipt (each left out otherwise), and
    each one asked for that could not be read, with why (``not_carried``)."""

    bundle_id: str
    bundle_sha256: str
    verification_receipt: dict[str, Any]
    operation: OperationView | OperationAccepted
    diff: NotRequired[dict[str, Any] | None]
    receipt: NotRequired[dict[str, Any] | None]
    not_carried: NotRequired[list[NotCarried] | None]


class ReadBackReport(TypedDict):
    """Step 4's findings: HEAD, branch and tree, then every target."""

    repository: RepositoryReadBack
    paths: list[PathReadBack]
    drifted: list[str]
    unsafe: list[str]


class Readiness(TypedDict):
    status: Literal["ready", "not_ready"]
    checks: ReadyChecks
    reason: NotRequired[str | None]


class ReadyChecks(TypedDict):
    database: bool
    state_dir_writable: bool
    host_active: bool


class RepositoryApproval(TypedDict):
    """A repository's approval setting in force and where it comes from."""

    name: str
    repository_identity: str
    approval: Literal["none", "required"]
    source: Literal["config", "ledger"]
    set_by: str | None
    set_at: str | None


class RepositoryInfo(TypedDict):
    name: str
    repository_identity: str
    worktree: str
    branch: str | None
    head: str | None


class RepositoryList(TypedDict):
    repositories: list[RepositoryInfo]
    host_id: str
    cluster: NotRequired[list[GuardedRepository] | None]


class RepositoryReadBack(TypedDict):
    branch: Expectation
    head: Expectation
    tree: Expectation


class RunOpened(TypedDict):
    grant: GrantRegistered
    grant_created: bool
    lease: LeaseSet
    token: ExecutorToken


class Snapshot(TypedDict):
    tree: str
    label: str
    captured_at: str


class SnapshotDiff(TypedDict):
    added: list[str]
    modified: list[str]
    deleted: list[str]
    unified_diff: str
    truncated: bool


class SnapshotList(TypedDict):
    snapshots: list[Snapshot]


class Step(TypedDict):
    seq: int
    path: str
    operation: str
    status: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    detail: str | None


class TracePath(TypedDict):
    path: str
    change: TraceChange | None
    exists: bool | None
    sha256: str | None
    mode: str | None
    verdict: TraceVerdict
    promotions: list[TracePromotion]
    last_promotion: TracePromotion | None


class TracePromotion(TypedDict):
    operation_id: str
    status: str
    bundle_id: str
    grant_id: str
    executor_run_id: str | None
    promoted_at: str
    receipt_sha256: str


class TraceReport(TypedDict):
    repository: str
    commit: str | None
    parent: str | None
    paths: list[TracePath]


class UnseenFileView(TypedDict):
    """A file this answer does not show in full, and how to reach it."""

    path: str
    path_shown: str
    operation: str
    old_bytes: int | None
    new_bytes: int | None
    diff_bytes: int | None
    added: int | None
    removed: int | None
    flags: list[DiffFlag]
    shown: Shown
    summarized: bool
    cursor: str | None


class WorktreeChanges(TypedDict):
    generation: str
    clock: int
    paths: list[str] | None
    reason: str
