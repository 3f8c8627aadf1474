"""Wire documents as strict, frozen pydantic models (protocol: documents#strict-models).

Every model rejects unknown fields and coerces nothing. Formats (digests, oids, modes,
timestamps) and the internal consistency of a ``FileState`` are enforced at parse time.
Cross-field invariants of a bundle (hash, counts, order, path rules, operation/state
agreement) are deliberately *not* enforced here: they are checks of the verification
receipt (protocol: bundles#verification-receipt), which must report all of them at once instead of
stopping at the first. ``promoter.domain.documents`` adds hashing and ids on top of these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from promoter.domain.wire_formats import blob_path as blob_path  # re-exported: its old home
from promoter.domain.wire_formats import check_timestamp

HEX64 = r"^[0-9a-f]{64}$"
HEX40 = r"^[0-9a-f]{40}$"

Sha256 = Annotated[str, StringConstraints(pattern=HEX64)]
Oid = Annotated[str, StringConstraints(pattern=HEX40)]
GitMode = Literal["100644", "100755", "120000"]  # 120000: a symlink, its target text the blob
SymlinkPolicy = Literal["none", "inside", "any"]
IndexMode = Annotated[str, StringConstraints(pattern=r"^(100644|100755|120000|160000)$")]
SafeInt = Annotated[int, Field(ge=0, lt=2**53)]
NAME_PATTERN = r"^[A-Za-z0-9_.:-]+$"
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NAME_PATTERN)]
BundleId = Annotated[str, StringConstraints(pattern=r"^bnd_[0-9a-f]{32}$")]
RepoIdentity = Annotated[str, StringConstraints(pattern=r"^repo_[0-9a-f]{32}$")]
OperationId = Annotated[str, StringConstraints(pattern=r"^op_[0-9a-f]{32}$")]
EventId = Annotated[str, StringConstraints(pattern=r"^evt_[0-9a-f]{32}$")]
Operation = Literal["create", "modify", "delete"]

Timestamp = Annotated[str, AfterValidator(check_timestamp)]
# Paths are checked by the verification's path_policy check, not at parse time, so that
# a receipt can report every broken path; here they only need to be bounded strings.
# The bound admits the wire form (protocol: documents#byte-paths) of the longest path, 4096 bytes
# that are not UTF-8, each written as four characters ``\xNN``.
WirePath = Annotated[str, StringConstraints(max_length=16384)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def wire(self) -> dict[str, Any]:
        """The JSON document (every field, nulls included)."""
        return self.model_dump(mode="json")


class Document(Strict):
    """A top-level document: its ``schema`` field is aliased (``schema_`` in Python)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class BlobRef(Strict):
    # Where a state's blob lives. ``FileState`` requires ``path == blob_path(sha256)``:
    # checked there, one validator call per state instead of one more per reference (and
    # a comment, not a docstring, so the published schemas keep their bytes).
    path: str
    sha256: Sha256


class FileState(Strict):
    exists: bool
    sha256: Sha256 | None
    mode: GitMode | None
    bytes: SafeInt | None
    blob_ref: BlobRef | None

    @model_validator(mode="after")
    def _consistent(self) -> FileState:
        # plain comparisons, no tuple or generator: this runs twice per change of a bundle
        ref = self.blob_ref
        if self.exists:
            if ref is None or self.sha256 is None or self.mode is None or self.bytes is None:
                raise ValueError("an existing FileState needs sha256, mode, bytes and blob_ref")
            if ref.sha256 != self.sha256:
                raise ValueError("blob_ref.sha256 must equal sha256")
            if ref.path != blob_path(ref.sha256):
                raise ValueError("blob_ref.path must be blobs/sha256/<hex[0:2]>/<hex>")
        elif (
            ref is not None
            or self.sha256 is not None
            or self.mode is not None
            or self.bytes is not None
        ):
            raise ValueError("a missing FileState has null sha256, mode, bytes and blob_ref")
        return self

    @classmethod
    def missing(cls) -> FileState:
        return cls(exists=False, sha256=None, mode=None, bytes=None, blob_ref=None)

    @classmethod
    def of(cls, sha256: str, mode: str, size: int) -> FileState:
        ref = BlobRef(path=blob_path(sha256), sha256=sha256)
        return cls(exists=True, sha256=sha256, mode=mode, bytes=size, blob_ref=ref)  # type: ignore[arg-type]

    def same_content(self, other: StateSpec | FileState) -> bool:
        return (self.exists, self.sha256, self.mode) == (other.exists, other.sha256, other.mode)


class Change(Strict):
    path: WirePath
    operation: Operation
    old: FileState
    new: FileState


class StateSpec(Strict):
    """The old state a precondition names: no size, no blob reference."""

    exists: bool
    sha256: Sha256 | None
    mode: GitMode | None

    @model_validator(mode="after")
    def _consistent(self) -> StateSpec:
        if self.exists != (self.sha256 is not None) or self.exists != (self.mode is not None):
            raise ValueError("exists=true needs sha256 and mode; exists=false needs neither")
        return self


