"""The classic protocol's groups and members (SPEC §12, issue 35): ClassicGroupMetadata and
ClassicMemberMetadata records.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "classic_groups",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("protocol_type", sa.String(), nullable=False),
        sa.Column("protocol_name", sa.String(), nullable=False),
        sa.Column("leader", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_classic_groups")),
    )
    op.create_table(
        "classic_members",
        sa.Column("group_id", sa.String(), nullable=False),
        sa.Column("member_id", sa.String(), nullable=False),
        sa.Column("client_id", sa.String(), nullable=False),
        sa.Column("session_timeout_ms", sa.Integer(), nullable=False),
        sa.Column("rebalance_timeout_ms", sa.Integer(), nullable=False),
        # [[protocol name, base64(metadata)], ...] in the member's order of preference.
        sa.Column("protocols", sa.JSON(), nullable=False),
        sa.Column("assignment", sa.LargeBinary(), nullable=False),
        sa.Column("joined_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "member_id", name=op.f("pk_classic_members")),
    )


def downgrade() -> None:
    # The classic parts go; the groups' own `groups` rows (type `classic`) are left as they are.
    op.drop_table("classic_members")
    op.drop_table("classic_groups")
