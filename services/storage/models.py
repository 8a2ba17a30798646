"""SQLAlchemy models: one table per record type of ``services.coordinator.records``.

The tables hold exactly what the records carry (keys as primary keys, values as columns), so a
write is "upsert the row" and a load is "turn every row back into its record". There are no
foreign keys: a group tombstone deletes the group's rows table by table, and the coordinator is
the only writer. Types are portable between SQLite and PostgreSQL (``JSON``, not ``JSONB``).

Any change here needs a new migration in ``migrations/versions``; a test compares the two.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, LargeBinary, MetaData, String, Table, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# SQLite only auto-assigns INTEGER PRIMARY KEY (the rowid); PostgreSQL gets a BIGSERIAL.
EventId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    # Deterministic constraint names: later migrations (SQLite batch mode included) can refer to them.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class GroupRow(Base):
    """GroupMetadata."""

    __tablename__ = "groups"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    group_type: Mapped[str] = mapped_column(String)
    group_epoch: Mapped[int] = mapped_column(Integer)
    created_ms: Mapped[int] = mapped_column(BigInteger)


class GroupConnectorRow(Base):
    """ConnectorRecord."""

    __tablename__ = "group_connectors"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    connector: Mapped[str] = mapped_column(String, primary_key=True)
    task_count: Mapped[int] = mapped_column(Integer)


class MemberRow(Base):
    """MemberMetadata. ``assignors`` is a list of AssignorSpec dicts (metadata base64-encoded)."""

    __tablename__ = "members"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    member_id: Mapped[str] = mapped_column(String, primary_key=True)
    instance_id: Mapped[str | None] = mapped_column(String, nullable=True)
    url: Mapped[str] = mapped_column(String)
    client_id: Mapped[str] = mapped_column(String)
    rebalance_timeout_ms: Mapped[int] = mapped_column(Integer)
    assignors: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    joined_ms: Mapped[int] = mapped_column(BigInteger)


class TargetAssignmentMemberRow(Base):
    """TargetMember. ``items`` is ``Items.to_json()`` (connectors and tasks)."""

    __tablename__ = "target_assignment_members"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    member_id: Mapped[str] = mapped_column(String, primary_key=True)
    items: Mapped[dict[str, Any]] = mapped_column(JSON)
    error: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    metadata_: Mapped[bytes] = mapped_column("metadata", LargeBinary)


class TargetAssignmentRow(Base):
    """TargetMetadata."""

    __tablename__ = "target_assignments"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    assignment_epoch: Mapped[int] = mapped_column(Integer)
    error: Mapped[int] = mapped_column(Integer)
    assignor_name: Mapped[str] = mapped_column(String)
    assignor_state: Mapped[bytes] = mapped_column(LargeBinary)
    scheduled_rebalance_ms: Mapped[int] = mapped_column(BigInteger)
    # The assignor service (address) or worker that computed the target (migration 0003).
    computed_by: Mapped[str] = mapped_column(String, server_default=text("''"))


class MemberAssignmentRow(Base):
    """CurrentAssignment. ``assigned`` / ``revoking`` are ``Items.to_json()``."""

    __tablename__ = "member_assignments"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    member_id: Mapped[str] = mapped_column(String, primary_key=True)
    member_epoch: Mapped[int] = mapped_column(Integer)
    previous_member_epoch: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String)
    assigned: Mapped[dict[str, Any]] = mapped_column(JSON)
    revoking: Mapped[dict[str, Any]] = mapped_column(JSON)
    error: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    metadata_: Mapped[bytes] = mapped_column("metadata", LargeBinary)
    request_sequence: Mapped[int] = mapped_column(BigInteger, server_default=text("-1"))


class HeldAssignmentRow(Base):
    """HeldAssignment."""

    __tablename__ = "held_assignments"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    member_id: Mapped[str] = mapped_column(String, primary_key=True)
    items: Mapped[dict[str, Any]] = mapped_column(JSON)


class GroupConfigRow(Base):
    """GroupConfig."""

    __tablename__ = "group_configs"

    group_id: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(String)


class RebalanceEventRow(Base):
    """RebalanceEvent: append-only; survives group deletion (it is the history)."""

    __tablename__ = "rebalance_events"
    # AUTOINCREMENT on SQLite: ids are never reused, so readers can poll with ``since_id``.
    __table_args__ = (
        Index("ix_rebalance_events_group_id_time_ms", "group_id", "time_ms"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(EventId, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String)
    time_ms: Mapped[int] = mapped_column(BigInteger)
    event: Mapped[str] = mapped_column(String)
    member_id: Mapped[str] = mapped_column(String)
    group_epoch: Mapped[int] = mapped_column(Integer)
    assignment_epoch: Mapped[int] = mapped_column(Integer)
    member_epoch: Mapped[int] = mapped_column(Integer)
    details: Mapped[dict[str, Any]] = mapped_column(JSON)


class CoordinatorClusterRow(Base):
    """The replicas' shared settings, written once when the database is first used (SPEC §10)."""

    __tablename__ = "coordinator_cluster"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    partitions: Mapped[int] = mapped_column(Integer)
    created_ms: Mapped[int] = mapped_column(BigInteger)


class CoordinatorReplicaRow(Base):
    """A coordinator replica, registered and renewed with its leases (times: database clock, Unix ms)."""

    __tablename__ = "coordinator_replicas"

    replica_id: Mapped[str] = mapped_column(String, primary_key=True)
    address: Mapped[str] = mapped_column(String)
    started_ms: Mapped[int] = mapped_column(BigInteger)
    expires_ms: Mapped[int] = mapped_column(BigInteger)


class PartitionLeaseRow(Base):
    """A partition's lease: its owner (NULL: none), the owner's advertised address, the fencing
    epoch (bumped by every acquisition, checked by every write) and the expiry (database clock)."""

    __tablename__ = "partition_leases"

    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    owner: Mapped[str | None] = mapped_column(String, nullable=True)
    address: Mapped[str] = mapped_column(String)
    epoch: Mapped[int] = mapped_column(BigInteger)
    expires_ms: Mapped[int] = mapped_column(BigInteger)


def table_of(model: type[Base]) -> Table:
    """The Core table of a model (typed as Table, which ``__table__`` is not)."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


EVENTS_TABLE = table_of(RebalanceEventRow)
CLUSTER_TABLE = table_of(CoordinatorClusterRow)
REPLICAS_TABLE = table_of(CoordinatorReplicaRow)
LEASES_TABLE = table_of(PartitionLeaseRow)

# Every table a group tombstone clears (all but the event log).
GROUP_STATE_TABLES = tuple(
    table_of(m)
    for m in (
        GroupRow,
        GroupConnectorRow,
        MemberRow,
        TargetAssignmentMemberRow,
        TargetAssignmentRow,
        MemberAssignmentRow,
        HeldAssignmentRow,
        GroupConfigRow,
    )
)
