"""In-memory group state, changed only by `CoordinatorState.replay(record)`.

Live handling and recovery both go through `replay`, so what is in memory is always what the
stored records produce. Replay also maintains the owner index (item -> the member that owns it)
and refuses a record that would give an item to a second owner: the safety invariant is checked
on every single state change, in tests, simulations and production alike.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from services.common.items import EMPTY, Items
from services.coordinator.core.item_index import ItemIndex, ItemKey
from services.coordinator.core.records import (
    AssignorSpec,
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    ConnectorRecord,
    CurrentAssignment,
    CurrentAssignmentValue,
    GroupConfig,
    GroupMetadata,
    GroupMetadataValue,
    HeldAssignment,
    MemberMetadata,
    MemberMetadataValue,
    MemberState,
    RebalanceEvent,
    Record,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
)
from services.coordinator.core.timers import TimerKey, TimerKind

AssignorKey = tuple[tuple[str, int, int], ...]


class GroupState(enum.StrEnum):
    """A group's state, derived from its epochs and its members' states (DescribeGroups shows it)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


EMPTY_GROUP = GroupState.EMPTY
ASSIGNING = GroupState.ASSIGNING
RECONCILING = GroupState.RECONCILING
STABLE = GroupState.STABLE
GROUP_STATES = tuple(GroupState)

# A static member that announced a temporary leave (member epoch -2).
STATIC_LEAVE_EPOCH = -2


class InvariantViolation(AssertionError):
    """A record would put one connector or task in two members' current assignments."""


NO_ASSIGNMENT = CurrentAssignmentValue(
    member_epoch=0, previous_member_epoch=-1, state=MemberState.STABLE, assigned=EMPTY, revoking=EMPTY
)


@dataclass(slots=True)
class Member:
    member_id: str
    meta: MemberMetadataValue
    current: CurrentAssignmentValue = NO_ASSIGNMENT
    # Volatile (not stored): when the session expires; re-armed on load.
    session_deadline_ms: int = 0
    # The newest request_sequence processed from this member (-1: none yet). Set on every request
    # (volatile); its value when the member's assignment last changed is stored with that
    # assignment (CurrentAssignmentValue.request_sequence) and restored by replay.
    last_request_sequence: int = -1
    # Volatile: when the revocation in progress was requested (after a restart: the restart time).
    revoking_since_ms: int = 0
    # Volatile: coordinator time of its last accepted heartbeat (0: none since a restart); recorded
    # in the event of its loss, where the analytics job starts the downtime of its work.
    last_heartbeat_ms: int = 0
    # Volatile: its session timer's key (`session_timer`).
    session_key: TimerKey | None = field(default=None, compare=False, repr=False)
    # Volatile (SPEC §13): when its load report (loads, capacity, rack) was last stored (None: not
    # since a restart), and a newer report that came sooner than half the report interval after it,
    # kept in memory (the newest only) and stored by the first heartbeat once that half passed.
    load_stored_ms: int | None = None
    pending_report: MemberMetadataValue | None = None
    # Volatile: the member epoch of its last request sent at the epoch it had when it arrived (-1:
    # none since a restart, or since it joined). Proof that the worker knows that epoch -- no answer
    # that moved it there was lost -- so an install may move it to the next one without a heartbeat
    # (`_nudge_target`): its request at this epoch is then the lost-response case.
    confirmed_epoch: int = -1

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    def session_timer(self, group_id: str) -> TimerKey:
        """Its session timer's key (`group_id`: the group's own id string, which the timers keep),
        made once: every heartbeat re-arms the same object, without building or hashing a new one."""
        key = self.session_key
        if key is None:
            key = self.session_key = TimerKey(TimerKind.SESSION, group_id, self.member_id)
        return key

    @property
    def owned(self) -> Items:
        return self.current.assigned | self.current.revoking

    def assignor(self, name: str) -> AssignorSpec | None:
        for a in self.meta.assignors:
            if a.name == name:
                return a
        return None


