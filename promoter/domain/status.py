"""Operation statuses and the one guard that decides whether an operation may move.

This module owns the statuses, kinds and step statuses (``StrEnum``s equal to their wire
strings: protocol: promotion#operation-states), the moves an operation may make as data
(``TRANSITIONS[kind][from]``, ``None`` for "not yet journaled"), ``check_transition``
(which the journal calls on every status change) and ``guard``, the single rule every
entry point that restarts or decides an existing operation goes through
(protocol: recovery#guards).

Not here: loading operations, locking, carrying a decision out
(``promoter.engine.operation.recover``); the guard is pure and raises, it never writes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from promoter.errors import Forbidden, NotRecoverable, OperationConflict, ValidationFailed

__all__ = [
    "DECISIONS",
    "FINAL",
    "KINDS",
    "OPERATOR_KINDS",
    "ROLES",
    "RUNNING",
    "STATUSES",
    "TRANSITIONS",
    "Action",
    "OperationKind",
    "OperationStatus",
    "StepStatus",
    "check_transition",
    "guard",
]

Action = Literal["recover", "reconcile"]


class OperationKind(StrEnum):
    PROMOTION = "promotion"
    ROLLBACK = "rollback"
    RESTORE = "restore"


class OperationStatus(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    IN_PROGRESS = "in_progress"
    APPLIED_UNVERIFIED = "applied_unverified"
    NEEDS_RECOVERY = "needs_recovery"
    NEEDS_RECONCILIATION = "needs_reconciliation"
    ABANDONED = "abandoned"
    COMPLETED = "completed"
    REFUSED = "refused"
    ROLLBACK_FAILED = "rollback_failed"
    ROLLBACK_PARTIAL = "rollback_partial"
    ROLLED_BACK = "rolled_back"


class StepStatus(StrEnum):
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


S = OperationStatus
KINDS = tuple(OperationKind)
ROLES = ("executor", "orchestrator", "operator", "host")  # host: the daemon itself
RUNNING = frozenset({S.IN_PROGRESS, S.APPLIED_UNVERIFIED})
FINAL = frozenset(
    {S.COMPLETED, S.REFUSED, S.ROLLED_BACK, S.ROLLBACK_PARTIAL, S.ROLLBACK_FAILED, S.ABANDONED}
)
STATUSES = tuple(OperationStatus)
OPERATOR_KINDS = frozenset({OperationKind.ROLLBACK, OperationKind.RESTORE})
ROLLBACK_ENDS = frozenset({S.ROLLED_BACK, S.ROLLBACK_PARTIAL, S.ROLLBACK_FAILED})

# TRANSITIONS[kind][from] = where an operation of that kind may go next (None: new row)
TRANSITIONS: dict[OperationKind, dict[OperationStatus | None, frozenset[OperationStatus]]] = {
    OperationKind.PROMOTION: {
        None: frozenset({S.IN_PROGRESS, S.AWAITING_APPROVAL}),
        # the approval gate: approved starts the attempt, rejected (or expired) refuses it
        S.AWAITING_APPROVAL: frozenset({S.IN_PROGRESS, S.REFUSED}),
        S.IN_PROGRESS: frozenset(
            {S.APPLIED_UNVERIFIED, S.COMPLETED, S.NEEDS_RECONCILIATION, S.NEEDS_RECOVERY, S.REFUSED}
        ),
        S.APPLIED_UNVERIFIED: frozenset(
            {S.COMPLETED, S.NEEDS_RECONCILIATION, S.NEEDS_RECOVERY, *ROLLBACK_ENDS}
        ),
        S.NEEDS_RECOVERY: frozenset({S.IN_PROGRESS}),
        S.NEEDS_RECONCILIATION: frozenset({S.IN_PROGRESS, S.ABANDONED, *ROLLBACK_ENDS}),
        S.COMPLETED: ROLLBACK_ENDS,  # rolled back by the operator
        S.REFUSED: frozenset({S.IN_PROGRESS, S.AWAITING_APPROVAL}),  # a new attempt
    },
    OperationKind.ROLLBACK: {
        None: frozenset({S.IN_PROGRESS}),
        S.IN_PROGRESS: frozenset({S.NEEDS_RECOVERY, S.NEEDS_RECONCILIATION, *ROLLBACK_ENDS}),
        S.NEEDS_RECOVERY: frozenset({S.IN_PROGRESS}),
        S.NEEDS_RECONCILIATION: frozenset({S.IN_PROGRESS, S.ABANDONED}),
    },
    OperationKind.RESTORE: {
        None: frozenset({S.IN_PROGRESS}),
        S.IN_PROGRESS: frozenset(
            {S.COMPLETED, S.REFUSED, S.NEEDS_RECONCILIATION, S.NEEDS_RECOVERY}
        ),
        S.NEEDS_RECOVERY: frozenset({S.IN_PROGRESS}),
        S.NEEDS_RECONCILIATION: frozenset({S.IN_PROGRESS, S.ABANDONED}),
        # the same restore again (same trees) is a new attempt once the last one ended
        S.COMPLETED: frozenset({S.IN_PROGRESS}),
        S.REFUSED: frozenset({S.IN_PROGRESS}),
        S.ABANDONED: frozenset({S.IN_PROGRESS}),
    },
}


def check_transition(kind: str | None, current: str | None, status: str) -> OperationStatus:
    """Return ``status`` as an ``OperationStatus`` if ``kind`` may go there from ``current``.

    Raises ``OperationConflict`` for an unknown kind or status, or a move the table of
    ``TRANSITIONS`` does not hold. Keeping the current status is always allowed.
    """
    try:
        wanted = OperationStatus(status)
        was = None if current is None else OperationStatus(current)
    except ValueError as exc:
        raise OperationConflict(f"unknown operation status {status!r}") from exc
    if was is wanted:
        return wanted
    if was is None and wanted is S.IN_PROGRESS:
        return wanted  # every kind starts here (the kind may not be set yet)
    try:
        allowed = TRANSITIONS[OperationKind(kind or "")].get(was, frozenset())
    except ValueError as exc:
        raise OperationConflict(f"unknown operation kind {kind!r}") from exc
    if wanted not in allowed:
        raise OperationConflict(
            f"a {kind} cannot move from {current} to {status}",
            kind=kind,
            current_status=current,
            status=status,
        )
    return wanted


DECISIONS: dict[str, tuple[str, ...]] = {
    "promotion": ("continue", "rollback", "abandon"),
    "rollback": ("continue", "abandon"),
    "restore": ("continue", "abandon"),
}
_ALL_DECISIONS = frozenset(d for ds in DECISIONS.values() for d in ds)


def guard(
    kind: str,
    status: str,
    action: Action,
    *,
    role: str,
    decision: str | None = None,
    operation_id: str = "",
) -> None:
    """Raise unless ``role`` may ``action`` an operation of ``kind`` in ``status``."""
    if kind not in KINDS:
        raise OperationConflict(f"operation {operation_id} has an unknown kind {kind!r}")
    if action == "recover":
        _guard_recover(kind, status, role, operation_id)
    else:
        _guard_reconcile(kind, status, role, decision, operation_id)


def _guard_recover(kind: str, status: str, role: str, operation_id: str) -> None:
    if status != "needs_recovery":
        if status == "needs_reconciliation":
            why, next_step = "only the operator's reconcile moves it", "reconcile"
        elif status in FINAL:
            why, next_step = "a final operation never runs again", None
        elif status in RUNNING:
            why, next_step = "it is running", "wait"
        else:
            why, next_step = "it is not waiting for recovery", None
        raise NotRecoverable(
            f"{kind} {operation_id} is {status}, not needs_recovery: {why}",
            operation_id=operation_id,
            kind=kind,
            current_status=status,
            next=next_step,
        )
    allowed = (
        {"operator", "host"} if kind in OPERATOR_KINDS else {"orchestrator", "operator", "host"}
    )
    if role not in allowed:
        raise Forbidden(
            f"recovering a {kind} needs the operator role; the token is an {role} token",
            role=role,
            kind=kind,
        )


def _guard_reconcile(
    kind: str, status: str, role: str, decision: str | None, operation_id: str
) -> None:
    if decision not in _ALL_DECISIONS:
        raise ValidationFailed("decision must be continue, rollback or abandon")
    if role != "operator":
        raise Forbidden(
            f"reconcile needs the operator role; the token is an {role} token", role=role
        )
    if status != "needs_reconciliation":
        raise OperationConflict(
            f"operation {operation_id} is {status}, not needs_reconciliation",
            operation_id=operation_id,
            kind=kind,
            current_status=status,
        )
    if decision not in DECISIONS[kind]:
        raise OperationConflict(
            f"a {kind} cannot be reconciled with {decision!r}; "
            f"it takes {' or '.join(DECISIONS[kind])}",
            operation_id=operation_id,
            kind=kind,
            current_status=status,
        )
