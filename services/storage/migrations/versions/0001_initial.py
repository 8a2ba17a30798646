"""Initial schema: one table per coordinator record type, plus the rebalance event log.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("group_type", sa.String(), nullable=False),
        sa.Column("group_epoch", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_groups")),
    )
    op.create_table(
        "group_connectors",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("connector", sa.String(), nullable=False),
        sa.Column("task_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "connector", name=op.f("pk_group_connectors")),
    )
    op.create_table(
        "members",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=True),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("client_id", sa.String(), nullable=False),
        sa.Column("rebalance_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("assignors", sa.JSON(), nullable=False),
        sa.Column("joined_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_members")),
    )
    op.create_table(
        "target_assignment_members",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("error", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_target_assignment_members")),
    )
    op.create_table(
        "target_assignments",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("assignment_epoch", sa.Integer(), nullable=False),
        sa.Column("error", sa.Integer(), nullable=False),
        sa.Column("assignor_name", sa.String(), nullable=False),
        sa.Column("assignor_state", sa.LargeBinary(), nullable=False),
        sa.Column("scheduled_rebalance_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_target_assignments")),
    )
    op.create_table(
        "member_assignments",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("member_epoch", sa.Integer(), nullable=False),
        sa.Column("previous_member_epoch", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("assigned", sa.JSON(), nullable=False),
        sa.Column("revoking", sa.JSON(), nullable=False),
        sa.Column("error", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_member_assignments")),
    )
    op.create_table(
        "held_assignments",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_held_assignments")),
    )
    op.create_table(
        "group_configs",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "name", name=op.f("pk_group_configs")),
    )
    op.create_table(
        "rebalance_events",
        # BIGSERIAL on PostgreSQL; INTEGER PRIMARY KEY AUTOINCREMENT (never reused ids) on SQLite.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("time_ms", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("group_epoch", sa.Integer(), nullable=False),
        sa.Column("assignment_epoch", sa.Integer(), nullable=False),
        sa.Column("member_epoch", sa.Integer(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rebalance_events")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_rebalance_events_group_id_time_ms", "rebalance_events", ["group_id", "time_ms"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_rebalance_events_group_id_time_ms", table_name="rebalance_events")
    for table in (
        "rebalance_events",
        "group_configs",
        "held_assignments",
        "member_assignments",
        "target_assignments",
        "target_assignment_members",
        "members",
        "group_connectors",
        "groups",
    ):
        op.drop_table(table)
