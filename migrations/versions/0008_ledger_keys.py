"""ledger keys and stored receipt envelopes

Every host publishes its receipt-signing public keys (with their validity windows) into
``host_keys``, so any host lists every host's keys; a receipt's DSSE envelope is made once,
by the host that made the receipt, and kept in ``receipt_envelopes`` to be served as stored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_keys",
        sa.Column("keyid", sa.String(length=64), nullable=False),
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("algorithm", sa.String(length=20), nullable=False),
        sa.Column("public_key_pem", sa.Text(), nullable=False),
        sa.Column("not_before", sa.String(length=32), nullable=True),
        sa.Column("not_after", sa.String(length=32), nullable=True),
        sa.Column("published_at", sa.String(length=20), nullable=False),
        sa.PrimaryKeyConstraint("keyid", name=op.f("pk_host_keys")),
    )
    with op.batch_alter_table("host_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_host_keys_host_id"), ["host_id"])
    op.create_table(
        "receipt_envelopes",
        sa.Column("receipt_sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("subject_id", sa.String(length=40), nullable=False),
        sa.Column("host_id", sa.String(length=200), nullable=False),
        sa.Column("keyid", sa.String(length=64), nullable=False),
        sa.Column("envelope", sa.Text(), nullable=False),
        sa.Column("created_at", sa.String(length=20), nullable=False),
        sa.PrimaryKeyConstraint("receipt_sha256", name=op.f("pk_receipt_envelopes")),
    )
    with op.batch_alter_table("receipt_envelopes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_receipt_envelopes_subject_id"), ["subject_id"])


def downgrade() -> None:
    with op.batch_alter_table("receipt_envelopes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_receipt_envelopes_subject_id"))
    op.drop_table("receipt_envelopes")
    with op.batch_alter_table("host_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_host_keys_host_id"))
    op.drop_table("host_keys")
