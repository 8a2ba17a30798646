"""The event log's typed columns (issue 38): what the analytics job reads of an event's details,
written beside them by the coordinator in the same transaction, so that the job reads columns
instead of parsing JSON. `columns_version` is 1 on rows written with them; rows stored before it
keep NULL in every new column (readers then parse `details`, which stays the full record). The
item lists are the names joined by newlines (no connector or task name may contain one).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = ("connectors", "tasks", "removed_connectors", "removed_tasks")
STRINGS = ("reason", "cause", "executor", "instance_id", "url")
NUMBERS = ("items", "last_heartbeat_ms", "previous", "members")


def upgrade() -> None:
    # Nullable columns without a default: an ALTER TABLE ADD COLUMN each, no table copy (SQLite too),
    # whatever the size of the log.
    op.add_column("rebalance_events", sa.Column("columns_version", sa.SmallInteger(), nullable=True))
    for name in TEXT:
        op.add_column("rebalance_events", sa.Column(name, sa.Text(), nullable=True))
    for name in STRINGS:
        op.add_column("rebalance_events", sa.Column(name, sa.String(), nullable=True))
    for name in NUMBERS:
        op.add_column("rebalance_events", sa.Column(name, sa.BigInteger(), nullable=True))
    op.add_column("rebalance_events", sa.Column("temporary", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE DROP COLUMN (PostgreSQL; SQLite >= 3.35): no table copy, and SQLite's table keeps
    # its AUTOINCREMENT (a batch copy would not), so ids are never reused.
    for name in ("temporary", *reversed(NUMBERS), *reversed(STRINGS), *reversed(TEXT), "columns_version"):
        op.execute(f"ALTER TABLE rebalance_events DROP COLUMN {name}")
