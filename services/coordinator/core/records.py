"""The records the coordinator writes: the only way durable group state changes.

Each record type is one typed contract: its ``key`` (the fields before the value) and whether it is
a ``tombstone`` (value None: the row is deleted). Handlers emit records, which are applied to memory
at once with ``CoordinatorState.replay`` -- the same function recovery uses -- and the runtime writes
them to SQL in one transaction before answering. Later records for the same key supersede earlier
ones, so a log may be compacted to the last record per key.

Shapes follow seed 001's records (group metadata, connectors, member metadata, target assignment,
current member assignment, group configuration), plus two of our own: ``HeldAssignment`` (work of
a fenced member that may still be running it) and ``RebalanceEvent`` (the append-only event log),
and the classic protocol's (SPEC §12): ``ClassicGroupMetadata`` and ``ClassicMemberMetadata``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from connect.coordinator.v1 import common_pb2
from services.common.items import Items

# A state record's compaction key: its kind, then its key fields (e.g. ("member", group id, member id)).
RecordKey = tuple[str, ...]


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


_SHARED_ASSIGNOR_LISTS: dict[tuple[AssignorSpec, ...], tuple[AssignorSpec, ...]] = {}
_SHARED_ASSIGNOR_LISTS_MAX = 1024


def shared_assignors(specs: tuple[AssignorSpec, ...]) -> tuple[AssignorSpec, ...]:
    """One object for equal assignor lists: a group's 10,000 workers usually advertise the same
    list, which its members' metadata then holds once (~150 bytes a member otherwise). Bounded:
    clients choose the lists, so past the limit the table starts over (equal lists stay equal)."""
    shared = _SHARED_ASSIGNOR_LISTS.get(specs)
    if shared is not None:
        return shared
    if len(_SHARED_ASSIGNOR_LISTS) >= _SHARED_ASSIGNOR_LISTS_MAX:
        _SHARED_ASSIGNOR_LISTS.clear()
    _SHARED_ASSIGNOR_LISTS[specs] = specs
    return specs


# A member's protocol (DescribedMember.member_type, MemberMetadataValue.member_type).
MEMBER_TYPE_CONNECT = "connect"
MEMBER_TYPE_CLASSIC = "classic"


# ---- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    group_type: str = "connect"
    created_ms: int = 0
    # The group's connector configuration version (SPEC §12, Connect's config offset): one more with
    # every PutConnector / DeleteConnector that changes something; never goes back.
    config_offset: int = 0


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    url: str
    client_id: str
    rebalance_timeout_ms: int
    assignors: tuple[AssignorSpec, ...]
    joined_ms: int = 0
    # SPEC §12 (online migration): `classic` for a classic worker in a `connect` group -- a member
    # converted with its classic group, or a classic JoinGroup to a `connect` group -- reconciled
    # through JoinGroup / SyncGroup / Heartbeat; it has no client assignors (it never computes) and
    # keeps what its JoinGroup said: its session timeout and its protocols (name, metadata), most
    # preferred first (the first is the protocol it is answered in).
    member_type: str = "connect"
    session_timeout_ms: int = 0
    protocols: tuple[tuple[str, bytes], ...] = ()
    # SPEC §13 (migration 0008): what the worker says it can take relative to others (> 0), its rack
    # ("" for none), and the loads it last reported for the items it runs -- (connector, task, load)
    # sorted, task -1 for the connector itself.
    capacity: float = 1.0
    rack: str = ""
    item_loads: tuple[tuple[str, int, float], ...] = ()

    @property
    def is_classic(self) -> bool:
        return self.member_type == MEMBER_TYPE_CLASSIC


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


class MemberState(enum.StrEnum):
    """A member's reconciliation state (seed 002's names)."""

    STABLE = "Stable"
    UNREVOKED_ITEMS = "UnrevokedItems"
    UNRELEASED_ITEMS = "UnreleasedItems"


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
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


class ClassicGroupState(enum.StrEnum):
    """A classic group's state (Kafka's ClassicGroupState, as Kafka spells them)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicGroupValue:
    """A classic group (SPEC §12): its generation, protocol and leader, and its state. Written at
    every change of state, generation or leader, so a restart keeps the generation the members were
    told (Kafka writes it only once the leader's assignment is stored: a failover mid-rebalance went
    back a generation)."""

    generation: int
    state: ClassicGroupState
    protocol_type: str = ""  # "" until a member joined
    protocol_name: str = ""  # the protocol chosen for the generation; "" while Empty
    leader: str = ""  # the leader's member id; "" without members