class IndexSpec(Strict):
    mode: IndexMode
    oid: Oid
    stage: Annotated[int, Field(ge=0, le=3)]


class Precondition(Strict):
    path: WirePath
    old: StateSpec
    index: IndexSpec | None


class AllowEntry(Strict):
    pattern: Annotated[str, StringConstraints(min_length=1, max_length=4096)]
    operations: Annotated[list[Operation], Field(min_length=1)]


class Limits(Strict):
    max_changes: Annotated[int, Field(ge=0, lt=2**53)]
    max_total_bytes: Annotated[int, Field(ge=0, lt=2**53)]


class GrantV1(Document):
    schema_: Literal["GrantV1"] = Field(alias="schema")
    grant_sha256: Sha256 | None = None
    grant_id: Name
    repository_identity: RepoIdentity
    branch: Annotated[str, StringConstraints(pattern=r"^refs/heads/[^\x00-\x20\x7f~^:?*\[\\]+$")]
    base_commit: Oid
    base_tree: Oid
    executor_run_id: Name
    workflow_id: Name
    stage: Name
    attempt: SafeInt
    generation: SafeInt
    resume_epoch: SafeInt
    fence: SafeInt
    not_before: Timestamp
    expires_at: Timestamp
    write_allowlist: list[AllowEntry]
    target_preconditions: list[Precondition]
    limits: Limits
    symlinks: SymlinkPolicy = "none"
    # Optional since v1.2, and left out of the wire (and so of the hash) when unset, so
    # grants written before them keep their bytes: ``approval`` holds every promotion for
    # the operator's decision; ``base_operation`` chains the grant on a completed promotion.
    approval: Literal["required"] | None = None
    base_operation: OperationId | None = None

    def wire(self) -> dict[str, Any]:
        """The document; ``symlinks``, ``approval`` and ``base_operation`` only when set
        (not the default), so v1 hashes stay."""
        document = _without_unset(super().wire(), GRANT_OPTIONAL)
        if document.get("symlinks") == "none":
            del document["symlinks"]
        return document


GRANT_OPTIONAL = ("approval", "base_operation")


def _without_unset(document: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if not (k in names and v is None)}


class LeaseV1(Strict):
    run_id: Name
    attempt: SafeInt
    generation: SafeInt
    resume_epoch: SafeInt
    fence: SafeInt
    expires_at: Timestamp


HunkIndex = Annotated[int, Field(ge=1, lt=2**31)]


class ComposedPath(Strict):
    """A path of a derived bundle whose new bytes the operator composed from chosen hunks
    (numbered from 1 as in the review diff of the parent bundle)."""

    path: WirePath
    hunks: Annotated[list[HunkIndex], Field(min_length=1)]
    by: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class DerivedFrom(Strict):
    """What a host-derived bundle was cut from: the parent bundle and the selection."""

    parent_bundle_id: BundleId
    parent_bundle_sha256: Sha256
    declined_paths: list[WirePath]
    composed: list[ComposedPath]


class MergedPath(Strict):
    # One path of a merged bundle: the three inputs of its three-way merge, by sha256.
    # ``old_sha256`` the original bundle's old state (the merge base), ``current_sha256``
    # the person's bytes found in the worktree, ``new_sha256`` the original's new state.
    path: WirePath
    old_sha256: Sha256
    current_sha256: Sha256
    new_sha256: Sha256


class MergeOrigin(Strict):
    # What a merged bundle (protocol: runs#merges-are-new-bundles) was made from: the original
    # bundle and, per merged path, the three input hashes. Part of the bundle's identity.
    bundle_id: BundleId
    bundle_sha256: Sha256
    paths: Annotated[list[MergedPath], Field(min_length=1, max_length=1_000_000)]


class PatchBundleV1(Document):
    schema_: Literal["PatchBundleV1"] = Field(alias="schema")
    bundle_id: BundleId
    bundle_sha256: Sha256
    grant_id: Name
    grant_sha256: Sha256
    executor_run_id: Name
    repository_identity: RepoIdentity
    base_commit: Oid
    base_tree: Oid
    changes: Annotated[list[Change], Field(max_length=1_000_000)]
    change_count: SafeInt
    total_bytes: SafeInt
    created_at: Timestamp
    # Set only in a bundle the host derived from a stored one at review (a part of it
    # accepted); left out of the wire when unset, so executor bundles keep their bytes.
    # Intake refuses any submitted document that carries it.
    derived_from: DerivedFrom | None = None
    # set only on a bundle the host made by merging a drifted bundle
    # (protocol: runs#merges-are-new-bundles); left out of the wire when unset, so every other
    # bundle keeps its v1 bytes and hash
    merge: MergeOrigin | None = None

    def wire(self) -> dict[str, Any]:
        return _without_unset(super().wire(), ("derived_from", "merge"))


