"""Operation statuses and the one guard that decides whether an operation may move.

This module owns the vocabulary of operation statuses (protocol: promotion#operation-states)
and ``guard``, the single rule (protocol: recovery#guards) that every entry point which
restarts or decides an existing operation goes through, for every kind (promotion,
rollback, restore) and every caller (the orchestrator's ``recover``, the operator's
``recover`` and ``reconcile``, the daemon's own start-up recovery):

- ``recover`` acts only on ``needs_recovery``. Anything else is refused with
  ``not_recoverable`` (409): ``needs_reconciliation`` waits for the operator's
  ``reconcile``; a final operation never runs again; a running one is running. The state
  is judged before the role, so asking to recover a finished operation always answers
  the same code. A rollback or a restore is the operator's own operation: its recovery
  needs the operator (or the daemon at start-up), never an orchestrator (``forbidden``).
- ``reconcile`` is the operator's (``forbidden`` otherwise) and acts only on
  ``needs_reconciliation`` (``operation_conflict`` otherwise), with the decisions the
  kind admits: a promotion ``continue``, ``rollback`` or ``abandon``; a rollback or a
  restore ``continue`` or ``abandon`` (a restore is undone by restoring its ``from``
  tree, not rolled back).

The statuses, kinds and step statuses are ``StrEnum``s (``OperationStatus``,
``OperationKind``, ``StepStatus``; each member equals its wire string), and the moves an
operation may make are data: ``TRANSITIONS[kind][from]`` is the set of statuses it may
move to (``None`` is "not yet journaled"). ``check_transition`` is what the journal calls
on every status change, and refuses anything else (``operation_conflict``); keeping the
status and changing only the code or detail is always allowed. The seed's names map
onto it one to one: ``applied_unverified`` (written, the check still running),
``completed`` (receipt recorded), ``awaiting_approval`` (a promotion the approval gate
holds until the operator decides; nothing written), ``rolled_back`` / ``rollback_partial`` /
``rollback_failed`` (a promotion after its rollback, and the rollback itself).

Deliberately not here: loading operations, locking, and carrying a decision out (that is
``promoter.engine.operation.recover``'s); the guard is pure and raises, it never writes. Callers
re-check under the repository lock or in the transaction that changes the status, since
the status may move between the first check and the action.
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
