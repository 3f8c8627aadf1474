"""console sessions a credential's removal ended

One row a console session that the removal (or replacement) of its credential ended: the
sha256 of its session id (never the id), why (`revoked`), and until when the mark is kept
(the session's own latest end, wall-clock seconds). The login page reads it to tell that
browser why its session ended.

Revision ID: 0013r
Revises: 0012s
Create Date: 2026-12-07 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013r"
down_revision = "0012s"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions_ended",
        sa.Column("session_sha256", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.String(length=20), nullable=False),
        sa.Column("until", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_sha256", name=op.f("pk_console_sessions_ended")),
    )


def downgrade() -> None:
    op.drop_table("console_sessions_ended")