@dataclass(frozen=True, slots=True)
class ClassicMemberValue:
    """A member of a classic group: what it sent in its JoinGroup and what the leader assigned it."""

    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    # (name, metadata) in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    # Its assignment from the leader's SyncGroup (b"": none yet).
    assignment: bytes = b""
    joined_ms: int = 0


# ---- records (key fields, then value; value None = tombstone) ----------------------------------


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Tombstone deletes the whole group (every row keyed by the group id, except the event log)."""

    group_id: str
    value: GroupMetadataValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("group", self.group_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class ConnectorRecord:
    group_id: str
    connector: str
    task_count: int | None  # None = tombstone
    # SPEC §13 (migration 0008): each task's weight while no load is reported for it (finite, >= 0).
    task_weight: float = 1.0

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("connector", self.group_id, self.connector)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.task_count is None


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    group_id: str
    member_id: str
    value: MemberMetadataValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("member", self.group_id, self.member_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class TargetMember:
    group_id: str
    member_id: str
    value: TargetMemberValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("target_member", self.group_id, self.member_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class TargetMetadata:
    group_id: str
    value: TargetMetadataValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("target", self.group_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    group_id: str
    member_id: str
    value: CurrentAssignmentValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("assignment", self.group_id, self.member_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class HeldAssignment:
    """Work of a member that was fenced while it may still be running it: nobody else gets it until
    the fenced incarnation's session would have expired (the worker SDK stops by then)."""

    group_id: str
    member_id: str
    items: Items | None  # None = tombstone

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("held", self.group_id, self.member_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.items is None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_id: str
    name: str
    value: str | None  # None = tombstone

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("config", self.group_id, self.name)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class ClassicGroupMetadata:
    """A classic group's generation, protocol, leader and state. The group itself is GroupMetadata's
    (type `classic`); this record's tombstone ends its classic part and comes after its members'
    tombstones (no cascade: a member row left behind would bring the classic part back on replay)."""

    group_id: str
    value: ClassicGroupValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("classic_group", self.group_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member of a classic group (tombstone: it left, expired or missed a rebalance)."""

    group_id: str
    member_id: str
    value: ClassicMemberValue | None

    @property
    def key(self) -> RecordKey:
        """The compaction key: a newer record with the same key replaces this one."""
        return ("classic_member", self.group_id, self.member_id)

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes what its key names."""
        return self.value is None


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    """Append-only event log entry; written in the same transaction as the change it records.
    Not part of the replayed state."""

    group_id: str
    time_ms: int
    event: str  # an EventType (stored and read back as its string)
    member_id: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    member_epoch: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    # Not part of the replayed state: no key (never compacted), never a tombstone.
    key: ClassVar[None] = None
    tombstone: ClassVar[bool] = False


Record = (
    GroupMetadata
    | ConnectorRecord
    | MemberMetadata
    | TargetMember
    | TargetMetadata
    | CurrentAssignment
    | HeldAssignment
    | GroupConfig
    | ClassicGroupMetadata
    | ClassicMemberMetadata
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
    ClassicGroupMetadata,
    ClassicMemberMetadata,
)

# The classic protocol's state records (SPEC §12), among STATE_RECORD_TYPES (storage keeps them in
# classic_groups and classic_members, migration 0005).
CLASSIC_RECORD_TYPES = (ClassicGroupMetadata, ClassicMemberMetadata)


def record_key(record: Record) -> RecordKey | None:
    """The compaction key of a state record (None for the append-only event log)."""
    return record.key


class EventType(enum.StrEnum):
    """The event log's event names (the analytics job and `connect-groups events` read them)."""

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
    # Classic groups (SPEC §12): a rebalance began (with its reason), the join phase ended with a new
    # generation (the same reason, the protocol, the leader, the members), the leader's assignment
    # was stored. Members joining, leaving and expiring use the events above.
    CLASSIC_REBALANCE_STARTED = "classic_rebalance_started"
    GENERATION_BUMPED = "generation_bumped"
    CLASSIC_ASSIGNMENT_INSTALLED = "classic_assignment_installed"
    # Online migration (SPEC §12 rules 2 and 4): a classic group became a `connect` group (a
    # `connect` member joined it) or back (its last `connect` member went); details: the generation
    # and the epoch, the members converted.
    GROUP_UPGRADED = "group_upgraded"
    GROUP_DOWNGRADED = "group_downgraded"
    # SPEC §13: the load watch sampled a group with loads and the ratio moved by more than the report
    # threshold since the last logged sample, crossed the goal, or is the watch's first; details:
    # load_ratio, goal, members, members_with_load (the analytics job's ratio over time).
    LOAD_SAMPLED = "load_sampled"
