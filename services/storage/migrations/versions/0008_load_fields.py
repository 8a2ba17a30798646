"""Load-aware assignment (SPEC §13, issue 37): a member's capacity, rack and last stored load report
(MemberMetadataValue.capacity / rack / item_loads) and a connector's task weight
(ConnectorRecord.task_weight). Members stored before it have capacity 1.0, no rack and no loads;
connectors a weight of 1.0 (what the records' defaults say).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("members") as batch:
        batch.add_column(sa.Column("capacity", sa.Double(), server_default=sa.text("1.0"), nullable=False))
        batch.add_column(sa.Column("rack", sa.String(), server_default=sa.text("''"), nullable=False))
        # [[connector, task, load], ...] (task -1: the connector); '[]' only fills the rows already
        # stored (every write names it).
        batch.add_column(sa.Column("item_loads", sa.JSON(), server_default=sa.text("'[]'"), nullable=False))
    # A second batch: on SQLite this one recreates the table, copying the column filled above.
    with op.batch_alter_table("members") as batch:
        batch.alter_column("item_loads", existing_type=sa.JSON(), existing_nullable=False, server_default=None)
    with op.batch_alter_table("group_connectors") as batch:
        batch.add_column(sa.Column("task_weight", sa.Double(), server_default=sa.text("1.0"), nullable=False))


def downgrade() -> None:
    # Loads, capacities, racks and weights are forgotten (what 0007 can hold).
    with op.batch_alter_table("group_connectors") as batch:
        batch.drop_column("task_weight")
    with op.batch_alter_table("members") as batch:
        batch.drop_column("item_loads")
        batch.drop_column("rack")
        batch.drop_column("capacity")
