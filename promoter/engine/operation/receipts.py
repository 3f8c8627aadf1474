"""An operation's receipt bytes: the promotion receipt once completed, the rollback receipt.

Fault point: ``promotion_receipt_read`` (before the promotion receipt's row is read).

Deliberately not here: signed envelopes (``operation.served``,
``promoter.engine.receipts.envelopes``), building receipts (``operation.outcome``).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from promoter.domain.canonical import canonical_bytes
from promoter.domain.status import FINAL, ROLLBACK_ENDS, OperationStatus
from promoter.engine.operation.rollback import rollback_id
from promoter.engine.ports import Records
from promoter.errors import OperationUnknown, PromoterError, ReceiptUnavailable
from promoter.faults import point
from promoter.store import journal, ledger

log = logging.getLogger("promoter.operations")


def promotion_receipt(services: Records, operation_id: str) -> bytes:
    """The promotion receipt's bytes, once the operation completed: also after it was
    rolled back, as the receipt is made once and served for ever
    (protocol: bundles#promotion-receipt).

    The bytes are the row's (protocol: storage#receipt-in-outcome-commit: the ledger's row is
    the record), never the audit file's: the file is a copy, compared with them here and
    written again when missing or different (``AuditStore.copy``; a different one is set
    aside, its bytes kept). A copy that cannot be written is logged; the receipt is served
    all the same.
    """
    point("promotion_receipt_read")
    with journal.unit_of_work(services.db) as session:
        row = journal.get_operation(session, operation_id)
        if row is None:
            raise OperationUnknown(f"no operation {operation_id!r}", operation_id=operation_id)
        receipt = row.receipt
        status = row.status
        served = receipt is not None and (
            status == OperationStatus.COMPLETED
            or (status in ROLLBACK_ENDS and _completed_before(session, operation_id, receipt))
        )
    if not served or receipt is None:
        raise ReceiptUnavailable(
            f"operation {operation_id} has no receipt (status {status})", current_status=status
        )
    data = canonical_bytes(receipt)
    try:
        aside = services.audit.copy("promotion", operation_id, data)
    except PromoterError as exc:
        log.warning("the receipt copy of %s is not written: %s", operation_id, exc.detail)
        return data
    if aside is not None:
        log.warning(
            "the receipt copy of %s differed from the ledger's row: kept at %s, written again",
            operation_id,
            aside,
        )
    return data


def _completed_before(session: Session, operation_id: str, receipt: dict[str, Any]) -> bool:
    """Whether a rolled-back promotion had completed: the outcome event its receipt names
    recorded it ``completed`` (a receipt recorded by an attempt that never completed is not
    served)."""
    outcome = receipt.get("events", {}).get("outcome")
    return any(
        event.event_id == outcome
        and event.kind == "outcome"
        and (event.payload or {}).get("status") == OperationStatus.COMPLETED
        for event in ledger.events(session, operation_id)
    )


def rollback_receipt(services: Records, operation_id: str) -> bytes:
    """The rollback receipt of promotion ``operation_id``: the host-local audit copy, else
    the bytes recorded in the ledger (a rollback another host carried out), once final.
    """
    if operation_id.startswith("op_") and "/" not in operation_id:
        stored = services.audit.get("rollback", operation_id)
        if stored is not None:
            return stored
        with journal.unit_of_work(services.db) as session:
            child = journal.get_operation(session, rollback_id(operation_id))
            recorded = None if child is None or child.status not in FINAL else child.receipt
        if recorded is not None:
            return canonical_bytes(recorded)
    raise ReceiptUnavailable(
        f"operation {operation_id} has no rollback receipt", operation_id=operation_id
    )
