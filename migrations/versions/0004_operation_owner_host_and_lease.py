"""operation owner host and owner lease

Every operation records the host that owns it and an owner lease renewed by that
daemon's heartbeat, so that daemons of many hosts can share one ledger.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_host", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("owner_lease_until", sa.String(length=32), nullable=True))
        batch_op.create_index(batch_op.f("ix_operations_owner_host"), ["owner_host"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_operations_owner_host"))
        batch_op.drop_column("owner_lease_until")
        batch_op.drop_column("owner_host")
