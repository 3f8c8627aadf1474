"""The journal (protocol: promotion#operation-states) in the database: operations and attempts.

Functions take an open ``Session`` and return the typed records of
``promoter.domain.records``; every status change goes through the transition table of
``promoter.domain.status`` and is written only from the status first read
(protocol: promotion#status-from-first-read: ``_hold`` keeps the row for the whole
transaction). ``attempt`` is the unit of work of one operation: ``with
journal.attempt(db, op) as j:`` opens one transaction, committed when the block ends and
rolled back on any error; what it committed to a watched operation goes to the
operation's witness then (``promoter.store.witness``). ``read_operation`` reads a row
for a view as plain columns, held by nothing.

Not here: the events (``promoter.store.ledger``), steps and created directories
(``promoter.store.step_rows``), and what a transaction holds (the engine's).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

from sqlalchemy import (
    Connection,
    Integer,
    Row,
    String,
    Table,
    Text,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import flag_modified
from sqlalchemy.orm.exc import StaleDataError

from promoter.domain.records import Attempt, Operation, Step
from promoter.domain.status import OperationKind, OperationStatus, StepStatus, check_transition
from promoter.errors import OperationUnknown
from promoter.store import feed, ledger, step_rows, witness
from promoter.store.db import Database, run
from promoter.store.repo import now
from promoter.store.tables import AttemptRow, OperationRow

Owner = tuple[int, str, str, str, str]  # pid, process start, boot id, host, lease until


def _record(row: OperationRow | Row[Any]) -> Operation:
    return Operation(
        operation_id=row.operation_id,
        kind=OperationKind(row.kind),
        status=OperationStatus(row.status),
        attempt=row.attempt,
        repository_identity=row.repository_identity,
        repository_name=row.repository_name,
        grant_id=row.grant_id,
        bundle_id=row.bundle_id,
        grant_sha256=row.grant_sha256,
        bundle_sha256=row.bundle_sha256,
        verification_receipt_sha256=row.verification_receipt_sha256,
        parent_operation_id=row.parent_operation_id,
        fence=row.fence,
        code=row.code,
        detail=row.detail,
        report=row.report,
        owner_pid=row.owner_pid,
        owner_start=row.owner_start,
        owner_boot=row.owner_boot,
        owner_host=row.owner_host,
        owner_lease_until=row.owner_lease_until,
        receipt_sha256=row.receipt_sha256,
        receipt=row.receipt,
        decision_event_id=row.decision_event_id,
        action_event_id=row.action_event_id,
        outcome_event_id=row.outcome_event_id,
        pre_snapshot=row.pre_snapshot,
        post_snapshot=row.post_snapshot,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


_HELD = "promoter.journal.held"  # session.info: operation id -> its row, held for the session


def _hold(session: Session, row: OperationRow | None) -> OperationRow | None:
    """Keep ``row`` referenced for the session's life (see the module docstring)."""
    if row is not None:
        session.info.setdefault(_HELD, {})[row.operation_id] = row
    return row


def _row(session: Session, operation_id: str) -> OperationRow:
    row = _hold(session, session.get(OperationRow, operation_id))
    if row is None:
        raise OperationUnknown(
            f"operation {operation_id} vanished from the journal", operation_id=operation_id
        )
    return row


def get_operation(session: Session, operation_id: str) -> Operation | None:
    row = _hold(session, session.get(OperationRow, operation_id))
    return None if row is None else _record(row)


# Core, built once: an operation's columns as a plain row, for what only shows it (an
# operation's view): no ORM object is made or held (a status decided on is read with
# ``get_operation`` or ``require``, which hold the row). On the table's own columns, so
# the ORM has no part in running it (the session still flushes first, as for any
# statement): the same SQL as through the mapped class, at about half the cost
_OPERATIONS = cast(Table, OperationRow.__table__)
_ATTEMPT_ROWS = cast(Table, AttemptRow.__table__)
_VIEWED = select(_OPERATIONS).where(
    _OPERATIONS.c.operation_id == bindparam("journal_viewed_id", type_=String())
)


