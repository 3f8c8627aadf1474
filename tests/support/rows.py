"""Journal rows made directly, for tests of the store that need an operation to exist.

Deliberately not here: anything the engine would do with the row (no events, no steps).
"""

from __future__ import annotations

from promoter.store.repo import now
from promoter.store.tables import OperationRow


def operation_row(operation_id: str, kind: str = "promotion") -> OperationRow:
    """A fresh ``in_progress`` operation of ``kind`` in attempt 1, of repository ``demo``."""
    return OperationRow(
        operation_id=operation_id,
        kind=kind,
        repository_identity="repo_" + "0" * 32,
        repository_name="demo",
        status="in_progress",
        attempt=1,
        created_at=now(),
        updated_at=now(),
    )