class HandedOut(NamedTuple):
    """A target entry as the coordinator handed it out in a snapshot it vouched for."""

    # The current-target entry as sent: a MemberTarget in Prepare's response, its serialized bytes
    # in the service's request (`assignment.serialize_snapshot`; they keep their items in either
    # form it is sent in).
    entry: Any
    value: TargetMemberValue  # what it was built from


@dataclass(slots=True)
class InFlightAssignment:
    """The assignment being computed: by whom, until when, and from which snapshot of the group."""

    executor: str  # a member id, or SERVICE_EXECUTOR ("") for the assignor service
    started_ms: int
    deadline_ms: int
    # Set once the input was handed out (Prepare, or the service call).
    group_epoch: int = -1
    snapshot_members: dict[str, str | None] = field(default_factory=dict)  # member id -> instance id
    snapshot_connectors: dict[str, int] = field(default_factory=dict)
    assignor_name: str = ""
    # The group's `connector_shrinks` when the snapshot was taken.
    snapshot_shrinks: int = 0
    # When the coordinator vouched for the snapshot's current target, each target member's entry as
    # handed out. A result that gives a member exactly that entry back leaves its target as it is
    # (nothing to decode or check again, see `_install`).
    # None: the snapshot was not vouched for, and a result may not leave members out either
    # (accept_unchanged_omitted is set exactly when it was).
    snapshot_targets: dict[str, HandedOut] | None = None

    @property
    def prepared(self) -> bool:
        return self.group_epoch >= 0


@dataclass(slots=True)
class AssignmentProcessState:
    """Everything volatile about a group's assignment process, in one place (not stored: a restart
    starts a new computation): the computation in flight, the failures since the last install
    (for the backoff and to avoid an executor that just failed), and the last error (DescribeGroups)."""

    in_flight: InFlightAssignment | None = None
    failures: int = 0
    failed_executors: set[str] = field(default_factory=set)
    last_executor: str = ""
    # The group epoch for which "no worker can compute" was said (said once per epoch).
    unassignable_epoch: int = -1
    # (executor, why, when) of the last failed assignment; None: none since the start.
    last_error: tuple[str, str, int] | None = None
    # Push (SPEC §11): the members of the installed target that still have work to do (items to
    # revoke or to receive). Members whose work did not change are nudged to the new epoch only once
    # these are done (`epoch_nudge_due`), so their heartbeats do not queue in front of the ones that
    # move work. A nudge only moves a heartbeat earlier: none of this touches safety.
    awaiting_work: set[str] = field(default_factory=set)
    epoch_nudge_due: bool = False
    # The group's `connector_shrinks` when the snapshot of the installed target was taken (None: no
    # target installed since this process loaded the group). An installed target was validated
    # against that snapshot (each item configured, in one member's target only); it stays so while
    # no connector shrinks, which the assignor is told (`current_target_checked`) so that it need
    # not check every task again.
    target_checked_at: int | None = None


@dataclass(slots=True)
class LoadWatch:
    """Volatile: what the load-imbalance timer (SPEC §13) remembers of a group. `since_ms`: the
    first sample of the imbalance under way (None: balanced at the last sample); `bumped_ms` and
    `bumped_epoch`: the last `load_imbalance` bump; `futile`: the target computed for that bump
    moved nothing (the assignor knows no better placement), so no bump follows until a load report
    changes what is known; `streak`: the `load_imbalance` bumps since the assignor's input last
    changed (a load report, a membership or connector change), bounded by `loads.bump_limit`;
    `ratio`: max over mean at the last sample (the /metrics gauge);
    `logged_ratio` / `logged_missed`: the last sample logged as `load_sampled` (None: none yet)."""

    since_ms: int | None = None
    bumped_ms: int | None = None
    bumped_epoch: int = -1
    futile: bool = False
    streak: int = 0
    ratio: float = 0.0
    logged_ratio: float | None = None
    logged_missed: bool = False


