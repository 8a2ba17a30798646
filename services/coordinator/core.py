"""The group coordinator's logic: deterministic handlers over in-memory state.

Every handler takes the state, a request and the time (`now_ms`) and returns a `Result`: the
records to write and the response. Records are applied to memory as they are emitted, through
`CoordinatorState.replay` -- the function recovery uses -- so later steps of the same handler and
later requests see them; the runtime writes them to SQL before it sends the response (and reloads
from SQL if that write fails). Volatile state -- session deadlines, timers, the assignment being
computed -- is not stored; `load()` re-arms it after a restart, as Kafka's coordinator does.

No clock, no I/O, no randomness except the injected member-id factory: every scenario of the
seeds is a fast deterministic test, and the simulator can drive millions of steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from connect.coordinator.v1 import admin_pb2, assignor_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, all_items
from services.coordinator import explain, validation
from services.coordinator.assignment import (
    SERVICE_EXECUTOR,
    AssignorSelectionError,
    InFlightAssignment,
    InvalidAssignment,
    build_snapshot,
    executor_candidates,
    select_assignor,
    target_items,
    validate_result,
)
from services.coordinator.config import (
    ASSIGNMENT_MODE,
    HEARTBEAT_INTERVAL,
    MAX_SIZE,
    MODE_SERVICE,
    SCHEDULED_REBALANCE_MAX_DELAY,
    SESSION_TIMEOUT,
    GroupConfigError,
    ServerConfig,
    effective_group_configs,
    validate_group_configs,
)
from services.coordinator.errors import ApiError, clip, invalid
from services.coordinator.explain import SERVICE_LABEL
from services.coordinator.reconciliation import next_assignment
from services.coordinator.records import (
    AssignorSpec,
    ConnectorRecord,
    CurrentAssignment,
    EventType,
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
)
from services.coordinator.state import (
    NO_ASSIGNMENT,
    STABLE,
    STATIC_LEAVE_EPOCH,
    CoordinatorState,
    Group,
    Member,
)
from services.coordinator.timers import Timer

GROUP_TYPE = "connect"


@dataclass
class ServiceAssignment:
    """An assignment the runtime must compute with the assignor service, then report back."""

    group_id: str
    group_epoch: int
    request: assignor_pb2.AssignRequest


# What a handler asks the runtime to do once its records are durable (and never if they are lost).
Effect = ServiceAssignment


@dataclass
class Result:
    records: list[Record]
    response: Any = None
    effects: list[Effect] = field(default_factory=list)


class _Sink:
    """Collects a handler's records and applies each to memory at once (same replay as recovery)."""

    def __init__(self, state: CoordinatorState, now_ms: int) -> None:
        self.state = state
        self.now_ms = now_ms
        self.records: list[Record] = []
        self.effects: list[Effect] = []
        # Groups this handler changed or logged something for (group_stable is only checked for them).
        self.touched: set[str] = set()

    def emit(self, record: Record) -> None:
        self.state.replay(record)
        self.records.append(record)
        self.touched.add(record.group_id)

    def event(self, group: Group, event: str, member_id: str = "", member_epoch: int = 0, **details: Any) -> None:
        self.touched.add(group.group_id)
        self.records.append(
            RebalanceEvent(
                group_id=group.group_id,
                time_ms=self.now_ms,
                event=event,
                member_id=member_id,
                group_epoch=group.epoch,
                assignment_epoch=group.assignment_epoch,
                member_epoch=member_epoch,
                details=details,
            )
        )


def _assignors_from_proto(msg: common_pb2.ClientAssignors) -> tuple[AssignorSpec, ...]:
    return tuple(AssignorSpec.from_proto(a) for a in msg.assignors)


def _session_key(gid: str, mid: str) -> tuple[str, str, str]:
    return ("session", gid, mid)


