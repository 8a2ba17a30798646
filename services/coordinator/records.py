"""The records the coordinator writes: the only way durable group state changes.

Each record has a key (the fields before ``value``) and a value; ``value is None`` is a tombstone
(the row is deleted). Handlers return records; the runtime writes them to SQL in one transaction
and then applies them to memory with ``GroupState.replay`` -- the same function recovery uses.
Later records for the same key supersede earlier ones, so a batch may be compacted to the last
record per key before it is written.

Shapes follow seed 001's records (group metadata, connectors, member metadata, target assignment,
current member assignment, group configuration), plus two of our own: ``HeldAssignment`` (work of
a fenced member that may still be running it) and ``RebalanceEvent`` (the append-only event log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connect.coordinator.v1 import common_pb2
from services.common.items import Items


@dataclass(frozen=True, slots=True)
class AssignorSpec:
    """One client-side assignor as advertised by a member."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int = 0
    version: int = 0
    metadata: bytes = b""

    @staticmethod
    def from_proto(msg: common_pb2.Assignor) -> AssignorSpec:
        return AssignorSpec(
            msg.name, msg.minimum_version, msg.maximum_version, msg.reason, msg.version, bytes(msg.metadata)
        )

    def to_proto(self) -> common_pb2.Assignor:
        return common_pb2.Assignor(
            name=self.name,
            minimum_version=self.minimum_version,
            maximum_version=self.maximum_version,
            reason=self.reason,
            version=self.version,
            metadata=self.metadata,
        )


# ---- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    group_type: str = "connect"
    created_ms: int = 0


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    url: str
    client_id: str
    rebalance_timeout_ms: int
    assignors: tuple[AssignorSpec, ...]
    joined_ms: int = 0


@dataclass(frozen=True, slots=True)
class TargetMemberValue:
    items: Items
    error: int = 0
    version: int = 0
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class TargetMetadataValue:
    assignment_epoch: int
    error: int = 0
    assignor_name: str = ""
    assignor_state: bytes = b""
    # Coordinator clock (ms) at which a delayed rebalance is due (the assignor's rebalance_delay_ms); 0 = none.
    scheduled_rebalance_ms: int = 0
    # Who computed this target: the assignor service's address, or "worker:<member id>" (client-side).
    computed_by: str = ""


class MemberState:
    STABLE = "Stable"
    UNREVOKED_ITEMS = "UnrevokedItems"
    UNRELEASED_ITEMS = "UnreleasedItems"


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: str
    # What the member may run now.
    assigned: Items
    # What it was asked to stop and has not yet confirmed; still owned by it until then.
    revoking: Items
    error: int = 0
    version: int = 0
    metadata: bytes = b""
    # The newest request_sequence processed from the member when this record was written (-1: none).
    # A request not newer than it is a stale copy -- also after a restart, when the volatile
    # per-member sequence is gone: a delayed copy of a heartbeat sent before a revocation was
    # requested can then never acknowledge it.
    request_sequence: int = -1


# ---- records (key fields, then value; value None = tombstone) ----------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Tombstone deletes the whole group (every row keyed by the group id, except the event log)."""

    group_id: str
    value: GroupMetadataValue | None


@dataclass(frozen=True, slots=True)
class ConnectorRecord:
    group_id: str
    connector: str
    task_count: int | None  # None = tombstone


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    group_id: str
    member_id: str
    value: MemberMetadataValue | None


@dataclass(frozen=True, slots=True)
class TargetMember:
    group_id: str
    member_id: str
    value: TargetMemberValue | None


@dataclass(frozen=True, slots=True)
class TargetMetadata:
    group_id: str
    value: TargetMetadataValue | None


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    group_id: str
    member_id: str
    value: CurrentAssignmentValue | None


@dataclass(frozen=True, slots=True)
class HeldAssignment:
    """Work of a member that was fenced while it may still be running it: nobody else gets it until
    the fenced incarnation's session would have expired (the worker SDK stops by then)."""

    group_id: str
    member_id: str
    items: Items | None  # None = tombstone


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_id: str
    name: str
    value: str | None  # None = tombstone


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    """Append-only event log entry; written in the same transaction as the change it records.
    Not part of the replayed state."""

    group_id: str
    time_ms: int
    event: str
    member_id: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    member_epoch: int = 0
    details: dict[str, Any] = field(default_factory=dict)


Record = (
    GroupMetadata
    | ConnectorRecord
    | MemberMetadata
    | TargetMember
    | TargetMetadata
    | CurrentAssignment
    | HeldAssignment
    | GroupConfig
    | RebalanceEvent
)

STATE_RECORD_TYPES = (
    GroupMetadata,
    ConnectorRecord,
    MemberMetadata,
    TargetMember,
    TargetMetadata,
    CurrentAssignment,
    HeldAssignment,
    GroupConfig,
)


def record_key(record: Record) -> tuple[Any, ...] | None:
    """The compaction key of a state record (None for the append-only event log)."""
    match record:
        case GroupMetadata(group_id=g):
            return ("group", g)
        case ConnectorRecord(group_id=g, connector=c):
            return ("connector", g, c)
        case MemberMetadata(group_id=g, member_id=m):
            return ("member", g, m)
        case TargetMember(group_id=g, member_id=m):
            return ("target_member", g, m)
        case TargetMetadata(group_id=g):
            return ("target", g)
        case CurrentAssignment(group_id=g, member_id=m):
            return ("assignment", g, m)
        case HeldAssignment(group_id=g, member_id=m):
            return ("held", g, m)
        case GroupConfig(group_id=g, name=n):
            return ("config", g, n)
        case _:
            return None


class EventType:
    MEMBER_JOINED = "member_joined"
    MEMBER_LEFT = "member_left"
    MEMBER_FENCED = "member_fenced"
    MEMBER_EXPIRED = "member_expired"
    MEMBER_REPLACED = "static_member_replaced"
    MEMBER_REMOVED = "member_removed"  # by an operator (RemoveMembers)
    GROUP_EPOCH_BUMPED = "group_epoch_bumped"
    ASSIGNMENT_REQUESTED = "assignment_requested"
    ASSIGNMENT_INSTALLED = "assignment_installed"
    ASSIGNMENT_FAILED = "assignment_failed"
    MEMBER_EPOCH_ADVANCED = "member_epoch_advanced"
    REVOCATION_REQUESTED = "revocation_requested"
    REVOCATION_ACKNOWLEDGED = "revocation_acknowledged"
    ITEMS_RELEASED = "items_released"
    ITEMS_ASSIGNED = "items_assigned"
    GROUP_CREATED = "group_created"
    GROUP_DELETED = "group_deleted"
    # Every member at the assignment epoch with nothing pending (the analytics job's `stable_at`).
    GROUP_STABLE = "group_stable"
