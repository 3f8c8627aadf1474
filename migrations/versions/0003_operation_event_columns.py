"""operation event id columns

The decision, action and outcome event ids of an operation's current attempt, which the
promotion receipt names, move from the untyped ``report`` JSON into columns.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 12:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = ("decision_event_id", "action_event_id", "outcome_event_id")


def upgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        for name in COLUMNS:
            batch_op.add_column(sa.Column(name, sa.String(length=40), nullable=True))
    operations = sa.table(
        "operations",
        sa.column("operation_id", sa.String),
        sa.column("report", sa.JSON),
        *(sa.column(name, sa.String) for name in COLUMNS),
    )
    connection = op.get_bind()
    for operation_id, report in connection.execute(
        sa.select(operations.c.operation_id, operations.c.report)
    ):
        events = (report or {}).get("events") if isinstance(report, dict) else None
        if not isinstance(events, dict):
            continue
        ids = {f"{kind}_event_id": events.get(kind) for kind in ("decision", "action", "outcome")}
        connection.execute(
            operations.update().where(operations.c.operation_id == operation_id).values(**ids)
        )


def downgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        for name in reversed(COLUMNS):
            batch_op.drop_column(name)