@dataclass
class GroupCoordinator:
    config: ServerConfig = field(default_factory=ServerConfig)
    # Assignors of the assignor service (name -> version range); None: no service, client-side mode only.
    service_assignors: dict[str, tuple[int, int]] | None = None
    new_member_id: Callable[[], str] = field(default_factory=lambda: lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        self.state = CoordinatorState()
        self.timer = Timer()

    # ---- configuration helpers -------------------------------------------------------------

    def set_service_assignors(self, assignors: dict[str, tuple[int, int]]) -> None:
        """The assignor services' current names (the shell rediscovers them); checked at the next join."""
        self.service_assignors = dict(assignors)

    def group_configs(self, group: Group) -> dict[str, str]:
        return effective_group_configs(self.config, group.configs, self.service_assignors is not None)

    def _int_config(self, group: Group, name: str, default: int) -> int:
        value = group.configs.get(name)
        return int(value) if value is not None else default

    def session_timeout_ms(self, group: Group) -> int:
        return self._int_config(group, SESSION_TIMEOUT, self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group: Group) -> int:
        return self._int_config(group, HEARTBEAT_INTERVAL, self.config.heartbeat_interval_ms)

    def assignment_mode(self, group: Group | None) -> str:
        """The group's assignment.mode; for a group not created yet, the server default."""
        overrides = group.configs if group is not None else {}
        return effective_group_configs(self.config, overrides, self.service_assignors is not None)[ASSIGNMENT_MODE]

    # ---- ConnectGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_heartbeat(req, self.config)
            handler = self._leave if req.member_epoch < 0 else self._heartbeat
            response = handler(sink, req, now_ms)
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def _heartbeat(
        self, sink: _Sink, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        gid = req.group_id
        group = self.state.groups.get(gid)
        joining = req.member_epoch == 0
        owned = Items.from_proto(req.owned) if req.HasField("owned") else None
        member = group.members.get(req.member_id) if group is not None and req.member_id else None
        instance_id = req.instance_id if req.HasField("instance_id") else None

        replacing: Member | None = None
        if group is not None and instance_id is not None:
            holder_id = group.static_members.get(instance_id)
            if holder_id is not None and holder_id != req.member_id:
                holder = group.members[holder_id]
                if not joining:
                    raise ApiError(
                        ErrorCode.FENCED_INSTANCE_ID, f"instance_id '{instance_id}' now belongs to member '{holder_id}'"
                    )
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    raise ApiError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"instance_id '{instance_id}' is still used by member '{holder_id}'; "
                        "it must leave (member_epoch -2) or its session expire first (in at most "
                        f"{max(0, holder.session_deadline_ms - now + 999) // 1000} s)",
                    )
                replacing = holder
            elif holder_id is not None and joining and group.members[holder_id].member_epoch == STATIC_LEAVE_EPOCH:
                # The instance comes back under the same member id: it takes its place back all the same.
                replacing, member = group.members[holder_id], None

        if member is not None:
            self._check_sequence(member, req)
        lost_response = False
        new_member = member is None
        if member is None:
            if not joining:
                raise ApiError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"member '{req.member_id}' is not a member of group '{gid}'; rejoin with member_epoch 0",
                )
            validation.check_join(req)
            member = self._join(sink, group, req, instance_id, replacing, now)
            group = self.state.groups[gid]
        else:
            assert group is not None
            if req.member_epoch != member.member_epoch:
                if (
                    req.member_epoch < member.member_epoch
                    and req.member_epoch == member.current.previous_member_epoch
                    and owned is not None
                    and owned.issubset(member.current.assigned)
                ):
                    # Seed 001 step 3: the response that moved the member to its epoch was lost.
                    lost_response = True
                else:
                    return self._fence(sink, group, member, req.member_epoch, now)
            self._update_member(sink, group, member, req, now)
            member = group.members[member.member_id]

        mid = member.member_id
        if req.HasField("request_sequence"):
            member.last_request_sequence = req.request_sequence
        # Never earlier than a deadline already set: the member may not have heard yet of a lowered
        # session timeout, and its SDK stops its work only by the session it was last told.
        member.session_deadline_ms = max(member.session_deadline_ms, now + self.session_timeout_ms(group))
        self.timer.schedule(_session_key(gid, mid), member.session_deadline_ms)
        member.last_heartbeat_ms = now

        before = member.current
        # A lost-response request is answered with the member's current assignment and changes
        # nothing else: it was sent before the member learned its current epoch (so before any
        # revocation at that epoch reached it: its `owned` cannot acknowledge one), and it may be a
        # duplicate or a replay whose answer the member never sees -- an assignment changed by it
        # would never be sent again.
        if not lost_response:
            self._reconcile(sink, group, member, owned, now)
        self._after_change(sink, group, now)

        inflight = group.in_flight
        compute = inflight is not None and inflight.executor == mid and not inflight.prepared
        member = group.members[mid]
        resp = coordinator_pb2.ConnectGroupHeartbeatResponse(
            error_code=ErrorCode.COMPUTE_ASSIGNMENT if compute else ErrorCode.NONE,
            error_message="compute the group's target assignment (ConnectGroupPrepareAssignment, then ConnectGroupInstallAssignment)"
            if compute
            else "",
            member_id=mid,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group),
            session_timeout_ms=self.session_timeout_ms(group),
        )
        full_request = new_member or (
            req.HasField("rebalance_timeout_ms") and req.HasField("client_assignors") and req.HasField("owned")
        )
        if full_request or lost_response or member.current is not before:
            cur = member.current
            a = resp.assignment
            a.error, a.version, a.metadata = cur.error, cur.version, cur.metadata
            cur.assigned.to_proto(a.assigned)
            group.pending_of(member).to_proto(a.pending)
        return resp

    def _join(
        self,
        sink: _Sink,
        group: Group | None,
        req: coordinator_pb2.ConnectGroupHeartbeatRequest,
        instance_id: str | None,
        replacing: Member | None,
        now: int,
    ) -> Member:
        meta = MemberMetadataValue(
            instance_id=instance_id,
            url=req.url if req.HasField("url") else "",
            client_id=req.client_id if req.HasField("client_id") else "",
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            assignors=_assignors_from_proto(req.client_assignors),
            joined_ms=now,
        )
        others = [m for m in group.members.values() if m is not replacing] if group is not None else []
        if group is not None and replacing is None:
            max_size = self._int_config(group, MAX_SIZE, self.config.max_size)
            if len(group.members) >= max_size:
                raise ApiError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"group '{group.group_id}' has reached its max.size of {max_size} members",
                )
            if len(group.members) >= self.config.max_members_per_group:
                raise ApiError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"group '{group.group_id}' has {len(group.members)} members: "
                    f"group.connect.max.members.per.group is {self.config.max_members_per_group}",
                )
        self._check_assignors(group, [m.meta.assignors for m in others] + [meta.assignors], meta.assignors)
        mid = req.member_id or self.new_member_id()

        if group is None:
            sink.emit(GroupMetadata(req.group_id, GroupMetadataValue(epoch=0, group_type=GROUP_TYPE, created_ms=now)))
            group = self.state.groups[req.group_id]
            sink.event(group, EventType.GROUP_CREATED)

        if replacing is not None:
            # A static member coming back: it takes the old member's place, epoch and assignment,
            # with no rebalance. The old incarnation stopped its work before leaving (-2).
            old = replacing
            old_target = group.target_members.get(old.member_id)
            epoch = old.current.previous_member_epoch
            # Still waiting for items of its target (at that target's epoch): not Stable, or the
            # reconciliation fast path would never hand them over.
            waiting = (
                epoch == group.assignment_epoch
                and old_target is not None
                and bool(old_target.items - old.current.assigned)
            )
            carried = replace(
                old.current,
                member_epoch=epoch,
                previous_member_epoch=-1,
                state=MemberState.UNRELEASED_ITEMS if waiting else MemberState.STABLE,
                revoking=EMPTY,
                request_sequence=-1,  # a new incarnation numbers its requests afresh
            )
            self._drop_member(sink, group, old)
            sink.emit(MemberMetadata(group.group_id, mid, meta))
            sink.emit(CurrentAssignment(group.group_id, mid, carried))
            if old_target is not None:
                sink.emit(TargetMember(group.group_id, old.member_id, None))
                sink.emit(TargetMember(group.group_id, mid, old_target))
            sink.event(
                group,
                EventType.MEMBER_REPLACED,
                mid,
                carried.member_epoch,
                replaced=old.member_id,
                instance_id=instance_id,
                **carried.assigned.names(),
            )
            if self._assignment_input(old.meta) != self._assignment_input(meta):
                self._bump(sink, group, "member_metadata_changed", mid)
        else:
            sink.emit(MemberMetadata(group.group_id, mid, meta))
            sink.emit(CurrentAssignment(group.group_id, mid, NO_ASSIGNMENT))
            sink.event(group, EventType.MEMBER_JOINED, mid, 0, instance_id=instance_id, url=meta.url)
            self._bump(sink, group, "member_joined", mid)
        return group.members[mid]

    @staticmethod
    def _check_sequence(member: Member, req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> None:
        """A request not newer than the last one processed from this member is a stale copy (delayed
        or duplicated by the network): it must change nothing -- not even fence the member."""
        if not req.HasField("request_sequence") or req.request_sequence > member.last_request_sequence:
            return
        code = (
            ErrorCode.DUPLICATE_SEQUENCE_NUMBER
            if req.request_sequence == member.last_request_sequence
            else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        raise ApiError(
            code,
            f"request_sequence {req.request_sequence} is not after {member.last_request_sequence}, the last processed "
            "from this member: this copy is ignored; send a full request if its answer is what you waited for",
        )

    def _update_member(
        self, sink: _Sink, group: Group, member: Member, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> None:
        meta = member.meta
        new = meta
        if req.HasField("url") and req.url != meta.url:
            new = replace(new, url=req.url)
        if req.HasField("client_id") and req.client_id != meta.client_id:
            new = replace(new, client_id=req.client_id)
        if req.HasField("rebalance_timeout_ms") and req.rebalance_timeout_ms != meta.rebalance_timeout_ms:
            new = replace(new, rebalance_timeout_ms=req.rebalance_timeout_ms)
        if req.HasField("client_assignors"):
            assignors = _assignors_from_proto(req.client_assignors)
            if assignors != meta.assignors:
                others = [m.meta.assignors for m in group.members.values() if m is not member]
                self._check_assignors(group, [*others, assignors], assignors)
                new = replace(new, assignors=assignors)
        if new is meta:
            return
        sink.emit(MemberMetadata(group.group_id, member.member_id, new))
        if self._assignment_input(meta) != self._assignment_input(new):
            # A changed assignor reason or metadata is how a worker asks for a rebalance (seed 001).
            self._bump(sink, group, "member_metadata_changed", member.member_id)

    @staticmethod
    def _assignment_input(meta: MemberMetadataValue) -> tuple[Any, ...]:
        return (meta.url, meta.assignors)

    def _check_assignors(
        self, group: Group | None, all_assignors: list[tuple[AssignorSpec, ...]], own: tuple[AssignorSpec, ...]
    ) -> None:
        try:
            name = select_assignor(all_assignors)
        except AssignorSelectionError as e:
            raise ApiError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"client_assignors: {e}") from None
        specs = [next(a for a in lst if a.name == name) for lst in all_assignors]
        low, high = min(a.minimum_version for a in specs), max(a.maximum_version for a in specs)
        mode = self.assignment_mode(group)
        if mode == MODE_SERVICE:
            assert self.service_assignors is not None
            supported = self.service_assignors.get(name)
            if supported is None:
                served = ", ".join(self.service_assignors) or "none yet"
                raise ApiError(
                    ErrorCode.UNSUPPORTED_ASSIGNOR,
                    f"client_assignors: the assignor service does not provide '{name}' (served: {served})",
                )
            if not (supported[0] <= low and high <= supported[1]):
                raise ApiError(
                    ErrorCode.UNSUPPORTED_ASSIGNOR,
                    f"client_assignors: the assignor service supports '{name}' versions {supported[0]}-{supported[1]}, "
                    f"the members use {low}-{high}",
                )
        elif not any(
            a.name == name and a.minimum_version <= low and a.maximum_version >= high
            for a in (x for lst in all_assignors for x in lst)
        ):
            raise ApiError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"client_assignors: no worker supports every version of '{name}' in use ({low}-{high}), so none can compute the assignment",
            )

    def _reconcile(self, sink: _Sink, group: Group, member: Member, owned: Items | None, now: int) -> None:
        mid = member.member_id
        before = member.current
        if before.state == MemberState.STABLE and before.member_epoch == group.assignment_epoch:
            return  # the steady-state fast path: nothing to reconcile
        after = next_assignment(
            before,
            group.assignment_epoch,
            group.target_members.get(mid),
            lambda key: group.is_free_for(mid, key),
            owned,
        )
        if after is before:
            return
        if after.request_sequence != member.last_request_sequence:
            after = replace(after, request_sequence=member.last_request_sequence)
        sink.emit(CurrentAssignment(group.group_id, mid, after))
        key = ("revocation", group.group_id, mid)
        if before.state == MemberState.UNREVOKED_ITEMS and after.state != MemberState.UNREVOKED_ITEMS:
            sink.event(
                group,
                EventType.REVOCATION_ACKNOWLEDGED,
                mid,
                after.member_epoch,
                items=len(before.revoking),
                **before.revoking.names(),
            )
            self.timer.cancel(key)
        if after.state == MemberState.UNREVOKED_ITEMS and after.revoking != before.revoking:
            sink.event(
                group,
                EventType.REVOCATION_REQUESTED,
                mid,
                after.member_epoch,
                items=len(after.revoking),
                **after.revoking.names(),
            )
            self.timer.schedule(key, now + member.meta.rebalance_timeout_ms)
            member.revoking_since_ms = now
        if after.member_epoch != before.member_epoch:
            sink.event(group, EventType.MEMBER_EPOCH_ADVANCED, mid, after.member_epoch, previous=before.member_epoch)
        gained = after.assigned - before.assigned
        if gained:
            sink.event(group, EventType.ITEMS_ASSIGNED, mid, after.member_epoch, items=len(gained), **gained.names())

    # ---- leaving, fencing, expiry ----------------------------------------------------------------

    def _leave(
        self, sink: _Sink, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        group = self.state.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if group is None or member is None:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member '{req.member_id}' is not a member of group '{req.group_id}'"
            )
        self._check_sequence(member, req)
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            if not member.meta.instance_id:
                raise invalid(
                    "member_epoch -2 (temporary leave) is only valid for a static member (one with an instance_id)"
                )
            # Keep its assignment for the instance to come back to; the session timer keeps running.
            cur = member.current
            if cur.member_epoch != STATIC_LEAVE_EPOCH:
                sink.emit(
                    CurrentAssignment(
                        group.group_id,
                        member.member_id,
                        replace(
                            cur,
                            member_epoch=STATIC_LEAVE_EPOCH,
                            previous_member_epoch=cur.member_epoch,
                            state=MemberState.STABLE,
                            revoking=EMPTY,
                        ),
                    )
                )
                self.timer.cancel(("revocation", group.group_id, member.member_id))
                sink.event(
                    group,
                    EventType.MEMBER_LEFT,
                    member.member_id,
                    cur.member_epoch,
                    temporary=True,
                    **cur.assigned.names(),
                )
            if group.in_flight is not None and group.in_flight.executor == member.member_id:
                self._abandon_assignment(sink, group, now, "executor left")
        else:
            self._remove_member(sink, group, member, now, reason=EventType.MEMBER_LEFT, hold=False)
        self._after_change(sink, group, now)
        return coordinator_pb2.ConnectGroupHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence(
        self, sink: _Sink, group: Group, member: Member, request_epoch: int, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        expected = member.member_epoch
        self._remove_member(
            sink, group, member, now, reason=EventType.MEMBER_FENCED, hold=True, request_epoch=request_epoch
        )
        self._after_change(sink, group, now)
        return coordinator_pb2.ConnectGroupHeartbeatResponse(
            error_code=ErrorCode.FENCED_MEMBER_EPOCH,
            error_message=f"member_epoch {request_epoch} does not match the member's epoch {expected}; "
            "the member was removed: abandon all work and rejoin with member_epoch 0",
        )

    def _drop_member(self, sink: _Sink, group: Group, member: Member) -> None:
        gid, mid = group.group_id, member.member_id
        sink.emit(CurrentAssignment(gid, mid, None))
        sink.emit(MemberMetadata(gid, mid, None))
        self.timer.cancel(_session_key(gid, mid))
        self.timer.cancel(("revocation", gid, mid))

    def _remove_member(
        self, sink: _Sink, group: Group, member: Member, now: int, reason: str, hold: bool, **details: Any
    ) -> None:
        """Remove a member (its target entry stays until the next target, so the assignor sees lost work).

        With `hold`, the member may still be running its work (it was fenced, not confirmed dead): its
        items stay blocked until its session would have expired -- the worker SDK stops by then."""
        gid, mid = group.group_id, member.member_id
        owned = member.owned
        release_at = member.session_deadline_ms
        self._drop_member(sink, group, member)
        if hold and owned and release_at > now:
            held = group.held.get(mid, EMPTY) | owned
            sink.emit(HeldAssignment(gid, mid, held))
            key = ("held", gid, mid)
            self.timer.schedule(key, max(release_at, self.timer.deadline(key) or 0))
        sink.event(
            group,
            reason,
            mid,
            member.member_epoch,
            items=len(owned),
            held=bool(hold and owned and release_at > now),
            last_heartbeat_ms=member.last_heartbeat_ms or None,
            **owned.names(),
            **details,
        )
        if group.in_flight is not None and group.in_flight.executor == mid:
            group.in_flight = None
            self.timer.cancel(("assignment", gid))
        self._bump(sink, group, reason, mid)

    # ---- timers --------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> Result:
        """Fire every timer due at `now_ms`: session expiry, revocation timeout, release of held work,
        executor timeout / retry, delayed rebalance, empty-group retention."""
        sink = _Sink(self.state, now_ms)
        for key in self.timer.pop_expired(now_ms):
            kind, gid = key[0], key[1]
            group = self.state.groups.get(gid)
            if group is None:
                continue
            if kind == "session":
                member = group.members.get(key[2])
                if member is not None and member.session_deadline_ms <= now_ms:
                    self._remove_member(sink, group, member, now_ms, reason=EventType.MEMBER_EXPIRED, hold=False)
            elif kind == "revocation":
                member = group.members.get(key[2])
                if member is not None and member.current.state == MemberState.UNREVOKED_ITEMS:
                    self._remove_member(
                        sink,
                        group,
                        member,
                        now_ms,
                        reason=EventType.MEMBER_FENCED,
                        hold=True,
                        cause="rebalance_timeout",
                    )
            elif kind == "held":
                items = group.held.get(key[2])
                if items is not None:
                    sink.emit(HeldAssignment(gid, key[2], None))
                    sink.event(
                        group,
                        EventType.ITEMS_RELEASED,
                        key[2],
                        items=len(items),
                        cause="fenced_session_elapsed",
                        **items.names(),
                    )
            elif kind == "assignment":
                if group.in_flight is not None:
                    self._abandon_assignment(sink, group, now_ms, "executor did not install in time")
            elif kind == "scheduled":
                due = group.target.scheduled_rebalance_ms
                if due and due <= now_ms:
                    sink.emit(TargetMetadata(gid, replace(group.target, scheduled_rebalance_ms=0)))
                    if group.members:
                        self._bump(sink, group, "scheduled_rebalance")
            elif kind == "retention" and not group.members and not group.connectors:
                self._delete_group(sink, group)
                continue
            self._after_change(sink, group, now_ms)
        return Result(sink.records, None, sink.effects)

    def next_deadline(self) -> int | None:
        return self.timer.next_deadline()

    # ---- the assignment process ---------------------------------------------------------------

    def _bump(self, sink: _Sink, group: Group, reason: str, member_id: str = "", **details: Any) -> None:
        sink.emit(GroupMetadata(group.group_id, replace(group.meta, epoch=group.epoch + 1)))
        sink.event(group, EventType.GROUP_EPOCH_BUMPED, member_id, reason=reason, **details)

    def _after_change(self, sink: _Sink, group: Group, now: int) -> None:
        if self.state.groups.get(group.group_id) is not group:
            return
        self._maybe_start_assignment(sink, group, now)
        if (
            group.group_id in sink.touched
            and group.stable_logged_epoch != group.assignment_epoch
            and group.state() == STABLE
        ):
            group.stable_logged_epoch = group.assignment_epoch
            sink.event(group, EventType.GROUP_STABLE)
        key = ("retention", group.group_id)
        if not group.members and not group.connectors:
            if self.timer.deadline(key) is None:
                self.timer.schedule(key, now + self.config.empty_retention_ms)
        else:
            self.timer.cancel(key)

    def _selected_assignor(self, group: Group) -> str:
        return select_assignor([m.meta.assignors for m in group.members.values()])

    def _maybe_start_assignment(self, sink: _Sink, group: Group, now: int) -> None:
        if group.in_flight is not None or not group.members or group.epoch <= group.assignment_epoch:
            return
        key = ("assignment", group.group_id)
        if self.timer.deadline(key) is not None:
            return  # backing off after a failure
        try:
            name = self._selected_assignor(group)
        except AssignorSelectionError:
            return
        if self.assignment_mode(group) == MODE_SERVICE:
            inflight = InFlightAssignment(SERVICE_EXECUTOR, now, now + self.config.assignor_timeout_ms)
            request = self._prepare(group, inflight, name, now)
            sink.effects.append(ServiceAssignment(group.group_id, group.epoch, request))
        else:
            candidates = executor_candidates(group.members, name)
            if not candidates:
                # Said once per epoch: the group stays Assigning until a member able to compute joins.
                if group.unassignable_epoch != group.epoch:
                    group.unassignable_epoch = group.epoch
                    group.last_assignment_error = ("", f"no worker supports every version of '{name}' in use", now)
                    sink.event(
                        group,
                        EventType.ASSIGNMENT_FAILED,
                        reason=f"no worker supports every version of '{name}' in use",
                    )
                return
            # Prefer the previous executor (sticky, like Connect's leader); skip ones that just failed.
            usable = [c for c in candidates if c not in group.failed_executors] or candidates
            executor = group.last_executor if group.last_executor in usable else usable[0]
            timeout = group.members[executor].meta.rebalance_timeout_ms
            inflight = InFlightAssignment(executor, now, now + timeout)
        group.in_flight = inflight
        self.timer.schedule(key, inflight.deadline_ms)
        sink.event(
            group,
            EventType.ASSIGNMENT_REQUESTED,
            inflight.executor,
            executor=inflight.executor or "service",
            assignor=name,
        )

    def _prepare(self, group: Group, inflight: InFlightAssignment, name: str, now: int) -> assignor_pb2.AssignRequest:
        request = build_snapshot(group, name, now, self.group_configs(group))
        inflight.group_epoch = group.epoch
        inflight.assignor_name = name
        inflight.snapshot_members = {mid: m.meta.instance_id for mid, m in group.members.items()}
        inflight.snapshot_connectors = dict(group.connectors)
        return request

    def _abandon_assignment(self, sink: _Sink, group: Group, now: int, why: str, backoff: bool = False) -> None:
        """Give up on the assignment in flight. A worker that timed out is replaced at once; after an
        assignor error or an invalid result, wait (exponential backoff) before asking again."""
        inflight = group.in_flight
        if inflight is None:
            return
        group.in_flight = None
        group.assignment_failures += 1
        if inflight.executor:
            group.failed_executors.add(inflight.executor)
        key = ("assignment", group.group_id)
        self.timer.cancel(key)
        sink.event(
            group, EventType.ASSIGNMENT_FAILED, inflight.executor, executor=inflight.executor or "service", reason=why
        )
        group.last_assignment_error = (inflight.executor or SERVICE_LABEL, why, now)
        if backoff:
            delay = min(
                self.config.assignment_retry_backoff_ms * 2 ** min(group.assignment_failures - 1, 16),
                self.config.assignment_retry_backoff_max_ms,
            )
            self.timer.schedule(key, now + delay)

    # ---- ConnectGroupPrepareAssignment / ConnectGroupInstallAssignment -------------------------

    def _chosen_member(self, group_id: str, member_id: str, member_epoch: int) -> tuple[Group, InFlightAssignment]:
        group = self.state.groups.get(group_id)
        if group is None:
            raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{group_id}' does not exist")
        member = group.members.get(member_id)
        if member is None:
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"member '{member_id}' is not a member of group '{group_id}'")
        if member_epoch != member.member_epoch:
            raise ApiError(
                ErrorCode.STALE_MEMBER_EPOCH,
                f"member_epoch {member_epoch} is not the member's epoch {member.member_epoch}; retry after the next heartbeat",
            )
        inflight = group.in_flight
        if inflight is None or inflight.executor != member_id:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member '{member_id}' is not the member chosen to compute the assignment"
            )
        return group, inflight

    def prepare_assignment(self, req: coordinator_pb2.ConnectGroupPrepareAssignmentRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_member_request(req.group_id, req.member_id, req.member_epoch, self.config)
            group, inflight = self._chosen_member(req.group_id, req.member_id, req.member_epoch)
            name = self._selected_assignor(group)
            snapshot = self._prepare(group, inflight, name, now_ms)
            response = coordinator_pb2.ConnectGroupPrepareAssignmentResponse(
                group_epoch=snapshot.group_epoch,
                assignor_name=snapshot.assignor_name,
                members=snapshot.members,
                connectors=snapshot.connectors,
                current_target=snapshot.current_target,
                assignor_state=snapshot.assignor_state,
                now_ms=snapshot.now_ms,
                group_configs=snapshot.group_configs,
            )
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupPrepareAssignmentResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def install_assignment(self, req: coordinator_pb2.ConnectGroupInstallAssignmentRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_install(req, self.config)
            group, inflight = self._chosen_member(req.group_id, req.member_id, req.member_epoch)
            if not inflight.prepared:
                raise invalid("no assignment input was prepared: call ConnectGroupPrepareAssignment first")
            if req.group_epoch != inflight.group_epoch:
                raise ApiError(
                    ErrorCode.INVALID_ASSIGNMENT,
                    f"group_epoch {req.group_epoch} is not the epoch of the prepared input ({inflight.group_epoch})",
                )
            self._install(
                sink, group, inflight, req.error, req.members, bytes(req.assignor_state), req.rebalance_delay_ms, now_ms
            )
            response = coordinator_pb2.ConnectGroupInstallAssignmentResponse()
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupInstallAssignmentResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def complete_service_assignment(
        self, group_id: str, group_epoch: int, response: assignor_pb2.AssignResponse, now_ms: int, service: str = ""
    ) -> Result:
        """Install the assignor service's answer; `service` (its address) is stored with the target."""
        sink = _Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        inflight = group.in_flight if group is not None else None
        if (
            group is None
            or inflight is None
            or inflight.executor != SERVICE_EXECUTOR
            or inflight.group_epoch != group_epoch
        ):
            return Result([], ErrorCode.NONE)  # superseded (member left, mode changed, restart): ignore
        try:
            self._install(
                sink,
                group,
                inflight,
                response.error,
                response.members,
                bytes(response.assignor_state),
                response.rebalance_delay_ms,
                now_ms,
                error_message=response.error_message,
                computed_by=service,
            )
            return Result(sink.records, ErrorCode.NONE, sink.effects)
        except ApiError as e:
            return Result(sink.records, e.code, sink.effects)

    def fail_service_assignment(self, group_id: str, group_epoch: int, why: str, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        if group is not None and group.in_flight is not None and group.in_flight.group_epoch == group_epoch:
            self._abandon_assignment(sink, group, now_ms, why, backoff=True)
        return Result(sink.records, None, sink.effects)

    def _install(
        self,
        sink: _Sink,
        group: Group,
        inflight: InFlightAssignment,
        error: int,
        members: Iterable[common_pb2.MemberTarget],
        assignor_state: bytes,
        rebalance_delay_ms: int,
        now: int,
        error_message: str = "",
        computed_by: str = "",
    ) -> None:
        gid = group.group_id
        if error != 0:
            # An assignor error keeps the current target (seed 001); ask again after a backoff.
            self._abandon_assignment(
                sink, group, now, f"assignor error {error}: {error_message}".strip(": "), backoff=True
            )
            return
        try:
            by_member = validate_result(
                members, inflight.snapshot_members, inflight.snapshot_connectors, rebalance_delay_ms
            )
        except InvalidAssignment as e:
            self._abandon_assignment(sink, group, now, f"invalid assignment: {e}", backoff=True)
            raise ApiError(ErrorCode.INVALID_ASSIGNMENT, str(e)) from None

        new_target: dict[str, TargetMemberValue] = {}
        for mid, mt in by_member.items():
            if mid not in group.members:
                # A static member replaced since the snapshot: its new incarnation takes the target.
                iid = inflight.snapshot_members.get(mid)
                mid = group.static_members.get(iid, mid) if iid else mid
            new_target[mid] = TargetMemberValue(target_items(mt), mt.error, mt.version, bytes(mt.metadata))
        moved = 0
        old_owner = {key: mid for mid, tv in group.target_members.items() for key in tv.items.item_keys()}
        for mid, tv in new_target.items():
            moved += sum(1 for key in tv.items.item_keys() if old_owner.get(key) not in (None, mid))
            if group.target_members.get(mid) != tv:
                sink.emit(TargetMember(gid, mid, tv))
        for mid in [m for m in group.target_members if m not in new_target]:
            sink.emit(TargetMember(gid, mid, None))
        scheduled = now + rebalance_delay_ms if rebalance_delay_ms > 0 else 0
        sink.emit(
            TargetMetadata(
                gid,
                replace(
                    group.target,
                    assignment_epoch=inflight.group_epoch,
                    error=0,
                    assignor_name=inflight.assignor_name,
                    assignor_state=assignor_state,
                    scheduled_rebalance_ms=scheduled,
                    computed_by=computed_by or (f"worker:{inflight.executor}" if inflight.executor else "service"),
                ),
            )
        )
        if scheduled:
            self.timer.schedule(("scheduled", gid), scheduled)
        else:
            self.timer.cancel(("scheduled", gid))
        group.in_flight = None
        group.assignment_failures = 0
        group.failed_executors.clear()
        group.last_executor = inflight.executor
        self.timer.cancel(("assignment", gid))
        service: dict[str, Any] = {"service": computed_by} if computed_by else {}
        sink.event(
            group,
            EventType.ASSIGNMENT_INSTALLED,
            inflight.executor,
            executor=inflight.executor or "service",
            assignor=inflight.assignor_name,
            moved_items=moved,
            rebalance_delay_ms=rebalance_delay_ms,
            latency_ms=now - inflight.started_ms,
            **service,
        )
        self._after_change(sink, group, now)

    # ---- admin -------------------------------------------------------------------------------

    def _group_or_create(self, sink: _Sink, group_id: str, now: int) -> Group:
        group = self.state.groups.get(group_id)
        if group is None:
            sink.emit(GroupMetadata(group_id, GroupMetadataValue(epoch=0, group_type=GROUP_TYPE, created_ms=now)))
            group = self.state.groups[group_id]
            sink.event(group, EventType.GROUP_CREATED)
        return group

    def put_connector(self, req: admin_pb2.PutConnectorRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.connector, "connector", cfg=self.config)
            limit = self.config.max_tasks_per_connector
            if not 0 <= req.task_count <= limit:
                raise invalid(
                    f"task_count must be between 0 and {limit} (group.connect.max.tasks.per.connector), got {req.task_count}"
                )
            self._check_group_bounds(req.group_id, req.connector, req.task_count)
            group = self._group_or_create(sink, req.group_id, now_ms)
            if group.connectors.get(req.connector) != req.task_count:
                previous = group.connectors.get(req.connector)
                before = all_items({req.connector: previous}) if previous is not None else EMPTY
                after = all_items({req.connector: req.task_count})
                sink.emit(ConnectorRecord(group.group_id, req.connector, req.task_count))
                self._bump(
                    sink,
                    group,
                    "connector_added" if previous is None else "task_count_changed",
                    **(after - before).names(),
                    **(before - after).names("removed_"),
                )
            self._after_change(sink, group, now_ms)
            response = admin_pb2.PutConnectorResponse(group_epoch=group.epoch)
        except ApiError as e:
            response = admin_pb2.PutConnectorResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def _check_group_bounds(self, group_id: str, connector: str, task_count: int) -> None:
        group = self.state.groups.get(group_id)
        connectors = group.connectors if group is not None else {}
        limit = self.config.max_connectors_per_group
        if connector not in connectors and len(connectors) >= limit:
            raise invalid(
                f"connector: group '{clip(group_id)}' already has {len(connectors)} connectors "
                f"(group.connect.max.connectors.per.group = {limit})"
            )
        tasks = sum(connectors.values()) - connectors.get(connector, 0) + task_count
        if tasks > self.config.max_tasks_per_group:
            raise invalid(
                f"task_count: the group would have {tasks} tasks, more than "
                f"group.connect.max.tasks.per.group = {self.config.max_tasks_per_group}"
            )

    def delete_connector(self, req: admin_pb2.DeleteConnectorRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.connector, "connector", cfg=self.config)
            group = self.state.groups.get(req.group_id)
            if group is None:
                raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{req.group_id}' does not exist")
            if req.connector not in group.connectors:
                raise invalid(f"connector '{req.connector}' is not defined in group '{req.group_id}'")
            removed = all_items({req.connector: group.connectors[req.connector]})
            sink.emit(ConnectorRecord(group.group_id, req.connector, None))
            self._bump(sink, group, "connector_removed", **removed.names("removed_"))
            self._after_change(sink, group, now_ms)
            response = admin_pb2.DeleteConnectorResponse(group_epoch=group.epoch)
        except ApiError as e:
            response = admin_pb2.DeleteConnectorResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def alter_configs(self, req: admin_pb2.AlterConfigsRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        try:
            validation.check_alter_configs(req, self.config)
            set_: dict[str, str] = {}
            for i, entry in enumerate(req.set):
                if entry.name in set_:
                    raise invalid(f"set[{i}].name '{clip(entry.name)}' is listed twice")
                set_[entry.name] = entry.value
            group = self.state.groups.get(req.group_id)
            current = dict(group.configs) if group is not None else {}
            try:
                new = validate_group_configs(
                    self.config, current, set_, list(req.delete), self.service_assignors is not None
                )
            except GroupConfigError as e:
                raise invalid(str(e)) from None
            group = self._group_or_create(sink, req.group_id, now_ms)
            old_effective = self.group_configs(group)
            for name in sorted(set(current) | set(new)):
                if current.get(name) != new.get(name):
                    sink.emit(GroupConfig(group.group_id, name, new.get(name)))
            new_effective = self.group_configs(group)
            if old_effective[ASSIGNMENT_MODE] != new_effective[ASSIGNMENT_MODE] and group.in_flight is not None:
                self._abandon_assignment(sink, group, now_ms, "assignment.mode changed")
            if (
                group.members
                and old_effective[SCHEDULED_REBALANCE_MAX_DELAY] != new_effective[SCHEDULED_REBALANCE_MAX_DELAY]
            ):
                self._bump(sink, group, "config_changed")
            self._after_change(sink, group, now_ms)
            response = admin_pb2.AlterConfigsResponse()
        except ApiError as e:
            response = admin_pb2.AlterConfigsResponse(error_code=e.code, error_message=e.message)
        return Result(sink.records, response, sink.effects)

    def delete_groups(self, req: admin_pb2.DeleteGroupsRequest, now_ms: int) -> Result:
        sink = _Sink(self.state, now_ms)
        response = admin_pb2.DeleteGroupsResponse()
        try:
            validation.check_group_ids(req.group_ids, self.config)
        except ApiError as e:
            response.results.add(error_code=e.code, error_message=e.message)
            return Result(sink.records, response, sink.effects)
        for gid in req.group_ids:
            error = self._group_id_error(gid)
            result = response.results.add(group_id=gid if error is None else clip(gid))
            group = self.state.groups.get(gid)
            if error is not None:
                result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, error
            elif group is None:
                result.error_code, result.error_message = ErrorCode.GROUP_ID_NOT_FOUND, f"group '{gid}' does not exist"
            elif group.members:
                result.error_code = ErrorCode.NON_EMPTY_GROUP
                result.error_message = (
                    f"group '{gid}' has {len(group.members)} members; only an empty group can be deleted"
                )
            else:
                self._delete_group(sink, group)
        return Result(sink.records, response, sink.effects)

    def remove_members(self, req: admin_pb2.RemoveMembersRequest, now_ms: int) -> Result:
        """Kafka's RemoveMembersFromConsumerGroup: remove members for good, by member_id or instance_id.

        Safety: a removed member that is still active (not at -2) may still be running its work -- an
        operator cannot know better than the coordinator -- so its items are held like a fenced
        member's, until its session would have expired (the worker SDK stops by then); its next
        heartbeat gets UNKNOWN_MEMBER_ID. A static member that left temporarily (-2) stopped its work
        before leaving, so its items are released at once."""
        sink = _Sink(self.state, now_ms)
        response = admin_pb2.RemoveMembersResponse()
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            if not req.members:
                raise invalid("members must name at least one member")
            validation.check_count(len(req.members), "members", self.config)
            for i, who in enumerate(req.members):
                if bool(who.member_id) == bool(who.instance_id):
                    raise invalid(f"members[{i}]: give exactly one of member_id and instance_id")
                validation.check_id(
                    who.member_id or who.instance_id,
                    f"members[{i}].{'member_id' if who.member_id else 'instance_id'}",
                    cfg=self.config,
                )
            group = self.state.groups.get(req.group_id)
            if group is None:
                raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{req.group_id}' does not exist")
            removed = False
            for who in req.members:
                result = response.results.add(member_id=who.member_id, instance_id=who.instance_id)
                mid = group.static_members.get(who.instance_id) if who.instance_id else who.member_id
                member = group.members.get(mid) if mid else None
                if member is None:
                    name = f"instance_id '{who.instance_id}'" if who.instance_id else f"member '{who.member_id}'"
                    result.error_code = ErrorCode.UNKNOWN_MEMBER_ID
                    result.error_message = f"{name} is not a member of group '{group.group_id}'"
                    continue
                result.member_id, result.instance_id = member.member_id, member.meta.instance_id or ""
                hold = member.member_epoch != STATIC_LEAVE_EPOCH
                self._remove_member(sink, group, member, now_ms, reason=EventType.MEMBER_REMOVED, hold=hold)
                removed = True
            if removed:
                self._after_change(sink, group, now_ms)
            response.group_epoch = group.epoch
        except ApiError as e:
            del response.results[:]
            response.error_code, response.error_message = e.code, e.message
        return Result(sink.records, response, sink.effects)

    def _group_id_error(self, gid: str) -> str | None:
        try:
            validation.check_id(gid, "group_ids: a group id", cfg=self.config)
        except ApiError as e:
            return e.message
        return None

    def _delete_group(self, sink: _Sink, group: Group) -> None:
        sink.event(group, EventType.GROUP_DELETED, **all_items(group.connectors).names("removed_"))
        sink.emit(GroupMetadata(group.group_id, None))
        for kind in ("retention", "scheduled", "assignment"):
            self.timer.cancel((kind, group.group_id))
        for mid in group.held:
            self.timer.cancel(("held", group.group_id, mid))

    # ---- read-only admin ------------------------------------------------------------------------

    def list_groups(self, req: admin_pb2.ListGroupsRequest) -> admin_pb2.ListGroupsResponse:
        try:
            validation.check_list_groups(req, self.config)
        except ApiError as e:
            return admin_pb2.ListGroupsResponse(error_code=e.code)  # the response has no message field
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        response = admin_pb2.ListGroupsResponse()
        for gid in sorted(self.state.groups):
            group = self.state.groups[gid]
            state = group.state()
            if (states and state.lower() not in states) or (types and group.meta.group_type not in types):
                continue
            response.groups.add(group_id=gid, group_state=state, group_type=group.meta.group_type)
        return response

    def describe_groups(self, req: admin_pb2.DescribeGroupsRequest) -> admin_pb2.DescribeGroupsResponse:
        response = admin_pb2.DescribeGroupsResponse()
        try:
            validation.check_group_ids(req.group_ids, self.config)
        except ApiError as e:
            response.groups.add(error_code=e.code, error_message=e.message, group_state="Dead")
            return response
        for gid in req.group_ids:
            error = self._group_id_error(gid)
            described = response.groups.add(group_id=gid if error is None else clip(gid))
            group = self.state.groups.get(gid) if error is None else None
            if error is not None:
                described.error_code, described.error_message = ErrorCode.INVALID_REQUEST, error
                described.group_state = "Dead"
                continue
            if group is None:
                described.error_code = ErrorCode.GROUP_ID_NOT_FOUND
                described.error_message = f"group '{gid}' does not exist"
                described.group_state = "Dead"
                continue
            described.group_type = group.meta.group_type
            described.group_state = group.state()
            described.group_epoch = group.epoch
            described.assignment_epoch = group.assignment_epoch
            described.assignor_name = self._safe_assignor(group)
            described.target_computed_by = group.target.computed_by
            for name in sorted(group.connectors):
                described.connectors.add(name=name, task_count=group.connectors[name])
            for mid, m in group.members.items():
                dm = described.members.add(
                    member_id=mid,
                    instance_id=m.meta.instance_id or "",
                    url=m.meta.url,
                    client_id=m.meta.client_id,
                    member_epoch=m.member_epoch,
                    member_state=m.current.state,
                )
                m.owned.to_proto(dm.assignment)
                group.target_of(mid).to_proto(dm.target_assignment)
                group.pending_of(m).to_proto(dm.pending)
                explain.describe_member(dm, group, m, self.timer)
            explain.describe_group(described, group, self.timer)
        return response

    def describe_configs(self, req: admin_pb2.DescribeConfigsRequest) -> admin_pb2.DescribeConfigsResponse:
        error = self._group_id_error(req.group_id)
        if error is not None:
            return admin_pb2.DescribeConfigsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=error)
        group = self.state.groups.get(req.group_id)
        if group is None:
            return admin_pb2.DescribeConfigsResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"group '{req.group_id}' does not exist"
            )
        response = admin_pb2.DescribeConfigsResponse()
        for name, value in sorted(self.group_configs(group).items()):
            response.configs.add(name=name, value=value, source="group" if name in group.configs else "default")
        return response

    def _safe_assignor(self, group: Group) -> str:
        try:
            return self._selected_assignor(group)
        except AssignorSelectionError:
            return ""

    # ---- recovery ---------------------------------------------------------------------------

    def load(self, records: Iterable[Record], now_ms: int) -> Result:
        """Rebuild memory from stored records (the same replay as live handling), then re-arm what is
        not stored: every member gets a fresh (maximal) session, revocations a fresh rebalance timeout,
        held work a fresh (maximal) session's wait, and groups that need an assignment start one."""
        self.state = CoordinatorState()
        self.timer.clear()
        for record in records:
            self.state.replay(record)
        sink = _Sink(self.state, now_ms)
        for group in list(self.state.groups.values()):
            self._rearm(sink, group, now_ms)
        return Result(sink.records, None, sink.effects)

    def reload_group(self, group_id: str, records: Iterable[Record], now_ms: int) -> Result:
        """Replace one group by its stored records (after a commit touching it failed): the same
        replay and re-arming as `load`, for that group only; every other group is untouched."""
        self.state.groups.pop(group_id, None)
        self.timer.cancel_group(group_id)
        for record in records:
            if record.group_id != group_id:
                raise ValueError(f"record of group '{record.group_id}' in the reload of '{group_id}'")
            self.state.replay(record)
        sink = _Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        if group is not None:
            self._rearm(sink, group, now_ms)
        return Result(sink.records, None, sink.effects)

    def _rearm(self, sink: _Sink, group: Group, now_ms: int) -> None:
        # When each member last heartbeat, and which session timeout it was told then, is not
        # stored; the timeout may have been lowered since (group config, server default). A member
        # must not be expired (its work freed) before it stops that work on its own, so the first
        # deadline after a restart uses the largest timeout it can have been told.
        session = max(self.session_timeout_ms(group), self.config.max_session_timeout_ms)
        for mid, m in group.members.items():
            m.session_deadline_ms = now_ms + session
            self.timer.schedule(_session_key(group.group_id, mid), m.session_deadline_ms)
            if m.current.state == MemberState.UNREVOKED_ITEMS:
                self.timer.schedule(("revocation", group.group_id, mid), now_ms + m.meta.rebalance_timeout_ms)
                m.revoking_since_ms = now_ms
        for mid in group.held:
            self.timer.schedule(("held", group.group_id, mid), now_ms + session)
        if group.target.scheduled_rebalance_ms:
            self.timer.schedule(("scheduled", group.group_id), group.target.scheduled_rebalance_ms)
        self._after_change(sink, group, now_ms)