def _param(name: str, column: str) -> Any:
    return bindparam(name, type_=_OPERATIONS.c[column].type)


def read_operation(session: Session | Connection, operation_id: str) -> Operation | None:
    """The operation as stored, read as a plain row (not held: for a view)."""
    found = run(session, _VIEWED, {"journal_viewed_id": operation_id}).first()
    return None if found is None else _record(found)


def read_required(session: Session | Connection, operation_id: str) -> Operation:
    """``read_operation`` of an operation the caller knows exists (not held: nothing is
    decided on it in this transaction)."""
    found = read_operation(session, operation_id)
    if found is None:
        raise OperationUnknown(
            f"operation {operation_id} vanished from the journal", operation_id=operation_id
        )
    return found


def require(session: Session, operation_id: str) -> Operation:
    """The operation, which the caller knows exists."""
    return _record(_row(session, operation_id))


def list_operations(
    session: Session, *, status: str | None = None, repository: str | None = None, limit: int = 500
) -> list[Operation]:
    query = select(OperationRow).order_by(OperationRow.created_at.desc()).limit(limit)
    if status:
        query = query.where(OperationRow.status == status)
    if repository:
        query = query.where(
            (OperationRow.repository_identity == repository)
            | (OperationRow.repository_name == repository)
        )
    return [_record(row) for row in session.scalars(query)]


def owned_by(
    session: Session, owner: Owner, statuses: Iterable[OperationStatus]
) -> list[Operation]:
    """The operations in ``statuses`` whose recorded owner is exactly ``owner``'s process
    (host, pid, process start, boot; the lease is not compared)."""
    pid, start, boot, host, _ = owner
    query = select(OperationRow).where(
        OperationRow.owner_host == host,
        OperationRow.owner_pid == pid,
        OperationRow.owner_start == start,
        OperationRow.owner_boot == boot,
        OperationRow.status.in_([s.value for s in statuses]),
    )
    return [_record(row) for row in session.scalars(query.order_by(OperationRow.operation_id))]


def operations_with_status(session: Session, status: str) -> list[Operation]:
    query = select(OperationRow).where(OperationRow.status == status)
    return [_record(row) for row in session.scalars(query)]


def promotions_of_bundle(session: Session, bundle_id: str) -> list[Operation]:
    """The promotions of one bundle, oldest first."""
    query = select(OperationRow).where(
        OperationRow.bundle_id == bundle_id, OperationRow.kind == OperationKind.PROMOTION.value
    )
    return [_record(row) for row in session.scalars(query.order_by(OperationRow.created_at))]


_MERGED_FROM = (
    select(
        _OPERATIONS.c.operation_id,
        _OPERATIONS.c.bundle_id,
        _OPERATIONS.c.status,
        _OPERATIONS.c.code,
    )
    .where(
        _OPERATIONS.c.bundle_id.in_(ledger.MERGE_BUNDLES.scalar_subquery()),
        _OPERATIONS.c.kind == OperationKind.PROMOTION.value,
    )
    .order_by(_OPERATIONS.c.created_at, _OPERATIONS.c.operation_id)
)


def merged_promotions(
    session: Session | Connection, operation_ids: Collection[str]
) -> list[Row[Any]]:
    """The promotions of the bundles merged from any of ``operation_ids`` (each named by a
    merge's decision event on it) in one query, oldest first, as plain rows of
    ``operation_id``, ``bundle_id``, ``status`` and ``code`` (read only)."""
    if not operation_ids:
        return []
    return list(run(session, _MERGED_FROM, {"ledger_merged_from": list(operation_ids)}))


