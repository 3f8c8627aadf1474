"""Typed records the store hands the engine: what the journal says, as plain frozen values.

``Ticket`` is what one promotion attempt decides on, read in the transaction that started
the attempt (the request, or the operator's approval), so the attempt itself does not go
back to the store before it journals its plan. ``Operation`` and ``Step`` are the
journal's rows as values (``promoter.store.journal`` and ``promoter.store.step_rows``
convert them); the engine reads them, and changes the journal only through the store's
functions.

Deliberately not here: database rows (``promoter.store.tables`` keeps them inside the
store), and anything that reads or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from promoter.domain.models import GrantV1, LeaseV1, PatchBundleV1
from promoter.domain.path_state import State
from promoter.domain.status import OperationKind, OperationStatus, StepStatus

__all__ = ["Attempt", "Operation", "Step", "Ticket"]


@dataclass(frozen=True)
class Ticket:
    """One promotion attempt to run: the operation, its attempt, and what it decides on.

    ``lease`` is the grant stage's lease as read when the attempt was started (None: none
    was set); the attempt checks it first (protocol: promotion#step-authority) and reads it again,
    locked, in the transaction that journals its plan. ``loaded``: the bundle and grant as the
    request that started the attempt had just read them from the store (None: the attempt
    reads them); the attempt re-verifies them either way.
    """

    operation_id: str
    attempt: int
    fence: int
    bundle_id: str
    verification_receipt_sha256: str
    lease: LeaseV1 | None
    loaded: tuple[PatchBundleV1, GrantV1] | None = None


@dataclass(frozen=True)
class Operation:
    """An operation as journaled: identity, binding, status, owner, receipt and events."""

    operation_id: str
    kind: OperationKind
    status: OperationStatus
    attempt: int
    repository_identity: str
    repository_name: str
    grant_id: str | None
    bundle_id: str | None
    grant_sha256: str | None
    bundle_sha256: str | None
    verification_receipt_sha256: str | None
    parent_operation_id: str | None
    fence: int | None
    code: str | None
    detail: str | None
    report: dict[str, Any] | None
    owner_pid: int | None
    owner_start: str | None
    owner_boot: str | None
    owner_host: str | None
    owner_lease_until: str | None
    receipt_sha256: str | None
    receipt: dict[str, Any] | None
    # the events of the current attempt that a receipt names (protocol: bundles#promotion-receipt
    # ``events``)
    decision_event_id: str | None
    action_event_id: str | None
    outcome_event_id: str | None
    pre_snapshot: str | None
    post_snapshot: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class Attempt:
    """One attempt of an operation and how it ended (``ended_at`` None: still running)."""

    attempt: int
    status: OperationStatus
    code: str | None
    detail: str | None
    started_at: str
    ended_at: str | None


@dataclass(frozen=True)
class Step:
    """One journaled step: a path, the operation on it, its old and new states as
    journaled (the wire JSON, which keeps a bundle state's size and blob reference)."""

    seq: int
    path: str
    operation: str
    old_state: dict[str, Any]
    new_state: dict[str, Any]
    status: StepStatus
    temp_name: str | None
    detail: str | None

    @property
    def old(self) -> State:
        return State.of(self.old_state)

    @property
    def new(self) -> State:
        return State.of(self.new_state)
