"""console sessions in the ledger

One row a logged-in console browser: the sha256 of its session id (never the id), the
role, the name and token sha256 of the credential it logged in with, and when it opened,
was last seen used and ends at the latest (wall-clock seconds). Every serving process
and every host of the ledger finds the session there.

Revision ID: 0012s
Revises: 0011h
Create Date: 2026-12-06 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012s"
down_revision = "0011h"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("session_sha256", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("credential_sha256", sa.String(length=64), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_sha256", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_name"), "console_sessions", ["name"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_console_sessions_name"), table_name="console_sessions")
    op.drop_table("console_sessions")