def receipted_promotions(session: Session, repository_identity: str) -> list[Operation]:
    """The promotions of one repository that hold a promotion receipt, oldest first."""
    query = select(OperationRow).where(
        OperationRow.repository_identity == repository_identity,
        OperationRow.kind == OperationKind.PROMOTION.value,
        OperationRow.receipt_sha256.is_not(None),
    )
    return [_record(row) for row in session.scalars(query.order_by(OperationRow.created_at))]


def create_operation(
    session: Session,
    *,
    operation_id: str,
    kind: OperationKind,
    status: OperationStatus,
    repository_identity: str,
    repository_name: str,
    owner: Owner,
    grant_id: str | None = None,
    bundle_id: str | None = None,
    grant_sha256: str | None = None,
    bundle_sha256: str | None = None,
    verification_receipt_sha256: str | None = None,
    parent_operation_id: str | None = None,
    fence: int | None = None,
    report: dict[str, Any] | None = None,
    pre_snapshot: str | None = None,
) -> None:
    """Add an operation at its first attempt (``flush`` to learn of a concurrent twin)."""
    stamp = now()
    row = OperationRow(
        operation_id=operation_id,
        kind=kind.value,
        repository_identity=repository_identity,
        repository_name=repository_name,
        grant_id=grant_id,
        bundle_id=bundle_id,
        grant_sha256=grant_sha256,
        bundle_sha256=bundle_sha256,
        verification_receipt_sha256=verification_receipt_sha256,
        parent_operation_id=parent_operation_id,
        attempt=1,
        fence=fence,
        report=report,
        pre_snapshot=pre_snapshot,
        created_at=stamp,
        updated_at=stamp,
    )
    row.status = status.value
    _own(row, owner)
    session.add(row)
    _hold(session, row)


# Built once: a new operation's row and its first attempt's, as plain INSERTs (the hot
# path's promotion request; ``start_operation``). The columns the ORM's ``create_operation``
# and ``start_attempt`` leave unset are unset here too, so their defaults are the same.
_CREATED = ("operation_id", "kind", "status", "repository_identity", "repository_name")
_CREATED_TOO = ("grant_id", "bundle_id", "grant_sha256", "bundle_sha256")
_CREATED_ALSO = ("verification_receipt_sha256", "attempt", "fence", "created_at", "updated_at")
_OWNER = ("owner_pid", "owner_start", "owner_boot", "owner_host", "owner_lease_until")
_CREATE = insert(_OPERATIONS).values(
    {c: _param(f"journal_{c}", c) for c in (*_CREATED, *_CREATED_TOO, *_CREATED_ALSO, *_OWNER)}
)
_ATTEMPT_STARTED = insert(_ATTEMPT_ROWS).values(
    operation_id=bindparam("journal_id", type_=String()),
    attempt=bindparam("journal_attempt", type_=Integer()),
    status=bindparam("journal_status", type_=String()),
    started_at=bindparam("journal_started_at", type_=String()),
)


