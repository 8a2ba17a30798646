"""Remember who computed each target assignment (an assignor service's address, or a worker).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("target_assignments") as batch:
        batch.add_column(sa.Column("computed_by", sa.String(), nullable=False, server_default=sa.text("''")))


def downgrade() -> None:
    with op.batch_alter_table("target_assignments") as batch:
        batch.drop_column("computed_by")
