"""Request models of the HTTP API, and ``parse`` for request bodies.

The path parameters' types are in ``promoter.api.params``: they need FastAPI, which the
client (``promoter.client.sync``, every CLI command that talks to a daemon) does not import.

Request models are strict pydantic models that reject unknown fields and coerce nothing
(a ``true`` is no integer, ``1.0`` no fence): they replace the routes' hand-written body
checks with the same outcome, ``validation_failed`` (422). Bodies still arrive through
``promoter.api.deps`` (size and JSON-shape bounds while streaming, then parsing); only
the parsed value is validated here. Grants, bundles and leases are validated by the
engine's wire models (``promoter.domain.models``), which the OpenAPI document references
for their bodies.

Not here: the response models, which a client reads as well (``promoter.domain.views``).
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


MAX_POSITIONS = 8  # the start baselines the command line keeps a worktree (one a generation)


class WatchPosition(Request):
    generation: str = Field(
        pattern=r"^[0-9a-f]{16}$",
        description="the watch generation of an earlier answer",
        examples=["9f86d081884c7d65"],
    )
    clock: Annotated[int, Field(ge=0, le=2**62)] = Field(description="the clock of that answer")


class ChangesRequest(Request):
    generation: str = Field(
        default="",
        pattern=r"^(?:[0-9a-f]{16})?$",
        description="the watch generation of an earlier answer; empty: none (one position; "
        "`positions` names several)",
        examples=["9f86d081884c7d65"],
    )
    clock: Annotated[int, Field(ge=0, le=2**62)] = Field(
        default=0, description="the clock of that answer"
    )
    positions: Annotated[list[WatchPosition], Field(max_length=MAX_POSITIONS)] = Field(
        default_factory=list,
        description="every position the asker holds, one a generation (each worker of the "
        "daemon has its own watch and answers for the position of its generation); a "
        "generation named twice is refused",
    )

    @model_validator(mode="after")
    def _one_position_a_generation(self) -> ChangesRequest:
        named = [p.generation for p in self.positions]
        if self.generation:
            named.append(self.generation)
        if len(set(named)) != len(named):
            raise ValueError("a generation is named more than once")
        return self

    def held(self) -> dict[str, int]:
        """The positions asked with, generation: clock."""
        found = {p.generation: p.clock for p in self.positions}
        if self.generation:
            found[self.generation] = self.clock
        return found


class RestoreRequest(Request):
    expected_current_tree: str = Field(
        description="the tree the worktree must be at now (40 hex)", examples=["0" * 40]
    )


class BlobsMissingRequest(Request):
    sha256: Annotated[list[Sha256], Field(max_length=MAX_DIGESTS)]


class RepositoryApprovalRequest(Request):
    """``promoter repos set NAME --approval``: the setting in force from now on."""

    approval: Literal["none", "required"]


class FenceRequest(Request):
    to: str = Field(
        min_length=1, max_length=200, description="the daemon host that takes the operations over"
    )
