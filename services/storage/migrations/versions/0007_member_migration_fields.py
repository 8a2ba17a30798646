"""A `connect` group's member's protocol (SPEC §12, issue 36): MemberMetadataValue.member_type
(`connect` | `classic`), session_timeout_ms and protocols, so a classic worker of an upgraded
group stays one across a restart. Members stored before it are `connect` members with session
timeout 0 and no protocols (what the record's defaults say).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("members") as batch:
        batch.add_column(sa.Column("member_type", sa.String(), server_default=sa.text("'connect'"), nullable=False))
        batch.add_column(sa.Column("session_timeout_ms", sa.Integer(), server_default=sa.text("0"), nullable=False))
        # [[protocol name, base64(metadata)], ...] in the member's order of preference, as in
        # classic_members.protocols; '[]' only fills the rows already stored (every write names it).
        batch.add_column(sa.Column("protocols", sa.JSON(), server_default=sa.text("'[]'"), nullable=False))
    # A second batch: on SQLite this one recreates the table, copying the column filled above.
    with op.batch_alter_table("members") as batch:
        batch.alter_column("protocols", existing_type=sa.JSON(), existing_nullable=False, server_default=None)


def downgrade() -> None:
    # A classic member of a `connect` group becomes a `connect` member again (what 0006 can hold).
    with op.batch_alter_table("members") as batch:
        batch.drop_column("protocols")
        batch.drop_column("session_timeout_ms")
        batch.drop_column("member_type")
