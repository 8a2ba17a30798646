"""SQLAlchemy tables: one per record type of ``services.coordinator.core.records``.

The tables hold exactly what the records carry (keys as primary keys, values as columns), so a
write is "upsert the row" and a load is "turn every row back into its record". There are no
foreign keys: a group tombstone deletes the group's rows table by table, and the coordinator is
the only writer. Types are portable between SQLite and PostgreSQL (``JSON``, not ``JSONB``).

Any change here needs a new migration in ``migrations/versions``; a test compares the two. Core
tables, not ORM classes: nothing maps rows to objects (the codecs do), and importing
``sqlalchemy.orm`` would cost a serving coordinator about 6 MB.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    text,
)

# SQLite only auto-assigns INTEGER PRIMARY KEY (the rowid); PostgreSQL gets a BIGSERIAL.
EventId = BigInteger().with_variant(Integer(), "sqlite")

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


def _key(name: str, type_: Any = String) -> Column[Any]:
    return Column(name, type_, primary_key=True, autoincrement=False)


def _col(name: str, type_: Any, **kw: Any) -> Column[Any]:
    """A column; NOT NULL unless ``nullable=True`` (as the ORM's non-Optional types were)."""
    kw.setdefault("nullable", False)
    return Column(name, type_, **kw)


# GroupMetadata.
GROUPS_TABLE = Table(
    "groups",
    metadata,
    _key("group_id"),
    _col("group_type", String),
    _col("group_epoch", Integer),
    _col("created_ms", BigInteger),
    # The connector configuration version (migration 0006; groups stored before it: 0).
    _col("config_offset", BigInteger, server_default=text("0")),
)

# ConnectorRecord. ``task_weight`` (SPEC §13, migration 0008; connectors stored before it: 1.0).
CONNECTORS_TABLE = Table(
    "group_connectors",
    metadata,
    _key("group_id"),
    _key("connector"),
    _col("task_count", Integer),
    _col("task_weight", Double, server_default=text("1.0")),
)

# MemberMetadata. ``assignors`` is a list of AssignorSpec dicts (metadata base64-encoded).
# ``member_type`` (``connect`` | ``classic``), ``session_timeout_ms`` and ``protocols`` (a classic
# member's, as in ``classic_members.protocols``): migration 0007; members stored before it load as
# ``connect`` members with 0 and no protocols.
MEMBERS_TABLE = Table(
    "members",
    metadata,
    _key("group_id"),
    _key("member_id"),
    _col("instance_id", String, nullable=True),
    _col("url", String),
    _col("client_id", String),
    _col("rebalance_timeout_ms", Integer),
    _col("assignors", JSON),
    _col("joined_ms", BigInteger),
    _col("member_type", String, server_default=text("'connect'")),
    _col("session_timeout_ms", Integer, server_default=text("0")),
    _col("protocols", JSON),
    # SPEC §13 (migration 0008; members stored before it: 1.0, no rack, no loads): the worker's
    # capacity and rack, and its last stored load report, ``[[connector, task, load], ...]`` (task
    # -1: the connector itself).
    _col("capacity", Double, server_default=text("1.0")),
    _col("rack", String, server_default=text("''")),
    _col("item_loads", JSON),
)

# TargetMember. ``items`` is ``Items.to_json()`` (connectors and tasks).
TARGET_MEMBERS_TABLE = Table(
    "target_assignment_members",
    metadata,
    _key("group_id"),
    _key("member_id"),
    _col("items", JSON),
    _col("error", Integer),
    _col("version", Integer),
    _col("metadata", LargeBinary),
)

# TargetMetadata. ``computed_by``: the assignor service (address) or worker that computed the
# target (migration 0003).
TARGETS_TABLE = Table(
    "target_assignments",
    metadata,
    _key("group_id"),
    _col("assignment_epoch", Integer),
    _col("error", Integer),
    _col("assignor_name", String),
    _col("assignor_state", LargeBinary),
    _col("scheduled_rebalance_ms", BigInteger),
    _col("computed_by", String, server_default=text("''")),
)

# CurrentAssignment. ``assigned`` / ``revoking`` are ``Items.to_json()``.
MEMBER_ASSIGNMENTS_TABLE = Table(
    "member_assignments",
    metadata,
    _key("group_id"),
    _key("member_id"),
    _col("member_epoch", Integer),
    _col("previous_member_epoch", Integer),
    _col("state", String),
    _col("assigned", JSON),
    _col("revoking", JSON),
    _col("error", Integer),
    _col("version", Integer),
    _col("metadata", LargeBinary),
    _col("request_sequence", BigInteger, server_default=text("-1")),
)

# HeldAssignment.
HELD_TABLE = Table("held_assignments", metadata, _key("group_id"), _key("member_id"), _col("items", JSON))

# GroupConfig.
CONFIGS_TABLE = Table("group_configs", metadata, _key("group_id"), _key("name"), _col("value", String))

# ClassicGroupMetadata (migration 0005): a classic group's generation, state (a ClassicGroupState
# name), protocol type and name, and leader.
CLASSIC_GROUPS_TABLE = Table(
    "classic_groups",
    metadata,
    _key("group_id"),
    _col("generation", Integer),
    _col("state", String),
    _col("protocol_type", String),
    _col("protocol_name", String),
    _col("leader", String),
)

# ClassicMemberMetadata (migration 0005). ``protocols`` is the member's (name, metadata) list in its
# order of preference, as a JSON array of ``[name, base64(metadata)]`` pairs (bytes exact, like the
# assignor metadata of ``members.assignors``); ``assignment`` holds the leader's bytes as they came
# (BLOB / bytea, up to 1 GB on either: a member's assignment is bounded by
# group.connect.max.group.metadata.bytes, 16 MiB by default and 48 MiB at most).
CLASSIC_MEMBERS_TABLE = Table(
    "classic_members",
    metadata,
    _key("group_id"),
    _key("member_id"),
    _col("client_id", String),
    _col("session_timeout_ms", Integer),
    _col("rebalance_timeout_ms", Integer),
    _col("protocols", JSON),
    _col("assignment", LargeBinary),
    _col("joined_ms", BigInteger),
)

# RebalanceEvent: append-only; survives group deletion (it is the history). AUTOINCREMENT on
# SQLite: ids are never reused, so readers can poll with ``since_id``.
EVENTS_TABLE = Table(
    "rebalance_events",
    metadata,
    Column("id", EventId, primary_key=True, autoincrement=True),
    _col("group_id", String),
    _col("time_ms", BigInteger),
    _col("event", String),
    _col("member_id", String),
    _col("group_epoch", Integer),
    _col("assignment_epoch", Integer),
    _col("member_epoch", Integer),
    _col("details", JSON),
    # Migration 0009: what the analytics job reads of the details, typed (see codec.event_columns);
    # NULL on rows stored before it.
    Column("columns_version", SmallInteger),
    *(Column(name, Text) for name in ("connectors", "tasks", "removed_connectors", "removed_tasks")),
    *(Column(name, String) for name in ("reason", "cause", "executor", "instance_id", "url")),
    *(Column(name, BigInteger) for name in ("items", "last_heartbeat_ms", "previous", "members")),
    Column("temporary", Boolean),
    Index("ix_rebalance_events_group_id_time_ms", "group_id", "time_ms"),
    sqlite_autoincrement=True,
)

# The replicas' shared settings, written once when the database is first used (SPEC §10).
CLUSTER_TABLE = Table(
    "coordinator_cluster",
    metadata,
    _key("id", Integer),
    _col("partitions", Integer),
    _col("created_ms", BigInteger),
)

# A coordinator replica, registered and renewed with its leases (times: database clock, Unix ms).
REPLICAS_TABLE = Table(
    "coordinator_replicas",
    metadata,
    _key("replica_id"),
    _col("address", String),
    _col("started_ms", BigInteger),
    _col("expires_ms", BigInteger),
)

# A partition's lease: its owner (NULL: none), the owner's advertised address, the fencing epoch
# (bumped by every acquisition, checked by every write) and the expiry (database clock).
LEASES_TABLE = Table(
    "partition_leases",
    metadata,
    _key("partition", Integer),
    _col("owner", String, nullable=True),
    _col("address", String),
    _col("epoch", BigInteger),
    _col("expires_ms", BigInteger),
)

# Every table a group tombstone clears (all but the event log).
GROUP_STATE_TABLES = (
    GROUPS_TABLE,
    CONNECTORS_TABLE,
    MEMBERS_TABLE,
    TARGET_MEMBERS_TABLE,
    TARGETS_TABLE,
    MEMBER_ASSIGNMENTS_TABLE,
    HELD_TABLE,
    CONFIGS_TABLE,
    CLASSIC_GROUPS_TABLE,
    CLASSIC_MEMBERS_TABLE,
)
