"""Journal rows made directly, for tests of the store that need an operation to exist.

``journal_database`` opens a migrated database holding such rows. Deliberately not here: anything
the engine would do with the row (no events, no steps).
"""

from __future__ import annotations

from promoter.store.db import Database, upgrade
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


def journal_database(url: str, *operations: str) -> Database:
    """The database at ``url`` migrated and opened (locks waited for 5 s), with an
    ``operation_row`` for each of ``operations``."""
    upgrade(url)
    database = Database(url, 5.0)
    with database.session() as session:
        session.add_all([operation_row(operation_id) for operation_id in operations])
    return database
