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

from connect.coordinator.v1 import admin_pb2
from services.assignor import INCREMENTAL_COOPERATIVE, AssignorState
from services.common.items import EMPTY, Items, TaskId
from services.coordinator.core.state import Group, ItemKey, Member
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
