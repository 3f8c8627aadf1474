"""repository settings

An operator's change of a repository's setting at run time (``promoter repos set NAME
--approval required|none``), one row a change: who, when, on which host, what was in
force before. The newest row of a repository and setting is in force on every host of
the ledger, over the configuration file.

Revision ID: 0010p
Revises: 0009f
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010p"
down_revision = "0009f"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repository_settings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("repository_identity", sa.String(length=40), nullable=False),
        sa.Column("repository_name", sa.String(length=200), nullable=False),
        sa.Column("setting", sa.String(length=40), nullable=False),
        sa.Column("value", sa.String(length=40), nullable=False),
        sa.Column("previous", sa.String(length=40), nullable=False),
        sa.Column("by_role", sa.String(length=20), nullable=False),
        sa.Column("by_name", sa.String(length=200), nullable=False),
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("at", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repository_settings")),
    )
    op.create_index(
        op.f("ix_repository_settings_repository_identity"),
        "repository_settings",
        ["repository_identity"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_repository_settings_repository_identity"), table_name="repository_settings"
    )
    op.drop_table("repository_settings")
