"""Membership and sessions: joins (static members included), heartbeats, leaves, fencing, expiry,
removal -- and the reconciliation step run on each heartbeat (reconciliation.py decides it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from connect.coordinator.v1 import common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from services.coordinator.core import loads, validation
from services.coordinator.core.assignment import (
    AssignorSelectionError,
    select_assignor_counted,
    version_ranges,
)
from services.coordinator.core.config import (
    MAX_SIZE,
    MODE_SERVICE,
)
from services.coordinator.core.errors import ApiError, invalid
from services.coordinator.core.handler import GROUP_TYPE, NUDGE_TARGET, CoreBase, Result, Sink
from services.coordinator.core.reconciliation import next_assignment
from services.coordinator.core.records import (
    AssignorSpec,
    CurrentAssignment,
    EventType,
    HeldAssignment,
    MemberMetadata,
    MemberMetadataValue,
    MemberState,
    TargetMember,
    shared_assignors,
)
from services.coordinator.core.state import (
    NO_ASSIGNMENT,
    STATIC_LEAVE_EPOCH,
    Group,
    Member,
    assignors_key,
    metadata_bytes,
)
from services.coordinator.core.timers import TimerKey, TimerKind


def _assignors_from_proto(msg: common_pb2.ClientAssignors) -> tuple[AssignorSpec, ...]:
    return shared_assignors(tuple(AssignorSpec.from_proto(a) for a in msg.assignors))


def _classic_member_error(group_id: str, member: Member) -> ApiError:
    """A ConnectGroupHeartbeat naming a member that uses the classic protocol (SPEC §12): refused,
    the member undisturbed."""
    return ApiError(
        ErrorCode.UNKNOWN_MEMBER_ID,
        f"member '{member.member_id}' of group '{group_id}' uses the classic protocol (JoinGroup / SyncGroup / "
        "Heartbeat / LeaveGroup); join with member_epoch 0 and no member id (or another one)",
    )


# Kafka's classic client times its JoinGroup / SyncGroup out at the rebalance timeout plus this
# (AbstractCoordinator's JOIN_GROUP_TIMEOUT_LAPSE; the worker SDK's ClassicConfig.join_margin_ms default).
CLASSIC_JOIN_TIMEOUT_LAPSE_MS = 5_000


def _release_at(member: Member) -> int:
    """Until when a removed member may still run its work. A `connect` worker stops by its session
    (the SDK's session-safety stop). A classic worker may not know the group became a `connect`
    group (its last JoinGroup answer named a leader): a JoinGroup / SyncGroup of its that was lost
    looks parked to it -- a classic coordinator keeps a waiting member alive -- so it runs on until
    that call times out: sent before its session ran out, plus its rebalance timeout and the lapse
    (SPEC §12 rule 6; found by the simulator, mixed seed 7269)."""
    if member.meta.is_classic:
        return member.session_deadline_ms + member.meta.rebalance_timeout_ms + CLASSIC_JOIN_TIMEOUT_LAPSE_MS
    return member.session_deadline_ms


# The fields a steady-state heartbeat sets (besides request_sequence).
_STEADY_FIELDS = frozenset(("group_id", "member_id", "member_epoch"))


def _nudge_if_behind(sink: Sink, group: Group, member: Member) -> None:
    """A lost-response answer tells the member only its epoch. If a newer target waits for it (an
    install moved it quietly, then the next one gave it work), its next heartbeat must reconcile at
    once, not at the interval: the nudge for that target was spent on this request."""
    if member.member_epoch < group.assignment_epoch:
        sink.nudge_requester(group.group_id, NUDGE_TARGET)


def _note_confirmed(member: Member, request_epoch: int, lost_response: bool) -> None:
    """A request at the member's epoch (not the lost-response case): the worker knows its epoch."""
    if not lost_response and request_epoch == member.member_epoch:
        member.confirmed_epoch = request_epoch


class Membership(CoreBase):
    """ConnectGroupHeartbeat and the life of a member in its group."""

    def heartbeat(
        self, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now_ms: int, *, shortcut: bool = True
    ) -> Result:
        """`shortcut=False`: always the full path (the steady-state shortcut's reference, in tests)."""
        if shortcut:
            steady = self.steady_heartbeat(req, now_ms)
            if steady is not None:
                return Result([], steady, [])
        sink = Sink(self.state, now_ms)
        sink.requester = req.member_id
        try:
            self.check_protocol_enabled(GROUP_TYPE)
            validation.check_heartbeat(req, self.config)
            handler = self._leave if req.member_epoch < 0 else self._heartbeat
            response = handler(sink, req, now_ms)
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def _heartbeat(
        self, sink: Sink, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        gid = req.group_id
        group = self.state.groups.get(gid)
        joining = req.member_epoch == 0
        owned = Items.from_proto(req.owned) if req.HasField("owned") else None
        member = group.members.get(req.member_id) if group is not None and req.member_id else None
        if member is not None and member.meta.is_classic:
            raise _classic_member_error(gid, member)
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
            loads.check_owned(None, req)  # (a joining member owns nothing)
            member = self._join(sink, group, req, instance_id, replacing, now)
            sink.requester = member.member_id
            group = self.state.groups[gid]
        else:
            assert group is not None
            if req.member_epoch != member.member_epoch:
                if req.member_epoch < member.member_epoch and req.member_epoch == member.current.previous_member_epoch:
                    # Seed 001 step 3: the response that moved the member to its epoch was lost --
                    # or it was moved there by an install without a heartbeat (`_advance_quietly`).
                    lost_response = self._lost_response(member, req, owned)
                if not lost_response:
                    return self._fence(sink, group, member, req.member_epoch, now)
            loads.check_owned(member, req)
            self._update_member(sink, group, member, req, now)
            member = group.members[member.member_id]

        mid = member.member_id
        session_timeout_ms = self._alive(group, member, req, now)
        _note_confirmed(member, req.member_epoch, lost_response)

        before = member.current
        # A lost-response request is answered with the member's current assignment and changes
        # nothing else: it was sent before the member learned its current epoch (so before any
        # revocation at that epoch reached it: its `owned` cannot acknowledge one), and it may be a
        # duplicate or a replay whose answer the member never sees -- an assignment changed by it
        # would never be sent again.
        if not lost_response:
            self._reconcile(sink, group, member, owned, now)
        else:
            _nudge_if_behind(sink, group, member)
        self._after_change(sink, group, now)

        inflight = group.process.in_flight
        compute = inflight is not None and inflight.executor == mid and not inflight.prepared
        member = group.members[mid]
        resp = self._response(group, member, session_timeout_ms, compute)
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

    def steady_heartbeat(
        self, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse | None:
        """The steady-state heartbeat, short: a settled member of a settled group says it is alive,
        and its request carries nothing but its ids, its epoch and its sequence number.

        For such a request the full path validates, finds nothing to fence, update, reconcile or
        start, re-arms the session and answers with the epoch alone; this does exactly that, with
        the checks that prove it reordered ahead (the full path's steps for it, without the steps
        that are known to do nothing). It is the coordinator's hottest path (every worker, every
        heartbeat interval: docs/benchmarks.md). None: anything else, for the full path.
        `tests/coordinator/test_steady_heartbeat.py` holds it to the full path's answer and state
        over every heartbeat of simulated scenarios."""
        group_id = req.group_id  # (each read of a field makes a new string: read once)
        group = self.state.groups.get(group_id)
        member_epoch = req.member_epoch
        if (
            group is None
            or member_epoch <= 0
            or group.classic_members
            or GROUP_TYPE not in self.config.rebalance_protocols
        ):
            return None  # (the full path refuses a disabled protocol and a classic member's id)
        member_id = req.member_id
        member = group.members.get(member_id)
        if member is None:
            return None
        current = member.current
        epoch = group.assignment_epoch
        process = group.process
        if (
            current.member_epoch != member_epoch
            or current.member_epoch != epoch  # (so nothing to reconcile: Stable at the group's epoch)
            or current.state != MemberState.STABLE
            or group.epoch > epoch  # no assignment to start...
            or process.in_flight is not None  # ...or to compute
            or process.epoch_nudge_due
            or member.pending_report is not None  # (a held load report: stored by the full path)
        ):
            return None
        for field, value in req.ListFields():  # nothing set but the ids, the epoch and the sequence
            name = field.name
            if name == "request_sequence":
                if value <= member.last_request_sequence:
                    return None  # a stale copy: the full path says which
            elif name not in _STEADY_FIELDS:
                return None
        limit = self.config.max_id_length  # (the ids were checked in full when they were created)
        if len(group_id) > limit or len(member_id) > limit:
            return None
        member.confirmed_epoch = member_epoch  # (its request is at its epoch)
        return self._response(group, member, self._alive(group, member, req, now))

    def _alive(self, group: Group, member: Member, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int) -> int:
        """What every accepted heartbeat does: note its sequence number and time, and re-arm the
        member's session. Returns the session timeout."""
        if req.HasField("request_sequence"):
            member.last_request_sequence = req.request_sequence
        session_timeout_ms = self.session_timeout_ms(group)
        # Never earlier than a deadline already set: the member may not have heard yet of a lowered
        # session timeout, and its SDK stops its work only by the session it was last told.
        member.session_deadline_ms = max(member.session_deadline_ms, now + session_timeout_ms)
        self.timer.schedule(member.session_timer(group.group_id), member.session_deadline_ms)
        member.last_heartbeat_ms = now
        return session_timeout_ms

    def _response(
        self, group: Group, member: Member, session_timeout_ms: int, compute: bool = False
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        resp = coordinator_pb2.ConnectGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group),
            session_timeout_ms=session_timeout_ms,
        )
        if compute:
            resp.error_code = ErrorCode.COMPUTE_ASSIGNMENT
            resp.error_message = "compute the group's target assignment (ConnectGroupPrepareAssignment, then ConnectGroupInstallAssignment)"
        return resp

    def _join(
        self,
        sink: Sink,
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
            # SPEC §13: unset -- a static member's previous incarnation's, else 1.0 and none.
            capacity=req.capacity if req.HasField("capacity") else replacing.meta.capacity if replacing else 1.0,
            rack=req.rack if req.HasField("rack") else replacing.meta.rack if replacing else "",
        )
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
        self._check_assignors(group, replacing, meta)
        if group is not None and group.classic is not None:
            # SPEC §12: an empty classic group becomes connect (rule 1), a live one is upgraded (rule 2)
            self._classic_yield_to_connect(sink, group, now)
        mid = req.member_id or self.new_member_id()

        if group is None:
            group = self._create_group(sink, req.group_id, now)
            group.created_by_join = True

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
                url=meta.url,
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
    def _lost_response(member: Member, req: coordinator_pb2.ConnectGroupHeartbeatRequest, owned: Items | None) -> bool:
        """A request at the member's previous epoch: the lost-response case if what it owns is a
        subset of its current assignment. A steady request leaves `owned` out (unchanged since the
        worker's last request); that is judged by the last request this process took from the member
        at that epoch (`confirmed_epoch`): what it owned then is within its assignment, which did not
        change since (a member moved by an install without a heartbeat runs what it ran; one moved by
        a heartbeat whose answer was lost sends a full request). Without that proof (a restart since
        it), the member is asked for a full request, and nothing changes; one that spoke at a newer
        epoch since is replaying an old request (fenced, as any other)."""
        if owned is not None:
            return owned.issubset(member.current.assigned)
        if member.confirmed_epoch == req.member_epoch:
            return True
        if member.confirmed_epoch > req.member_epoch:
            return False  # it has spoken at a newer epoch: a replay
        raise ApiError(
            ErrorCode.STALE_MEMBER_EPOCH,
            f"member_epoch {req.member_epoch} is the member's previous epoch (it is at {member.member_epoch}): "
            "send a full request, with owned, to be moved to its epoch",
        )

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
        self, sink: Sink, group: Group, member: Member, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
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
                self._check_assignors(group, member, replace(meta, assignors=assignors))
                new = replace(new, assignors=assignors)
        if member.pending_report is not None or (
            req.HasField("item_loads") or req.HasField("capacity") or req.HasField("rack")
        ):
            new = self._load_report(group, member, new, req, now)
        if new is meta:
            return
        sink.emit(MemberMetadata(group.group_id, member.member_id, new))
        if self._assignment_input(meta) != self._assignment_input(new):
            # A changed assignor reason or metadata is how a worker asks for a rebalance (seed 001).
            self._bump(sink, group, "member_metadata_changed", member.member_id)

    def _load_report(
        self,
        group: Group,
        member: Member,
        new: MemberMetadataValue,
        req: coordinator_pb2.ConnectGroupHeartbeatRequest,
        now: int,
    ) -> MemberMetadataValue:
        """SPEC §13: `new` (the member's metadata as this heartbeat leaves it) with its newest load
        report -- this heartbeat's fields over a report held in memory -- if it changes the stored
        one and the member's last report was stored at least half a report interval ago; else the
        newest report is held in memory (replacing any held before) and `new` returned as it is."""
        meta = member.meta
        latest = loads.with_report(member.pending_report or meta, req)
        wanted = loads.owned_report(
            replace(new, capacity=latest.capacity, rack=latest.rack, item_loads=latest.item_loads), member
        )
        if (wanted.capacity, wanted.rack, wanted.item_loads) == (meta.capacity, meta.rack, meta.item_loads):
            member.pending_report = None
            return new
        stored = member.load_stored_ms
        if stored is not None and now < stored + self.config.load_report_interval_ms // 2:
            member.pending_report = latest  # too soon: the newest waits (in memory, one per member)
            return new
        member.pending_report = None
        member.load_stored_ms = now
        if loads.report_changes_loads(group, meta, wanted, self.config.load_report_threshold):
            group.load_watch.futile, group.load_watch.streak = False, 0
        if wanted.item_loads:
            key = TimerKey(TimerKind.LOAD, group.group_id)
            if self.timer.deadline(key) is None:
                self.timer.schedule(key, now + loads.sample_period_ms(self._load_cooldown_ms(group)))
        return wanted

    @staticmethod
    def _assignment_input(meta: MemberMetadataValue) -> tuple[Any, ...]:
        return (meta.url, meta.assignors)

    def _check_assignors(self, group: Group | None, leaving: Member | None, joining: MemberMetadataValue) -> None:
        """Whether the group, with `joining`'s list in place of `leaving`'s (a join, a static member
        taking its place back, a member changing its assignors), can still select an assignor -- and
        one that someone can compute. Reads the group's counted lists: O(distinct lists), not O(members)."""
        size = metadata_bytes(joining)
        limit = self.config.max_member_metadata_bytes
        if size > limit:
            raise invalid(
                f"client_assignors: {size} bytes of assignor metadata; group.connect.max.member.metadata.bytes is {limit}"
            )
        if group is not None:
            total = group.metadata_bytes - (metadata_bytes(leaving.meta) if leaving is not None else 0) + size
            if total > self.config.max_group_metadata_bytes:
                raise invalid(
                    f"client_assignors: the group's members would send {total} bytes of assignor metadata together; "
                    f"group.connect.max.group.metadata.bytes is {self.config.max_group_metadata_bytes}"
                )
        own = assignors_key(joining)
        lists = dict(group.assignor_lists) if group is not None else {}
        if leaving is not None:
            key = assignors_key(leaving.meta)
            lists[key] = lists.get(key, 0) - 1
        lists[own] = lists.get(own, 0) + 1
        first = own
        if group is not None:
            first = next(
                (assignors_key(m.meta) for m in group.members.values() if m is not leaving and not m.meta.is_classic),
                own,
            )
        try:
            name = select_assignor_counted(lists, first)
        except AssignorSelectionError as e:
            raise ApiError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"client_assignors: {e}") from None
        ranges = version_ranges(lists, name)
        low, high = min(lo for lo, _ in ranges), max(hi for _, hi in ranges)
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
        elif not any(lo <= low and hi >= high for lo, hi in ranges):
            raise ApiError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"client_assignors: no worker supports every version of '{name}' in use ({low}-{high}), so none can compute the assignment",
            )

    def _reconcile(self, sink: Sink, group: Group, member: Member, owned: Items | None, now: int) -> None:
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
        key = TimerKey(TimerKind.REVOCATION, group.group_id, mid)
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
            self._nudge_waiting(sink, group, before.revoking)
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
        if after.state == MemberState.STABLE and after.member_epoch == group.assignment_epoch:
            self._work_done(group, mid)
        gained = after.assigned - before.assigned
        if gained:
            sink.event(group, EventType.ITEMS_ASSIGNED, mid, after.member_epoch, items=len(gained), **gained.names())

    def _leave(
        self, sink: Sink, req: coordinator_pb2.ConnectGroupHeartbeatRequest, now: int
    ) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        group = self.state.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if group is None or member is None:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member '{req.member_id}' is not a member of group '{req.group_id}'"
            )
        if member.meta.is_classic:
            raise _classic_member_error(group.group_id, member)
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
                self.timer.cancel(TimerKey(TimerKind.REVOCATION, group.group_id, member.member_id))
                sink.event(
                    group,
                    EventType.MEMBER_LEFT,
                    member.member_id,
                    cur.member_epoch,
                    temporary=True,
                    **cur.assigned.names(),
                )
            if group.process.in_flight is not None and group.process.in_flight.executor == member.member_id:
                self._abandon_assignment(sink, group, now, "executor left")
        else:
            self._remove_member(sink, group, member, now, reason=EventType.MEMBER_LEFT, hold=False)
        self._after_change(sink, group, now)
        return coordinator_pb2.ConnectGroupHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence(
        self, sink: Sink, group: Group, member: Member, request_epoch: int, now: int
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

    def _drop_member(self, sink: Sink, group: Group, member: Member) -> None:
        gid, mid = group.group_id, member.member_id
        self._work_done(group, mid)
        sink.emit(CurrentAssignment(gid, mid, None))
        sink.emit(MemberMetadata(gid, mid, None))
        self.timer.cancel(member.session_timer(gid))
        self.timer.cancel(TimerKey(TimerKind.REVOCATION, gid, mid))
        if member.meta.is_classic:  # (SPEC §12: told to rejoin, or to sync)
            self.timer.cancel(TimerKey(TimerKind.CLASSIC_JOIN, gid, mid))
            self.timer.cancel(TimerKey(TimerKind.CLASSIC_SYNC, gid, mid))

    def _remove_member(
        self, sink: Sink, group: Group, member: Member, now: int, reason: EventType, hold: bool, **details: Any
    ) -> None:
        """Remove a member (its target entry stays until the next target, so the assignor sees lost work).

        With `hold`, the member may still be running its work (it was fenced, not confirmed dead): its
        items stay blocked until its session would have expired -- the worker SDK stops by then."""
        gid, mid = group.group_id, member.member_id
        owned = member.owned
        release_at = _release_at(member)
        self._drop_member(sink, group, member)
        if hold and owned and release_at > now:
            held = group.held.get(mid, EMPTY) | owned
            sink.emit(HeldAssignment(gid, mid, held))
            key = TimerKey(TimerKind.HELD, gid, mid)
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
        if group.process.in_flight is not None and group.process.in_flight.executor == mid:
            group.process.in_flight = None
            self.timer.cancel(TimerKey(TimerKind.ASSIGNMENT, gid))
        self._bump(sink, group, reason, mid)
        if owned and not (hold and release_at > now):
            self._nudge_waiting(sink, group, owned)  # its items are free at once

    # ---- timers ---------------------------------------------------------------------------------

    def _on_session_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        member = group.members.get(key.member_id)
        if member is not None and member.session_deadline_ms <= now:
            # A classic worker may still wait in a JoinGroup it believes parked: its work is held.
            hold = member.meta.is_classic
            self._remove_member(sink, group, member, now, reason=EventType.MEMBER_EXPIRED, hold=hold)
        return False

    def _on_revocation_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        member = group.members.get(key.member_id)
        if member is not None and member.current.state == MemberState.UNREVOKED_ITEMS:
            self._remove_member(
                sink, group, member, now, reason=EventType.MEMBER_FENCED, hold=True, cause="rebalance_timeout"
            )
        return False

    def _on_held_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        items = group.held.get(key.member_id)
        if items is not None:
            sink.emit(HeldAssignment(group.group_id, key.member_id, None))
            sink.event(
                group,
                EventType.ITEMS_RELEASED,
                key.member_id,
                items=len(items),
                cause="fenced_session_elapsed",
                **items.names(),
            )
            self._nudge_waiting(sink, group, items)
        return False
