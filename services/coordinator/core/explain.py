"""Why a group is where it is: the DescribeGroups fields that explain what a member or the group
waits for (items being revoked and the deadline, pending items and who holds them, work held for a
fenced member or for the delayed rebalance, the assignment in flight, the last assignment error).

Read-only and derived from the in-memory state and the timers; nothing here is on the heartbeat
path. Some of it is volatile (not stored, re-armed or forgotten at a restart): the session and
revocation deadlines and ``revoking_since_ms`` restart from the load time, the assignment in flight
starts over, and the last assignment error is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from connect.coordinator.v1 import admin_pb2
from services.assignor import INCREMENTAL_COOPERATIVE, AssignorState
from services.classic import CONNECT_PROTOCOL_V0, ProtocolError, decode_assignment, decode_metadata
from services.common.items import EMPTY, Items, TaskId
from services.coordinator.core.classic import _ordered as ordered_members
from services.coordinator.core.records import ClassicGroupState
from services.coordinator.core.state import ClassicGroup, ClassicMember, Group, ItemKey, Member
from services.coordinator.core.timers import Timer, TimerKey, TimerKind

SERVICE_LABEL = "service"  # how the assignor service is named as an executor
HELD_FENCED = "fenced"
HELD_DELAYED_REBALANCE = "delayed_rebalance"


def items_of(keys: Iterable[ItemKey]) -> Items:
    connectors: list[str] = []
    tasks: list[TaskId] = []
    for key in keys:
        if isinstance(key, TaskId):
            tasks.append(key)
        else:
            connectors.append(key)
    return Items.of(connectors, tasks)


def describe_member(dm: admin_pb2.DescribedMember, group: Group, member: Member, timer: Timer) -> None:
    mid = member.member_id
    revoking = member.current.revoking
    if revoking:
        revoking.to_proto(dm.revoking)
        dm.revoking_since_ms = member.revoking_since_ms
        dm.revocation_deadline_ms = timer.deadline(TimerKey(TimerKind.REVOCATION, group.group_id, mid)) or 0
    dm.session_expires_ms = member.session_deadline_ms
    pending = group.pending_of(member)
    if not pending:
        return
    by_holder: dict[tuple[str, bool], list[ItemKey]] = {}
    for key in pending.item_keys():
        owner = group.owner.get(key)
        if owner is not None and owner != mid:
            holder = (owner, False)
        else:
            fenced = group.held_owner.get(key)
            holder = (fenced, True) if fenced is not None else ("", False)
        by_holder.setdefault(holder, []).append(key)
    for (holder_id, fenced_holder), keys in sorted(by_holder.items()):
        entry = dm.pending_holders.add(member_id=holder_id, fenced=fenced_holder)
        items_of(keys).to_proto(entry.items)


def all_items(connectors: dict[str, int]) -> Items:
    return Items.of(connectors, (TaskId(c, t) for c, n in connectors.items() for t in range(n)))


def delayed_work(group: Group) -> list[tuple[str, str, Items]]:
    """Work kept unassigned for the delayed rebalance, as (member id, instance id, items): the items
    of the group that no target member has. The incremental cooperative assignor says in its state
    whose work it was; for another assignor the member is unknown ("")."""
    if not group.target.scheduled_rebalance_ms:
        return []
    targeted = EMPTY
    for value in group.target_members.values():
        targeted = targeted | value.items
    unassigned = all_items(group.connectors) - targeted
    if not unassigned:
        return []
    if group.target.assignor_name == INCREMENTAL_COOPERATIVE:
        state = AssignorState.decode(group.target.assignor_state)
        out = []
        for lost in state.lost:
            mine = lost.items & unassigned
            if mine:
                out.append((lost.member_id, lost.instance_id or "", mine))
        if out:
            return out
    return [("", "", unassigned)]


def describe_group(described: admin_pb2.DescribedGroup, group: Group, timer: Timer) -> None:
    gid = group.group_id
    for mid in sorted(group.held):
        entry = described.held.add(
            reason=HELD_FENCED, member_id=mid, until_ms=timer.deadline(TimerKey(TimerKind.HELD, gid, mid)) or 0
        )
        group.held[mid].to_proto(entry.items)
    scheduled = group.target.scheduled_rebalance_ms
    described.scheduled_rebalance_ms = scheduled
    for mid, instance_id, items in delayed_work(group):
        entry = described.held.add(
            reason=HELD_DELAYED_REBALANCE, member_id=mid, instance_id=instance_id, until_ms=scheduled
        )
        items.to_proto(entry.items)
    inflight = group.process.in_flight
    if inflight is not None:
        f = described.assignment_in_flight
        f.executor = inflight.executor or SERVICE_LABEL
        f.started_ms = inflight.started_ms
        f.deadline_ms = inflight.deadline_ms
    if group.process.last_error is not None:
        executor, message, time_ms = group.process.last_error
        e = described.last_assignment_error
        e.executor, e.message, e.time_ms = executor, message, time_ms


# ---- classic groups (SPEC §12) ----------------------------------------------------------------------

# A classic member's `member_state` in DescribeGroups: where it is in the group's rebalance.
CLASSIC_STABLE = "Stable"  # synced in the current generation
CLASSIC_REJOINING = "Rejoining"  # the group rebalances; told at its next heartbeat, not rejoined yet
CLASSIC_AWAITING_JOIN = "AwaitingJoin"  # rejoined: its JoinGroup waits for the join phase to end
CLASSIC_AWAITING_SYNC = "AwaitingSync"  # in the new generation: its SyncGroup is due, or waits for the leader's
# Its stored bytes are not Connect's protocol: `member_state` is this, ": ", and the codec's error.
CLASSIC_UNREADABLE = "Unreadable"


def group_state(group: Group) -> str:
    """The state DescribeGroups and ListGroups show: a classic group's classic state (Kafka's names)."""
    return group.classic.state.value if group.classic is not None else group.state().value


@dataclass(frozen=True, slots=True)
class ClassicView:
    """A classic member as DescribeGroups shows it."""

    state: str
    url: str
    items: Items  # what it runs, by the coordinator's account


def _classic_state(classic: ClassicGroup, mid: str) -> str:
    if mid in classic.awaiting_join:
        return CLASSIC_AWAITING_JOIN
    if classic.state == ClassicGroupState.PREPARING_REBALANCE:
        return CLASSIC_REJOINING
    if classic.state == ClassicGroupState.COMPLETING_REBALANCE or mid in classic.pending_sync:
        return CLASSIC_AWAITING_SYNC
    return CLASSIC_STABLE


def classic_view(classic: ClassicGroup, member: ClassicMember) -> ClassicView:
    """What a classic member runs, read with Connect's codec from what it sent and was sent.

    Its JoinGroup metadata (of the group's protocol) carries its URL and, from protocol V1 on, its
    allocation: what it ran when it joined. The leader's assignment is whole in V0 (eager: a worker
    revokes everything before it rejoins) and a delta from V1 on (what to start and to stop, applied
    to the allocation: Connect's WorkerCoordinator.onJoinComplete). So a member that rejoined since
    the stored assignment (the group's join phase under way, or its generation not yet synced) runs
    its allocation, and one that has not, its allocation minus the revoked plus the assigned items.
    Bytes that do not decode: nothing, and the state says why."""
    mid = member.member_id
    state = _classic_state(classic, mid)
    protocols = dict(member.value.protocols)
    chosen = classic.value.protocol_name
    raw_metadata = protocols[chosen] if chosen in protocols else member.value.protocols[0][1]
    try:
        metadata = decode_metadata(raw_metadata)
    except ProtocolError as e:
        return ClassicView(f"{CLASSIC_UNREADABLE}: {e}", "", EMPTY)
    allocation = metadata.allocation
    running = Items.of(allocation.connectors, allocation.tasks) if allocation is not None else EMPTY
    rejoined = state in (CLASSIC_AWAITING_JOIN, CLASSIC_AWAITING_SYNC)
    if not rejoined and member.value.assignment:
        try:
            a = decode_assignment(member.value.assignment)
        except ProtocolError as e:
            return ClassicView(f"{CLASSIC_UNREADABLE}: {e}", metadata.url, EMPTY)
        assigned = Items.of(a.connectors, a.tasks)
        if a.version == CONNECT_PROTOCOL_V0:
            running = assigned
        else:
            running = (running - Items.of(a.revoked_connectors, a.revoked_tasks)) | assigned
    return ClassicView(state, metadata.url, running)


def classic_estimate(views: list[ClassicView]) -> int:
    """An upper bound of the classic members' part of a DescribeGroups answer, in bytes (as
    `admin._describe_estimate`: each task listed on its own, with its connector's name)."""
    size = 0
    for v in views:
        size += 1_024 + len(v.state) + len(v.url)
        size += sum(len(key) + 12 if isinstance(key, str) else len(key.connector) + 12 for key in v.items.item_keys())
    return size


def describe_classic(
    described: admin_pb2.DescribedGroup, group: Group, views: list[ClassicView], compact_tasks: bool
) -> None:
    """A classic group's generation, protocol, leader and members (`views`: `classic_view` of each, in
    the order they joined)."""
    classic = group.classic
    assert classic is not None
    v = classic.value
    described.generation_id = v.generation
    described.protocol_name = v.protocol_name
    described.leader_id = v.leader
    for member, view in zip(ordered_members(classic), views, strict=True):
        dm = described.members.add(
            member_id=member.member_id,
            url=view.url,
            client_id=member.value.client_id,
            member_epoch=v.generation,
            member_state=view.state,
            session_expires_ms=member.session_deadline_ms,
        )
        view.items.to_proto(dm.assignment, compact_tasks=compact_tasks)
