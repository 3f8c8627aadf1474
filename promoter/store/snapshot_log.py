"""The snapshot log in the database: one entry per capture, per repository.

Entries are plain dicts ``{tree, label, captured_at}`` (the wire form the API serves);
``prune`` keeps the newest entries and returns every tree something still refers to.
Deliberately not here: the snapshot trees themselves (the shadow repository of
``promoter.git.shadow``) and the repository lock the engine holds while pruning.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from promoter.domain.status import OperationKind
from promoter.store.repo import now
from promoter.store.tables import OperationRow, SnapshotRow


def add(session: Session, repository_identity: str, tree: str, label: str) -> dict[str, str]:
    row = SnapshotRow(
        repository_identity=repository_identity, tree=tree, label=label, captured_at=now()
    )
    session.add(row)
    return {"tree": row.tree, "label": row.label, "captured_at": row.captured_at}


def entries(session: Session, repository_identity: str) -> list[dict[str, str]]:
    """Every entry of the repository, oldest first."""
    query = (
        select(SnapshotRow)
        .where(SnapshotRow.repository_identity == repository_identity)
        .order_by(SnapshotRow.captured_at, SnapshotRow.id)
    )
    return [
        {"tree": row.tree, "label": row.label, "captured_at": row.captured_at}
        for row in session.scalars(query)
    ]


def prune(session: Session, repository_identity: str, keep: int) -> tuple[int, set[str]]:
    """Drop all but the newest ``keep`` entries; returns how many were dropped and the
    trees still wanted (the kept entries' and every tree an operation refers to)."""
    query = (
        select(SnapshotRow)
        .where(SnapshotRow.repository_identity == repository_identity)
        .order_by(SnapshotRow.captured_at.desc(), SnapshotRow.id.desc())
    )
    rows = list(session.scalars(query))
    for row in rows[keep:]:
        session.delete(row)
    wanted: set[str | None] = {row.tree for row in rows[:keep]}
    operations = select(OperationRow).where(OperationRow.repository_identity == repository_identity)
    for op in session.scalars(operations):
        wanted |= {op.pre_snapshot, op.post_snapshot}
        if op.kind == OperationKind.RESTORE.value and op.report:
            wanted |= {op.report.get("from"), op.report.get("restore_to")}
    return len(rows[keep:]), {tree for tree in wanted if isinstance(tree, str)}
