"""The newest request_sequence processed from a member, stored with its current assignment.

After a restart the coordinator must still recognise a delayed copy of a heartbeat sent before a
revocation was requested: without this column such a copy could acknowledge the revocation.
Rows written before this migration get -1 (no sequence known), the previous behaviour.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("member_assignments") as batch:
        batch.add_column(sa.Column("request_sequence", sa.BigInteger(), server_default=sa.text("-1"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("member_assignments") as batch:
        batch.drop_column("request_sequence")
