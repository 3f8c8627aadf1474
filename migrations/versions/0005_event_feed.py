"""event feed

The watch feed: one row per ledger event, or per status change without an event, in the
global order of commits (an autoincrement position), with the operation's status and
code as that transaction committed them. Events written before this revision are entered
once, in their operation's order, with the operation's status of now.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_feed",
        sa.Column("position", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=40), nullable=True),
        sa.Column("operation_id", sa.String(length=40), nullable=False),
        sa.Column("operation_kind", sa.String(length=20), nullable=False),
        sa.Column("repository_name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=30), nullable=False),
        sa.Column("code", sa.String(length=60), nullable=True),
        sa.Column("at", sa.String(length=20), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_event_feed")),
        sa.UniqueConstraint("event_id", name=op.f("uq_event_feed_event_id")),
    )
    with op.batch_alter_table("event_feed", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_event_feed_operation_id"), ["operation_id"])
        batch_op.create_index(batch_op.f("ix_event_feed_repository_name"), ["repository_name"])
    events = sa.table(
        "events",
        sa.column("event_id", sa.String),
        sa.column("operation_id", sa.String),
        sa.column("seq", sa.Integer),
        sa.column("kind", sa.String),
        sa.column("at", sa.String),
    )
    operations = sa.table(
        "operations",
        sa.column("operation_id", sa.String),
        sa.column("kind", sa.String),
        sa.column("repository_name", sa.String),
        sa.column("status", sa.String),
        sa.column("code", sa.String),
    )
    feed = sa.table(
        "event_feed",
        *(
            sa.column(name, sa.String)
            for name in (
                "event_id",
                "operation_id",
                "operation_kind",
                "repository_name",
                "kind",
                "status",
                "code",
                "at",
            )
        ),
    )
    connection = op.get_bind()
    query = (
        sa.select(
            events.c.event_id,
            events.c.operation_id,
            operations.c.kind,
            operations.c.repository_name,
            events.c.kind,
            operations.c.status,
            operations.c.code,
            events.c.at,
        )
        .join(operations, operations.c.operation_id == events.c.operation_id)
        .order_by(events.c.at, events.c.operation_id, events.c.seq)
    )
    for row in connection.execute(query):
        connection.execute(
            feed.insert().values(
                event_id=row[0],
                operation_id=row[1],
                operation_kind=row[2],
                repository_name=row[3],
                kind=row[4],
                status=row[5],
                code=row[6],
                at=row[7],
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("event_feed", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_event_feed_repository_name"))
        batch_op.drop_index(batch_op.f("ix_event_feed_operation_id"))
    op.drop_table("event_feed")
