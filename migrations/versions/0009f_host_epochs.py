"""host epochs

The hosts of one ledger, each with an epoch: a daemon registers its host at start and
writes only while the epoch it registered with is still the host's; fencing a dead host
raises it (``promoter.engine.fencing``). ``host_fences`` journals every fence: who,
when, from which host to which, and the operations handed over.

Revision ID: 0009f
Revises: 0008
Create Date: 2026-12-05 09:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009f"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("repositories", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.String(length=32), nullable=False),
        sa.Column("lease_until", sa.String(length=32), nullable=True),
        sa.Column("fenced_at", sa.String(length=32), nullable=True),
        sa.Column("fenced_by", sa.String(length=200), nullable=True),
        sa.Column("fenced_to", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("host_id", name=op.f("pk_hosts")),
    )
    op.create_table(
        "host_fences",
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("to_host", sa.String(length=200), nullable=False),
        sa.Column("fenced_by", sa.String(length=200), nullable=False),
        sa.Column("fenced_at", sa.String(length=32), nullable=False),
        sa.Column("operations", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("host_id", "epoch", name=op.f("pk_host_fences")),
    )


def downgrade() -> None:
    op.drop_table("host_fences")
    op.drop_table("hosts")
