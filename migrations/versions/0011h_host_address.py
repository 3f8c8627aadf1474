"""host addresses and ledger credentials

Each host publishes the base URL its daemon serves on (``hosts.address``) and the names
of its repositories (``hosts.repository_names``, identity to name), so any host can say
who guards what and answer 421 with the owner's address. ``credentials`` holds the
sha256 of every orchestrator and operator credential of the cluster (never a token),
with the host that published it and, once removed, when and where: a credential is
valid on every host while its row is live, and a removed one is never published again.

Revision ID: 0011h
Revises: 0010p
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011h"
down_revision = "0010p"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("address", sa.String(length=2000), nullable=True))
        batch.add_column(sa.Column("repository_names", sa.JSON(), nullable=True))
    op.create_table(
        "credentials",
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("added_at", sa.String(length=32), nullable=False),
        sa.Column("removed_at", sa.String(length=32), nullable=True),
        sa.Column("removed_on", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("token_sha256", name=op.f("pk_credentials")),
    )
    op.create_index(op.f("ix_credentials_name"), "credentials", ["name"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_credentials_name"), table_name="credentials")
    op.drop_table("credentials")
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("repository_names")
        batch.drop_column("address")
