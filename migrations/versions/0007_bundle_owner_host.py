"""bundle owner host

Every bundle records the host whose state directory holds its document, so that another
host of the same ledger can answer ``owned_by_other_host`` naming it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 08:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_host", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.drop_column("owner_host")
