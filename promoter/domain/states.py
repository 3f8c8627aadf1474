"""Operation statuses and the one guard that decides whether an operation may move.

This module owns the vocabulary of operation statuses (SPEC §5.3 with the v1.1 additions
of §10.5) and ``guard``, the single rule of SPEC §10.3 that every entry point which
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

Deliberately not here: loading operations, locking, and carrying a decision out (that is
``promoter.engine.recover``'s); the guard is pure and raises, it never writes. Callers
re-check under the repository lock or in the transaction that changes the status, since
the status may move between the first check and the action.
"""

from __future__ import annotations

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
    "Action",
    "guard",
]

Action = Literal["recover", "reconcile"]

KINDS = ("promotion", "rollback", "restore")
ROLES = ("executor", "orchestrator", "operator", "host")  # host: the daemon itself
RUNNING = frozenset({"in_progress", "applied_unverified"})
FINAL = frozenset(
    {"completed", "refused", "rolled_back", "rollback_partial", "rollback_failed", "abandoned"}
)
STATUSES = (
    "in_progress",
    "applied_unverified",
    "needs_recovery",
    "needs_reconciliation",
    *sorted(FINAL),
)
OPERATOR_KINDS = frozenset({"rollback", "restore"})
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