@dataclass(slots=True)
class ClassicMember:
    """A member of a classic group: its stored value, and what the protocol keeps in memory only."""

    member_id: str
    value: ClassicMemberValue
    # Volatile: its session deadline (re-armed on load, with its own session timeout).
    session_deadline_ms: int = 0
    # Volatile: joined in the rebalance under way and not yet through a join phase (Kafka's isNew):
    # its parked JoinGroup does not keep it alive -- it expires at the new-member join timeout.
    is_new: bool = False


@dataclass(slots=True)
class ClassicGroup:
    """The classic protocol's part of a group (SPEC §12, Kafka's ClassicGroup). `value` and
    `members` are what the records replay to; the rest is volatile -- who waits for an answer, who
    must still sync, the pending member ids, the initial delay -- and a restart forgets it: a member
    whose JoinGroup or SyncGroup was parked calls again (as after a Kafka coordinator failover)."""

    value: ClassicGroupValue = field(default_factory=lambda: ClassicGroupValue(0, ClassicGroupState.EMPTY))
    members: dict[str, ClassicMember] = field(default_factory=dict)
    # Derived by replay: how many members support each protocol name, and the protocols' metadata
    # bytes of all members together (group.connect.max.group.metadata.bytes).
    protocol_counts: dict[str, int] = field(default_factory=dict)
    metadata_bytes: int = 0
    # Volatile: members whose JoinGroup / SyncGroup is parked -> the token the runtime holds the
    # call under (`ClassicWait`); answered by `ClassicAnswer` effects.
    awaiting_join: dict[str, int] = field(default_factory=dict)
    awaiting_sync: dict[str, int] = field(default_factory=dict)
    # Volatile: member ids handed out with MEMBER_ID_REQUIRED -> their deadline to join with it.
    pending: dict[str, int] = field(default_factory=dict)
    # Volatile: members that must still send SyncGroup for the current generation.
    pending_sync: set[str] = field(default_factory=set)
    # Volatile: the initial rebalance of an empty group (delay, remaining) while it runs; whether a
    # member joined since the delay was last (re)armed.
    initial_delay: tuple[int, int] | None = None
    new_member_added: bool = False
    # Volatile: why the rebalance under way began (the generation_bumped event says it).
    rebalance_reason: str = ""

    @property
    def state(self) -> ClassicGroupState:
        return self.value.state

    @property
    def generation(self) -> int:
        return self.value.generation

    def all_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member waits in JoinGroup and no handed-out id is pending."""
        return len(self.awaiting_join) == len(self.members) and not self.pending

    def rebalance_timeout_ms(self) -> int:
        """The group's rebalance timeout: the largest of its members'."""
        return max((m.value.rebalance_timeout_ms for m in self.members.values()), default=0)

    def durable(self) -> tuple[Any, ...]:
        """What the stored records describe, and what replay derives from it."""
        return (
            self.value,
            {mid: m.value for mid, m in sorted(self.members.items())},
            dict(sorted(self.protocol_counts.items())),
            self.metadata_bytes,
        )


def classic_metadata_bytes(value: ClassicMemberValue) -> int:
    """The protocol metadata a classic member sent (all its protocols' together)."""
    return sum(len(metadata) for _, metadata in value.protocols)


@dataclass(slots=True)
class Group:
    group_id: str
    meta: GroupMetadataValue
    members: dict[str, Member] = field(default_factory=dict)
    connectors: dict[str, int] = field(default_factory=dict)
    # SPEC §13: the task weights of connectors whose weight is not 1.0 (PutConnector.task_weight).
    task_weights: dict[str, float] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    target_members: dict[str, TargetMemberValue] = field(default_factory=dict)
    target: TargetMetadataValue = field(default_factory=lambda: TargetMetadataValue(assignment_epoch=0))
    held: dict[str, Items] = field(default_factory=dict)
    # Derived indexes, maintained by replay.
    owner: ItemIndex = field(default_factory=ItemIndex)
    held_owner: ItemIndex = field(default_factory=ItemIndex)
    # Item -> the member the target gives it to (whom to nudge when it is released).
    target_owner: ItemIndex = field(default_factory=ItemIndex)
    static_members: dict[str, str] = field(default_factory=dict)
    # The members' assignor lists (names and version ranges) with how many members have each:
    # assignor selection reads this, not every member (a join costs the same at 10 and 10,000).
    assignor_lists: dict[AssignorKey, int] = field(default_factory=dict)
    # How many members are not reconciled with the target (not at the assignment epoch, or not
    # Stable): `state()` reads this, not every member (a heartbeat costs the same at 10 and 10,000).
    unsettled: int = 0
    # How many times a connector was deleted or lost tasks (replay counts it; compared, never stored).
    connector_shrinks: int = 0
    # Volatile: the assignment process (the computation in flight, failures, last error).
    process: AssignmentProcessState = field(default_factory=AssignmentProcessState)
    # Volatile: the last assignment epoch a `group_stable` event was written for.
    stable_logged_epoch: int = -1
    # Volatile: created by a join and not touched by an operator since (no PutConnector, no
    # AlterConfigs); unknown after a restart (False). Such a group, once Empty, is kept one session
    # timeout, not group.connect.empty.retention.ms; `short_retention`: its timer was set so.
    created_by_join: bool = False
    short_retention: bool = False
    # Assignor metadata bytes of all its members (group.connect.max.group.metadata.bytes).
    metadata_bytes: int = 0
    # Members of this `connect` group that use the classic protocol (SPEC §12 online migration;
    # derived by replay): the group goes back to classic when they are all that is left.
    classic_members: int = 0
    # A classic group's classic part (SPEC §12; its GroupMetadata says type `classic`); None for a
    # `connect` group. Connectors and configs stay the group's own, whatever its protocol.
    classic: ClassicGroup | None = None
    # SPEC §13, derived by replay (not compared): the load last reported for each item by any member
    # -- what is known of an item's load after it moved and before its new owner reports it.
    # (connector, task) keys, task -1 for a connector; an item no longer configured is dropped.
    item_loads: dict[tuple[str, int], float] = field(default_factory=dict)
    # Volatile (SPEC §13): the load-imbalance watch (loads.py).
    load_watch: LoadWatch = field(default_factory=lambda: LoadWatch())

    @property
    def epoch(self) -> int:
        return self.meta.epoch

    @property
    def in_flight(self) -> InFlightAssignment | None:
        """The assignment being computed, if any."""
        return self.process.in_flight

    @property
    def assignment_failures(self) -> int:
        return self.process.failures

    @property
    def assignment_epoch(self) -> int:
        return self.target.assignment_epoch

    def target_of(self, member_id: str) -> Items:
        value = self.target_members.get(member_id)
        return value.items if value is not None else EMPTY

    def is_free_for(self, member_id: str, key: ItemKey) -> bool:
        """Whether `member_id` may be given `key` now: nobody else owns it and no fenced member holds it."""
        owner = self.owner.get(key)
        return (owner is None or owner == member_id) and key not in self.held_owner

    def state(self) -> GroupState:
        if not self.members:
            return EMPTY_GROUP
        if self.epoch > self.assignment_epoch:
            return ASSIGNING
        return RECONCILING if self.unsettled else STABLE

    def settled(self, current: CurrentAssignmentValue) -> bool:
        """Whether a member with this assignment is reconciled with the group's target."""
        return current.member_epoch == self.target.assignment_epoch and current.state == MemberState.STABLE

    def count_unsettled(self) -> int:
        """`unsettled` counted from every member (replay keeps it; checks compare the two)."""
        return sum(1 for m in self.members.values() if not self.settled(m.current))

    def pending_of(self, member: Member) -> Items:
        """Target items the member waits for: at its target epoch but still owned by someone else."""
        if member.current.member_epoch != self.assignment_epoch:
            return EMPTY
        return self.target_of(member.member_id) - member.current.assigned


class CoordinatorState:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    def replay(self, record: Record) -> None:
        """Apply one record (live handling and recovery alike)."""
        apply = _REPLAY.get(type(record))
        if apply is None:
            raise TypeError(f"not a record: {record!r}")
        apply(self, record)

    def _group_metadata(self, r: GroupMetadata) -> None:
        if r.value is None:
            self.groups.pop(r.group_id, None)
            return
        group = self.groups.get(r.group_id)
        if group is None:
            self.groups[r.group_id] = Group(r.group_id, r.value)
        else:
            group.meta = r.value

    def _connector(self, r: ConnectorRecord) -> None:
        group = self._group(r.group_id)
        old = group.connectors.get(r.connector)
        if old is not None and (r.task_count is None or r.task_count < old):
            group.connector_shrinks += 1
            if group.item_loads:  # (loads of items no longer configured are forgotten)
                count = r.task_count
                gone = [k for k in group.item_loads if k[0] == r.connector and (count is None or k[1] >= count)]
                for key in gone:
                    del group.item_loads[key]
        if r.task_count is None:
            group.connectors.pop(r.connector, None)
            group.task_weights.pop(r.connector, None)
        else:
            group.connectors[r.connector] = r.task_count
            if r.task_weight != 1.0:
                group.task_weights[r.connector] = r.task_weight
            else:
                group.task_weights.pop(r.connector, None)

    def _member_metadata(self, r: MemberMetadata) -> None:
        group, mid, meta = self._group(r.group_id), r.member_id, r.value
        member = group.members.get(mid)
        if meta is None:
            if member is not None:
                self._set_owned(group, mid, member.owned, EMPTY)
                _count_assignors(group, member.meta, -1)
                group.classic_members -= member.meta.is_classic
                group.unsettled -= not group.settled(member.current)
                del group.members[mid]
                if member.meta.instance_id and group.static_members.get(member.meta.instance_id) == mid:
                    del group.static_members[member.meta.instance_id]
            return
        if meta.item_loads and (member is None or member.meta.item_loads is not meta.item_loads):
            group.item_loads.update(((c, t), load) for c, t, load in meta.item_loads)
        if member is None:
            member = group.members[mid] = Member(mid, meta)
            group.unsettled += not group.settled(member.current)
        else:
            if member.meta.instance_id and member.meta.instance_id != meta.instance_id:
                group.static_members.pop(member.meta.instance_id, None)
            _count_assignors(group, member.meta, -1)
            group.classic_members -= member.meta.is_classic
            member.meta = meta
        _count_assignors(group, meta, 1)
        group.classic_members += meta.is_classic
        if meta.instance_id:
            group.static_members[meta.instance_id] = mid

    def _current_assignment(self, r: CurrentAssignment) -> None:
        group, mid = self._group(r.group_id), r.member_id
        member = group.members.get(mid)
        if member is None:
            if r.value is None:
                return
            raise InvariantViolation(f"assignment record for unknown member {mid} of group {r.group_id}")
        new = r.value if r.value is not None else NO_ASSIGNMENT
        target = group.target_members.get(mid)
        if target is not None and new.assigned is not target.items and new.assigned == target.items:
            new = replace(new, assigned=target.items)  # a settled member's items held once (after a load)
        self._set_owned(group, mid, member.owned, new.assigned | new.revoking)
        group.unsettled += group.settled(member.current) - group.settled(new)
        member.current = new
        if new.request_sequence > member.last_request_sequence:
            member.last_request_sequence = new.request_sequence

    def _target_member(self, r: TargetMember) -> None:
        group, mid = self._group(r.group_id), r.member_id
        member = group.members.get(mid)
        if member is not None:
            # The member's own id string: an Install's are new strings, one per entry, and this one
            # is held by the target and by the target owner index (0.8 MB at 10,000 members).
            mid = member.member_id
        old_target = group.target_members.pop(mid, None)
        if old_target is not None:
            for key in old_target.items.item_keys():
                if group.target_owner.get(key) == mid:
                    del group.target_owner[key]
        if r.value is not None:
            group.target_members[mid] = r.value
            for key in r.value.items.item_keys():
                group.target_owner[key] = mid
            if (
                member is not None
                and member.current.assigned is not r.value.items
                and member.current.assigned == r.value.items
            ):
                member.current = replace(member.current, assigned=r.value.items)  # held once

    def _target_metadata(self, r: TargetMetadata) -> None:
        group = self._group(r.group_id)
        group.target = r.value if r.value is not None else TargetMetadataValue(assignment_epoch=0)
        group.unsettled = group.count_unsettled()  # the assignment epoch may have moved: once per target

    def _held_assignment(self, r: HeldAssignment) -> None:
        group, mid = self._group(r.group_id), r.member_id
        old = group.held.pop(mid, EMPTY)
        for key in old.item_keys():
            if group.held_owner.get(key) == mid:
                del group.held_owner[key]
        if r.items:
            for key in r.items.item_keys():
                holder = group.owner.get(key) or group.held_owner.get(key)
                if holder is not None and holder != mid:
                    raise InvariantViolation(f"{key} held for fenced {mid} is owned by {holder}")
                group.held_owner[key] = mid
            group.held[mid] = r.items

    def _group_config(self, r: GroupConfig) -> None:
        group = self._group(r.group_id)
        if r.value is None:
            group.configs.pop(r.name, None)
        else:
            group.configs[r.name] = r.value

    def _classic_group(self, r: ClassicGroupMetadata) -> None:
        group = self._group(r.group_id)
        if r.value is None:
            group.classic = None
            return
        if group.classic is None:
            group.classic = ClassicGroup(r.value)
        else:
            group.classic.value = r.value

    def _classic_member(self, r: ClassicMemberMetadata) -> None:
        group = self._group(r.group_id)
        classic = group.classic
        if classic is None:
            if r.value is None:
                return  # (the classic part ended before: nothing to remove)
            # (a partial load: the member's row before its group's)
            classic = group.classic = ClassicGroup()
        old = classic.members.get(r.member_id)
        if old is not None:
            _count_protocols(classic, old.value, -1)
        if r.value is None:
            classic.members.pop(r.member_id, None)
            return
        if old is None:
            classic.members[r.member_id] = ClassicMember(r.member_id, r.value)
        else:
            old.value = r.value
        _count_protocols(classic, r.value, 1)

    def _event(self, r: RebalanceEvent) -> None:
        pass  # the event log is not state

    def _group(self, gid: str) -> Group:
        group = self.groups.get(gid)
        if group is None:
            # Records of one group may be replayed before its metadata record (e.g. a partial load).
            group = self.groups[gid] = Group(gid, GroupMetadataValue(epoch=0))
        return group

    @staticmethod
    def _set_owned(group: Group, mid: str, old: Items, new: Items) -> None:
        owner = group.owner
        for key in (old - new).item_keys():
            if owner.get(key) == mid:
                del owner[key]
        for key in (new - old).item_keys():
            holder = owner.get(key)
            if holder is not None and holder != mid:
                raise InvariantViolation(f"{key} would be owned by both {holder} and {mid} in group {group.group_id}")
            held_by = group.held_owner.get(key)
            if held_by is not None:
                raise InvariantViolation(f"{key} given to {mid} while still held for fenced member {held_by}")
            owner[key] = mid


# How each record type is replayed.
_REPLAY: dict[type, Callable[[CoordinatorState, Any], None]] = {
    GroupMetadata: CoordinatorState._group_metadata,
    ConnectorRecord: CoordinatorState._connector,
    MemberMetadata: CoordinatorState._member_metadata,
    CurrentAssignment: CoordinatorState._current_assignment,
    TargetMember: CoordinatorState._target_member,
    TargetMetadata: CoordinatorState._target_metadata,
    HeldAssignment: CoordinatorState._held_assignment,
    GroupConfig: CoordinatorState._group_config,
    ClassicGroupMetadata: CoordinatorState._classic_group,
    ClassicMemberMetadata: CoordinatorState._classic_member,
    RebalanceEvent: CoordinatorState._event,
}


def assignors_key(meta: MemberMetadataValue) -> AssignorKey:
    """What assignor selection reads of a member's list: names and version ranges, in its order."""
    return tuple((a.name, a.minimum_version, a.maximum_version) for a in meta.assignors)


def metadata_bytes(meta: MemberMetadataValue) -> int:
    """The assignor metadata a member sent (all its client assignors' together)."""
    return sum(len(a.metadata) for a in meta.assignors)


def _count_assignors(group: Group, meta: MemberMetadataValue, delta: int) -> None:
    """A member's metadata comes (+1) or goes (-1): the group's counted assignor lists and its
    members' metadata bytes follow. A classic member (SPEC §12) has no list: it never votes for the
    assignor, which the `connect` members choose (or the coordinator's own, without any)."""
    if meta.is_classic:
        return
    group.metadata_bytes += delta * metadata_bytes(meta)
    key = assignors_key(meta)
    n = group.assignor_lists.get(key, 0) + delta
    if n:
        group.assignor_lists[key] = n
    else:
        del group.assignor_lists[key]


def _count_protocols(classic: ClassicGroup, value: ClassicMemberValue, delta: int) -> None:
    """A classic member's protocols come (+1) or go (-1): the counts per name and the metadata bytes follow."""
    classic.metadata_bytes += delta * classic_metadata_bytes(value)
    counts = classic.protocol_counts
    for name, _ in value.protocols:
        n = counts.get(name, 0) + delta
        if n:
            counts[name] = n
        else:
            del counts[name]


# ---- the durable view: what the stored records describe -------------------------------------------

DURABLE_PARTS = (
    "meta",
    "members",
    "connectors",
    "configs",
    "target_members",
    "target",
    "held",
    "owner",
    "target_owner",
    "assignor_lists",
    "unsettled",
    "classic",
    "task_weights",
)


def durable_view(state: CoordinatorState) -> dict[str, tuple[Any, ...]]:
    """The durable state of every group -- what its stored records replay to (volatile state such as
    session deadlines, timers and the assignment in flight excluded) -- plus the indexes replay
    derives from it (owners, target owners, counted assignor lists). Recovery checks compare these: memory, committed and stored must agree."""
    out: dict[str, tuple[Any, ...]] = {}
    for gid, g in sorted(state.groups.items()):
        out[gid] = (
            g.meta,
            {mid: (m.meta, m.current) for mid, m in sorted(g.members.items())},
            dict(sorted(g.connectors.items())),
            dict(sorted(g.configs.items())),
            dict(sorted(g.target_members.items())),
            g.target,
            dict(sorted(g.held.items())),
            dict(g.owner),
            dict(g.target_owner),
            dict(g.assignor_lists),
            g.unsettled,
            g.classic.durable() if g.classic is not None else None,
            dict(sorted(g.task_weights.items())),
        )
    return out


def durable_diff(a: dict[str, tuple[Any, ...]], b: dict[str, tuple[Any, ...]]) -> str:
    """Where two durable views differ, group by group and part by part (for a failure message)."""
    lines = []
    for gid in sorted(set(a) | set(b)):
        ga, gb = a.get(gid), b.get(gid)
        if ga == gb:
            continue
        if ga is None or gb is None:
            lines.append(f"  group {gid}: {ga!r} != {gb!r}")
            continue
        for name, x, y in zip(DURABLE_PARTS, ga, gb, strict=True):
            if x != y:
                lines.append(f"  group {gid} {name}:\n    committed {x!r}\n    recovered {y!r}")
    return "\n".join(lines)
