"""How a rollback reports each target and sums them up (protocol: recovery#rollback,
bundles#rollback-receipt).

``target_report`` turns what happened to one target (a reason, the leaf read back, the
error) into the receipt's target: ``result`` (``restored``, ``already_old``, ``conflict``
or ``failed``), ``reason``, ``error`` (code, errno, detail) and ``actual``; ``reason_of``
names the reason an error stands for; ``rollback_status`` sums the targets up.
Deliberately not here: reading or writing anything, the journal (``operation.rollback``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from promoter.domain.models import ActualState, RollbackTarget, TargetError
from promoter.domain.path_state import observed
from promoter.domain.status import OperationStatus
from promoter.errors import PathUnsafe, PromoterError, TargetDrift, WriteFailed
from promoter.fs.chain import LeafState


class Reason(StrEnum):
    """Why a target ended as it did (the receipt's ``reason``)."""

    RESTORED = "restored"
    ALREADY_OLD = "already_old"
    CONFLICT = "conflict"
    IO_ERROR = "io_error"
    UNSAFE = "unsafe"
    STORAGE_ERROR = "storage_error"
    ERROR = "error"


AT_OLD = frozenset({Reason.RESTORED, Reason.ALREADY_OLD})
Outcome = tuple[Reason, LeafState | None, PromoterError | OSError | None]


def _actual(leaf: LeafState | None) -> ActualState | None:
    """What the path read back as, with its kind; None when it could not be read at all."""
    return None if leaf is None else ActualState.model_validate(observed(leaf, leaf.size))


def reason_of(exc: PromoterError | OSError) -> Reason:
    """Why a target could not be restored, from the error that stopped it."""
    if isinstance(exc, TargetDrift):
        return Reason.CONFLICT
    if isinstance(exc, PathUnsafe):
        return Reason.UNSAFE
    if isinstance(exc, OSError) or (isinstance(exc, WriteFailed) and _errno(exc) is not None):
        return Reason.IO_ERROR
    if exc.code in ("storage_error", "blob_missing", "blob_hash_mismatch"):
        return Reason.STORAGE_ERROR
    return Reason.ERROR


def _errno(exc: PromoterError | OSError) -> int | None:
    value = exc.errno if isinstance(exc, OSError) else exc.context.get("errno")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error(exc: PromoterError | OSError | None) -> TargetError | None:
    if exc is None:
        return None
    if isinstance(exc, OSError):
        return TargetError(code="write_failed", errno=exc.errno, detail=str(exc)[:500])
    return TargetError(code=exc.code, errno=_errno(exc), detail=exc.detail[:500])


_RESULTS: dict[Reason, Literal["restored", "already_old", "conflict", "failed"]] = {
    Reason.RESTORED: "restored",
    Reason.ALREADY_OLD: "already_old",
    Reason.CONFLICT: "conflict",
}  # every other reason is the result ``failed``


def target_report(path: str, reason: Reason, leaf: LeafState | None, exc: Any) -> RollbackTarget:
    """One target of the receipt: what happened, why, the error, what was read back."""
    return RollbackTarget(
        path=path,
        result=_RESULTS.get(reason, "failed"),
        reason=reason.value,
        error=None if reason in AT_OLD else _error(exc),
        actual=_actual(leaf),
    )


def rollback_status(targets: list[RollbackTarget]) -> OperationStatus:
    """``rolled_back`` (every target at old), ``rollback_failed`` (none), else partial."""
    at_old = sum(1 for t in targets if t.result in AT_OLD)
    if at_old == len(targets):
        return OperationStatus.ROLLED_BACK
    if at_old == 0:
        return OperationStatus.ROLLBACK_FAILED
    return OperationStatus.ROLLBACK_PARTIAL
