"""Coordinator replicas: the partition count, registered replicas and partition leases (SPEC §10).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "coordinator_cluster",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_coordinator_cluster")),
    )
    op.create_table(
        "coordinator_replicas",
        sa.Column("replica_id", sa.String(), nullable=False),
        sa.Column("address", sa.String(), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id", name=op.f("pk_coordinator_replicas")),
    )
    op.create_table(
        "partition_leases",
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("address", sa.String(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("partition", name=op.f("pk_partition_leases")),
    )


def downgrade() -> None:
    op.drop_table("partition_leases")
    op.drop_table("coordinator_replicas")
    op.drop_table("coordinator_cluster")