CheckName = Literal[
    "manifest_integrity",
    "blob_integrity",
    "grant_binding",
    "path_policy",
    "limits",
    "allowlist",
    "preconditions",
]
CHECK_ORDER: tuple[CheckName, ...] = get_args(CheckName)  # the checks, in the order they run


class Check(Strict):
    name: CheckName
    status: Literal["passed", "failed"]
    evidence_sha256: Sha256
    detail: str


class PatchVerificationReceiptV1(Document):
    schema_: Literal["PatchVerificationReceiptV1"] = Field(alias="schema")
    receipt_sha256: Sha256
    bundle_id: BundleId
    bundle_sha256: Sha256
    grant_id: Name
    grant_sha256: Sha256
    executor_run_id: Name
    repository_identity: RepoIdentity
    status: Literal["passed", "failed"]
    checks: list[Check]


class Target(Strict):
    path: WirePath
    exists: bool
    sha256: Sha256 | None
    mode: GitMode | None


class PromotionEvents(Strict):
    decision: EventId
    action: EventId
    outcome: EventId


class PatchPromotionReceiptV1(Document):
    schema_: Literal["PatchPromotionReceiptV1"] = Field(alias="schema")
    receipt_sha256: Sha256
    operation_id: OperationId
    repository_identity: RepoIdentity
    grant_id: Name
    grant_sha256: Sha256
    bundle_id: BundleId
    bundle_sha256: Sha256
    verification_receipt_sha256: Sha256
    targets: list[Target]
    events: PromotionEvents
    promoted_at: Timestamp
    # the promotion this one was chained on (the grant's ``base_operation``); left out of
    # the wire when unset, so receipts of unchained promotions keep the v1 shape
    base_operation: OperationId | None = None
    # A promotion of a derived bundle (part of a bundle accepted at review) names the
    # parent bundle, the paths declined and the operator-composed paths; left out of the
    # wire when unset.
    parent_bundle_id: BundleId | None = None
    declined_paths: list[WirePath] | None = None
    composed: list[ComposedPath] | None = None

    def wire(self) -> dict[str, Any]:
        return _without_unset(super().wire(), RECEIPT_OPTIONAL)


RECEIPT_OPTIONAL = ("base_operation", "parent_bundle_id", "declined_paths", "composed")


class ActualState(Strict):
    """A FileState without ``blob_ref``, plus the kind of entry: what a path was found to be.

    ``exists`` is true for anything at the path (a directory, a symlink or a special file
    too); ``sha256``/``mode``/``bytes`` are set for regular files only. ``kind`` is always
    written since v1.1 and optional only so that earlier receipts still verify.
    """

    kind: Literal["missing", "file", "directory", "symlink", "special"] | None = None
    exists: bool
    sha256: Sha256 | None
    mode: GitMode | None
    bytes: SafeInt | None


class TargetError(Strict):
    """Why a target could not be restored: the stable code, the errno when there is one."""

    code: str = Field(min_length=1, max_length=60)
    errno: SafeInt | None
    detail: str = Field(max_length=500)


class RollbackTarget(Strict):
    """One target of a rollback (protocol: bundles#rollback-receipt).

    ``result`` is what happened (``failed``: not restored for a reason other than a
    conflict); ``reason`` says why; ``error`` is set for every ``failed`` target (and for
    a conflict found after a failed write); ``actual`` is null when the path could not be
    read at all, never a made-up "missing". ``reason`` and ``error`` are always written
    since v1.1 and optional only so that earlier receipts still verify.
    """

    path: WirePath
    result: Literal["restored", "already_old", "conflict", "failed"]
    reason: (
        Literal[
            "restored", "already_old", "conflict", "io_error", "unsafe", "storage_error", "error"
        ]
        | None
    ) = None
    error: TargetError | None = None
    actual: ActualState | None


class RollbackReceiptV1(Document):
    schema_: Literal["RollbackReceiptV1"] = Field(alias="schema")
    receipt_sha256: Sha256
    operation_id: OperationId
    status: Literal["rolled_back", "rollback_partial", "rollback_failed"]
    targets: list[RollbackTarget]
    removed_directories: list[WirePath]
    rolled_back_at: Timestamp


class DsseSignature(Strict):
    keyid: str
    sig: str


class DsseEnvelope(Strict):
    payloadType: str  # noqa: N815 - the DSSE wire name
    payload: str
    signatures: list[DsseSignature]


WIRE_MODELS: dict[str, type[BaseModel]] = {
    "FileState": FileState,
    "Change": Change,
    "GrantV1": GrantV1,
    "LeaseV1": LeaseV1,
    "PatchBundleV1": PatchBundleV1,
    "PatchVerificationReceiptV1": PatchVerificationReceiptV1,
    "PatchPromotionReceiptV1": PatchPromotionReceiptV1,
    "RollbackReceiptV1": RollbackReceiptV1,
    "DsseEnvelope": DsseEnvelope,
}