def start_operation(
    session: Session,
    *,
    operation_id: str,
    kind: OperationKind,
    status: OperationStatus,
    repository: tuple[str, str],
    owner: Owner,
    evidence: tuple[str, str | None, str, str, str],
    fence: int | None,
) -> Operation:
    """``create_operation`` of an operation naming its ``evidence`` (grant id, grant sha256,
    bundle id, bundle sha256, verification receipt sha256) and ``start_attempt`` of it,
    as two plain INSERTs: no object is made, held or flushed. A twin already in the table
    raises ``IntegrityError`` here, as ``create_operation``'s flush does; the status goes
    through the transition table and the feed is told, as the ORM's row tells it. The
    operation as written."""
    checked = check_transition(kind.value, None, status.value)
    identity, name = repository
    grant_id, grant_sha256, bundle_id, bundle_sha256, receipt_sha256 = evidence
    pid, start, boot, host, lease_until = owner
    stamp = now()
    values: dict[str, Any] = {
        "operation_id": operation_id,
        "kind": kind.value,
        "status": checked.value,
        "repository_identity": identity,
        "repository_name": name,
        "grant_id": grant_id,
        "bundle_id": bundle_id,
        "grant_sha256": grant_sha256,
        "bundle_sha256": bundle_sha256,
        "verification_receipt_sha256": receipt_sha256,
        "attempt": 1,
        "fence": fence,
        "created_at": stamp,
        "updated_at": stamp,
        "owner_pid": pid,
        "owner_start": start,
        "owner_boot": boot,
        "owner_host": host,
        "owner_lease_until": lease_until,
    }
    run(session, _CREATE, {f"journal_{column}": value for column, value in values.items()})
    run(
        session,
        _ATTEMPT_STARTED,
        {
            "journal_id": operation_id,
            "journal_attempt": 1,
            "journal_status": checked.value,
            "journal_started_at": stamp,
        },
    )
    feed.status_changed(session, operation_id, feed.Written(kind.value, name, checked.value, None))
    return Operation(
        **{**values, "kind": kind, "status": checked},
        parent_operation_id=None,
        code=None,
        detail=None,
        report=None,
        receipt_sha256=None,
        receipt=None,
        decision_event_id=None,
        action_event_id=None,
        outcome_event_id=None,
        pre_snapshot=None,
        post_snapshot=None,
    )


def next_attempt(
    session: Session,
    operation_id: str,
    status: OperationStatus,
    *,
    owner: Owner,
    fence: int | None = None,
    pre_snapshot: str | None = None,
) -> None:
    """Move a refused operation to its next attempt, owned by ``owner``."""
    row = _row(session, operation_id)
    row.attempt += 1
    row.status = status.value
    row.code = row.detail = None
    if fence is not None:
        row.fence = fence
    if pre_snapshot is not None:
        row.pre_snapshot, row.post_snapshot = pre_snapshot, None
    _own(row, owner)
    touch(row)


def _own(row: OperationRow, owner: Owner) -> None:
    pid, start, boot, host, lease_until = owner
    row.owner_pid, row.owner_start, row.owner_boot = pid, start, boot
    row.owner_host, row.owner_lease_until = host, lease_until


