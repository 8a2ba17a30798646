"""Each group's config offset (SPEC §12): its connector configuration version, Connect's config
offset, one more with every PutConnector / DeleteConnector that changes something. Groups stored
before it start at 0.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("config_offset", sa.BigInteger(), server_default=sa.text("0"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("config_offset")
