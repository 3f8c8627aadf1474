"""Plain records of the executor's bundle path: file states, changes and a read grant.

``StateRecord`` and ``ChangeRecord`` hold what ``FileState`` and ``Change`` hold and give
the same ``wire()`` documents; ``GrantRecord`` is a grant document the validator
(``promoter.domain.wirecheck``) accepted, with the attributes the builder reads of a
``GrantV1`` and its ``wire()`` form (defaults filled, optional members left out as the
model leaves them), so the grant's hash is the model's. No pydantic: ``bundle build``
reads a grant file and builds a bundle without loading it (protocol: documents#file-state).

They validate nothing themselves: a state is made from values git computed, a grant only
from a document the validator accepted (``grant_record``), and the sealed bundle is
checked whole before it leaves (``promoter.executor.builder.seal_changes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from promoter.domain.record_type import record
from promoter.domain.wire_formats import blob_path

if TYPE_CHECKING:
    from promoter.domain.models import GrantV1

__all__ = [
    "AllowRecord",
    "ChangeRecord",
    "GrantRecord",
    "LimitsRecord",
    "PreconditionRecord",
    "SpecRecord",
    "StateLike",
    "StateRecord",
    "grant_record",
]


class StateLike(Protocol):
    """What a state is compared by: a ``StateRecord``, a ``FileState`` or a ``StateSpec``."""

    @property
    def exists(self) -> bool: ...

    @property
    def sha256(self) -> str | None: ...

    @property
    def mode(self) -> str | None: ...


@record(frozen=True, slots=True)
class StateRecord:
    """A file's state in a bundle: ``FileState``'s fields, its blob reference derived."""

    exists: bool
    sha256: str | None
    mode: str | None
    bytes: int | None

    @classmethod
    def missing(cls) -> StateRecord:
        return _MISSING

    @classmethod
    def of(cls, sha256: str, mode: str, size: int) -> StateRecord:
        return cls(True, sha256, mode, size)

    @classmethod
    def from_state(cls, state: StateLike | StateRecord) -> StateRecord:
        """The record of a ``FileState`` (a chained grant's base, as the client reads it)."""
        if isinstance(state, StateRecord):
            return state
        size: int | None = getattr(state, "bytes", None)
        return cls(state.exists, state.sha256, state.mode, size)

    def same_content(self, other: StateLike) -> bool:
        return (self.exists, self.sha256, self.mode) == (other.exists, other.sha256, other.mode)

    def wire(self) -> dict[str, Any]:
        """``FileState.wire()`` of the same state, member for member."""
        ref = None
        if self.sha256 is not None:
            ref = {"path": blob_path(self.sha256), "sha256": self.sha256}
        return {
            "exists": self.exists,
            "sha256": self.sha256,
            "mode": self.mode,
            "bytes": self.bytes,
            "blob_ref": ref if self.exists else None,
        }


_MISSING = StateRecord(False, None, None, None)


@record(frozen=True, slots=True)
class ChangeRecord:
    """One change of a bundle: ``Change``'s fields."""

    path: str
    operation: str
    old: StateRecord
    new: StateRecord

    def wire(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "operation": self.operation,
            "old": self.old.wire(),
            "new": self.new.wire(),
        }


@record(frozen=True)
class AllowRecord:
    """One allowlist entry of a grant: a path pattern and the operations it permits."""

    pattern: str
    operations: tuple[str, ...]


@record(frozen=True)
class SpecRecord:
    """The old state a precondition names (``StateSpec``)."""

    exists: bool
    sha256: str | None
    mode: str | None


@record(frozen=True)
class PreconditionRecord:
    """A path of a grant's preconditions and the old state it must be in."""

    path: str
    old: SpecRecord


@record(frozen=True)
class LimitsRecord:
    """A grant's limits: how many changes, how many bytes of new content in all."""

    max_changes: int
    max_total_bytes: int


_OPTIONAL = ("approval", "base_operation")  # ``GRANT_OPTIONAL`` of the models


@record(frozen=True)
class GrantRecord:
    """A grant the validator accepted, as the builder reads it."""

    document: dict[str, Any]
    grant_id: str
    grant_sha256: str | None
    repository_identity: str
    base_commit: str
    base_tree: str
    executor_run_id: str
    fence: int
    symlinks: str
    base_operation: str | None
    write_allowlist: tuple[AllowRecord, ...]
    target_preconditions: tuple[PreconditionRecord, ...]
    limits: LimitsRecord

    def wire(self) -> dict[str, Any]:
        """``GrantV1.wire()`` of the same grant."""
        return dict(self.document)


def grant_record(document: dict[str, Any]) -> GrantRecord:
    """The record of a grant document ``wirecheck.problem("GrantV1", ...)`` accepted."""
    wire = {"grant_sha256": None, **document}
    for name in _OPTIONAL:
        if wire.get(name, 0) is None:
            del wire[name]
    if wire.get("symlinks") == "none":
        del wire["symlinks"]
    limits = wire["limits"]
    return GrantRecord(
        document=wire,
        grant_id=wire["grant_id"],
        grant_sha256=wire["grant_sha256"],
        repository_identity=wire["repository_identity"],
        base_commit=wire["base_commit"],
        base_tree=wire["base_tree"],
        executor_run_id=wire["executor_run_id"],
        fence=wire["fence"],
        symlinks=wire.get("symlinks", "none"),
        base_operation=wire.get("base_operation"),
        write_allowlist=tuple(
            AllowRecord(e["pattern"], tuple(e["operations"])) for e in wire["write_allowlist"]
        ),
        target_preconditions=tuple(
            PreconditionRecord(
                p["path"], SpecRecord(p["old"]["exists"], p["old"]["sha256"], p["old"]["mode"])
            )
            for p in wire["target_preconditions"]
        ),
        limits=LimitsRecord(limits["max_changes"], limits["max_total_bytes"]),
    )


if TYPE_CHECKING:
    from typing import TypeAlias

    Grant: TypeAlias = "GrantV1 | GrantRecord"
    """What the builder reads a grant as: the model, or the record of a checked document."""