def renew_owner_leases(
    session: Session,
    owner: Owner,
    running: Iterable[OperationStatus],
    only: Collection[str] | None = None,
) -> int:
    """Move the owner lease of ``owner``'s operations in ``running`` statuses forward, in
    one statement (of those in ``only``, when given: the ones a thread still runs);
    returns how many."""
    pid, start, boot, host, lease_until = owner
    if only is not None and not only:
        return 0
    query = update(OperationRow).where(
        OperationRow.owner_host == host,
        OperationRow.owner_pid == pid,
        OperationRow.owner_start == start,
        OperationRow.owner_boot == boot,
        OperationRow.status.in_([s.value for s in running]),
    )
    if only is not None:
        query = query.where(OperationRow.operation_id.in_(sorted(only)))
    result = session.execute(
        query.values(owner_lease_until=lease_until).execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def unfinished_of_host(
    session: Session, host: str, statuses: Iterable[OperationStatus]
) -> list[Operation]:
    """The operations ``host`` owns in ``statuses``, oldest first (held for the session)."""
    query = (
        select(OperationRow)
        .where(
            OperationRow.owner_host == host,
            OperationRow.status.in_([s.value for s in statuses]),
        )
        .order_by(OperationRow.created_at, OperationRow.operation_id)
    )
    return [_record(row) for row in session.scalars(query) if _hold(session, row) is not None]


def hand_over(session: Session, operation_id: str, host: str, detail: str) -> None:
    """Give the operation to ``host`` with no owner process and no owner lease, as
    ``needs_recovery`` (code ``host_fenced``): that host's daemon recovers it."""
    row = _row(session, operation_id)
    row.owner_pid = row.owner_start = row.owner_boot = None
    row.owner_host, row.owner_lease_until = host, None
    set_status(
        session, operation_id, OperationStatus.NEEDS_RECOVERY, code="host_fenced", detail=detail
    )


def claim(session: Session, operation_id: str, owner: Owner) -> None:
    """Record ``owner`` (with its owner lease) as the process running the operation."""
    _own(_row(session, operation_id), owner)


def claim_from(
    session: Session, operation_id: str, from_status: OperationStatus, owner: Owner
) -> str | None:
    """Claim the operation for ``owner`` and move it to ``in_progress`` if it is in
    ``from_status``: None when claimed, else the status it is in (nothing changed): the
    status the transaction holds for it (``_hold``), the one the decision was made on, so
    a refusal names what was decided on. The row's status is its version
    (``store.tables``): of two claims racing for the same row, the later one's flush fails
    (``operation_conflict``) on any database."""
    row = _row(session, operation_id)
    if row.status != from_status:
        return str(row.status)
    _own(row, owner)
    set_status(session, operation_id, OperationStatus.IN_PROGRESS)
    return None


def set_status(
    session: Session,
    operation_id: str,
    status: OperationStatus,
    *,
    code: str | None = None,
    detail: str | None = None,
    report: dict[str, Any] | None = None,
) -> None:
    operation = _row(session, operation_id)
    operation.status = status
    operation.code = code
    operation.detail = detail
    if report is not None:
        operation.report = report
    touch(operation)
    attempt = session.get(AttemptRow, (operation.operation_id, operation.attempt))
    if attempt is not None:
        attempt.status = status
        attempt.code = code
        attempt.detail = detail
        if status is not OperationStatus.IN_PROGRESS:
            attempt.ended_at = now()
    ended = witness.Ended(
        operation.kind,
        status,
        code,
        operation.bundle_id,
        operation.repository_name,
        operation.attempt,
    )
    witness.status(session, operation_id, ended)


def touch(row: OperationRow) -> None:
    """Stamp ``updated_at``, always written: the stamp has whole seconds, and an UPDATE
    whose columns depended on whether the second had turned would be compiled anew
    by whichever promotion met the other shape first (the rehearsal's is the model)."""
    row.updated_at = now()
    flag_modified(row, "updated_at")


def set_report(session: Session, operation_id: str, report: dict[str, Any] | None) -> None:
    _row(session, operation_id).report = report


def set_plan_events(session: Session, operation_id: str, decision: str, action: str) -> None:
    """A new plan's ``decision`` and ``action`` events; the last outcome and report are
    the previous attempt's and are cleared."""
    row = _row(session, operation_id)
    row.decision_event_id, row.action_event_id = decision, action
    row.outcome_event_id, row.report = None, None


def set_outcome_event(session: Session, operation_id: str, event_id: str) -> None:
    _row(session, operation_id).outcome_event_id = event_id


def set_receipt(session: Session, operation_id: str, receipt: dict[str, Any], sha256: str) -> None:
    """Record the operation's receipt (recorded once; the caller checks it has none)."""
    row = _row(session, operation_id)
    row.receipt, row.receipt_sha256 = receipt, sha256


def set_snapshot(
    session: Session, operation_id: str, which: Literal["pre", "post"], tree: str
) -> None:
    row = _row(session, operation_id)
    if which == "pre":
        row.pre_snapshot = tree
    else:
        row.post_snapshot = tree


# --- the hot path's writes to an operation, on Core ------------------------------------------
# Built once, the row's changes as plain UPDATEs of an operation read in the same
# transaction (``read_required``): each says ``WHERE status = <the status read>``, as
# the ORM's version check of a held row does (``store.tables``), so a row another request
# or host moved meanwhile is not overwritten (``StaleDataError``: ``operation_conflict``);
# a status change goes through the same transition table. No object is loaded, held or
# flushed for them.


def _versioned(*columns: str) -> Any:
    return (
        update(_OPERATIONS)
        .where(
            _OPERATIONS.c.operation_id == _param("journal_id", "operation_id"),
            _OPERATIONS.c.status == _param("journal_was", "status"),
        )
        .values({column: _param(f"journal_{column}", column) for column in columns})
    )


# the plan's events: the columns a feed row copies returned by the same statement, as it
# left them (``feed.returned``), so the feed does not read the row back at the commit
_PLAN_EVENTS = _versioned(
    "decision_event_id", "action_event_id", "outcome_event_id", "report"
).returning(
    _OPERATIONS.c.kind, _OPERATIONS.c.repository_name, _OPERATIONS.c.status, _OPERATIONS.c.code
)
_ENDED = ("status", "code", "detail", "report", "updated_at")
_ENDED_WITH_RECEIPT = _versioned(*_ENDED, "outcome_event_id", "receipt", "receipt_sha256")
_ENDED_ONLY = _versioned(*_ENDED)
_ATTEMPT_ENDED = (
    update(_ATTEMPT_ROWS)
    .where(
        _ATTEMPT_ROWS.c.operation_id == bindparam("journal_id", type_=String()),
        _ATTEMPT_ROWS.c.attempt == bindparam("journal_attempt", type_=Integer()),
    )
    .values(
        status=bindparam("journal_status", type_=String()),
        code=bindparam("journal_code", type_=String()),
        detail=bindparam("journal_detail", type_=Text()),
        ended_at=bindparam("journal_ended_at", type_=String()),
    )
)


def _params(read: Operation, values: dict[str, Any]) -> dict[str, Any]:
    params = {"journal_id": read.operation_id, "journal_was": read.status.value}
    params.update({f"journal_{column}": value for column, value in values.items()})
    return params


def _update(session: Session, statement: Any, read: Operation, values: dict[str, Any]) -> None:
    if getattr(run(session, statement, _params(read, values)), "rowcount", None) != 1:
        raise StaleDataError(f"operation {read.operation_id} moved since it was read")


def write_plan_events(session: Session, read: Operation, decision: str, action: str) -> None:
    """``set_plan_events`` of ``read``, the operation as this transaction read it."""
    values = {
        "decision_event_id": decision,
        "action_event_id": action,
        "outcome_event_id": None,
        "report": None,
    }
    left = run(session, _PLAN_EVENTS, _params(read, values)).all()
    if len(left) != 1:
        raise StaleDataError(f"operation {read.operation_id} moved since it was read")
    kind, repository_name, status, code = left[0]
    feed.returned(session, read.operation_id, feed.Written(kind, repository_name, status, code))


def complete(
    session: Session,
    read: Operation,
    *,
    report: dict[str, Any] | None,
    receipt: tuple[str, dict[str, Any], str] | None = None,
) -> None:
    """``read`` (the operation as this transaction read it) ``completed``, with ``report``
    and, when given, ``receipt``: (outcome event id, receipt, its sha256); its attempt
    ended. What ``set_outcome_event``, ``set_receipt``, ``set_report`` and ``set_status``
    write together, in one statement, and told to the feed and the witness as they tell it."""
    status = check_transition(read.kind, read.status, OperationStatus.COMPLETED.value)
    stamp = now()
    values: dict[str, Any] = {
        "status": status.value,
        "code": None,
        "detail": None,
        "report": report,
        "updated_at": stamp,
    }
    if receipt is None:
        _update(session, _ENDED_ONLY, read, values)
    else:
        outcome, document, sha256 = receipt
        values.update(outcome_event_id=outcome, receipt=document, receipt_sha256=sha256)
        _update(session, _ENDED_WITH_RECEIPT, read, values)
    run(
        session,
        _ATTEMPT_ENDED,
        {
            "journal_id": read.operation_id,
            "journal_attempt": read.attempt,
            "journal_status": status.value,
            "journal_code": None,
            "journal_detail": None,
            "journal_ended_at": stamp,
        },
    )
    written = feed.Written(read.kind.value, read.repository_name, status.value, None)
    feed.status_changed(session, read.operation_id, written)
    ended = witness.Ended(
        read.kind, status, None, read.bundle_id, read.repository_name, read.attempt
    )
    witness.status(session, read.operation_id, ended)


def start_attempt(session: Session, operation_id: str) -> None:
    row = _row(session, operation_id)
    session.add(
        AttemptRow(
            operation_id=row.operation_id,
            attempt=row.attempt,
            status=row.status,
            started_at=now(),
        )
    )


# built once, the operation id a parameter (a statement built per call cost more than
# running it); plain rows (Core), so an attempt still pending in the session is not seen:
# read where none is (a view)
_ATTEMPTS = (
    select(_ATTEMPT_ROWS)
    .where(_ATTEMPT_ROWS.c.operation_id == bindparam("journal_operation_id", type_=String()))
    .order_by(_ATTEMPT_ROWS.c.attempt)
)


def attempts(session: Session | Connection, operation_id: str) -> list[Attempt]:
    return [
        Attempt(
            attempt=row.attempt,
            status=OperationStatus(row.status),
            code=row.code,
            detail=row.detail,
            started_at=row.started_at,
            ended_at=row.ended_at,
        )
        for row in run(session, _ATTEMPTS, {"journal_operation_id": operation_id})
    ]


@dataclass(frozen=True)
class Unit:
    """One transaction's changes to one operation (``attempt``)."""

    session: Session
    operation_id: str

    @property
    def row(self) -> Operation:
        """The operation as this transaction holds it."""
        return require(self.session, self.operation_id)

    def set_status(
        self,
        status: OperationStatus,
        *,
        code: str | None = None,
        detail: str | None = None,
        report: dict[str, Any] | None = None,
    ) -> None:
        set_status(self.session, self.operation_id, status, code=code, detail=detail, report=report)

    def set_report(self, report: dict[str, Any] | None) -> None:
        set_report(self.session, self.operation_id, report)

    def event(self, kind: ledger.EventKind, payload: Mapping[str, object]) -> str:
        """Append an event to the operation's ledger; its id."""
        return ledger.append(self.session, self.operation_id, kind, payload)

    def steps(self) -> list[Step]:
        return step_rows.steps(self.session, self.operation_id)

    def set_steps(
        self, statuses: dict[int, StepStatus], details: dict[int, str] | None = None
    ) -> None:
        step_rows.set_steps(self.session, self.operation_id, statuses, details)

    def add_created_dirs(self, paths: Iterable[str]) -> None:
        step_rows.add_created_dirs(self.session, self.operation_id, paths)

    def set_outcome_event(self, event_id: str) -> None:
        set_outcome_event(self.session, self.operation_id, event_id)

    def delete_created_dirs(self) -> None:
        step_rows.delete_created_dirs(self.session, self.operation_id)


@contextmanager
def unit_of_work(db: Database, *, fenced: bool = False, durable: bool = True) -> Iterator[Session]:
    """The engine's one way to open a transaction: committed when the block ends, rolled
    back on any error (``Database.session`` owns both, and translates the database's
    errors). ``durable=False``: the commit is not flushed on its own (SQLite; see
    ``Database.session`` for when that is safe). ``fenced``: the host's epoch is checked
    first (``Database.guard_writes``, ``engine.fencing``), so a fenced host writes nothing."""
    with db.session(durable=durable) as session:
        if fenced:
            db.guard_writes(session)
        yield session
    witness.committed(session)  # what it wrote to a watched operation, now in the database


@contextmanager
def attempt(db: Database, operation_id: str) -> Iterator[Unit]:
    """The unit of work of ``operation_id``: one fenced transaction (``unit_of_work``)."""
    with unit_of_work(db, fenced=True) as session:  # a fenced host writes nothing
        yield Unit(session, operation_id)
