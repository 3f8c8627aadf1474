"""The signed receipt a host serves: the receipt's bytes, its maker, its stored envelope.

Owns finding, for each kind of receipt (promotion, rollback, verification), the bytes the
unsigned routes serve and the host the ledger says made it, then asks
``promoter.engine.receipts.envelopes.served_envelope`` for the envelope. Deliberately not
here: deciding who may read a receipt (``promoter.api``), signing and storing envelopes
(``promoter.engine.receipts.envelopes``).
"""

from __future__ import annotations

from promoter.domain.canonical import canonical_bytes
from promoter.engine.intake.bundles import load_verification
from promoter.engine.operation import receipts as operations
from promoter.engine.operation.rollback import rollback_id
from promoter.engine.ports import Serving
from promoter.engine.receipts.envelopes import (
    PROMOTION,
    ROLLBACK,
    VERIFICATION,
    served_envelope,
)
from promoter.store import journal, repo
from promoter.store.db import Database


def promotion_envelope(services: Serving, operation_id: str) -> bytes:
    """The promotion receipt's envelope (404 ``receipt_unavailable`` until completed)."""
    receipt = operations.promotion_receipt(services, operation_id)
    return served_envelope(
        services, PROMOTION, operation_id, receipt, _owner(services.db, operation_id)
    )


def rollback_envelope(services: Serving, operation_id: str) -> bytes:
    """The envelope of the rollback receipt of promotion ``operation_id``."""
    receipt = operations.rollback_receipt(services, operation_id)
    maker = _owner(services.db, rollback_id(operation_id))
    return served_envelope(services, ROLLBACK, operation_id, receipt, maker)


def verification_envelope(services: Serving, bundle_id: str) -> bytes:
    """The envelope of a bundle's verification receipt (the one the unsigned route serves)."""
    receipt = canonical_bytes(load_verification(services, bundle_id))
    with journal.unit_of_work(services.db) as session:
        _, maker = repo.bundle_owner_host(session, bundle_id)
    return served_envelope(services, VERIFICATION, bundle_id, receipt, maker)


def _owner(db: Database, operation_id: str) -> str | None:
    with journal.unit_of_work(db) as session:
        row = journal.get_operation(session, operation_id)
    return None if row is None else row.owner_host
