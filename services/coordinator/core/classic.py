"""The classic group protocol (SPEC §12): Kafka's `ClassicGroup` and the classic paths of its
`GroupMetadataManager` (classicGroupJoin / classicGroupSync / classicGroupHeartbeat /
classicGroupLeave and their timers), for Connect's embedded protocol. Written from Kafka's rules,
in this core's style: state, request and time in; records, response and effects out.

The life of a classic group: `Empty` -> (a member joins) `PreparingRebalance` -> (every known member
rejoined, or the rebalance timeout passed: those that did not are removed) `CompletingRebalance`
with a new generation, its protocol (one every member supports, by the members' votes) and its leader
-> (the leader's SyncGroup stores every member's assignment) `Stable`. A member joining, leaving,
expiring, changing its protocols, or the leader rejoining starts the next rebalance; the first
rebalance of an empty group waits `group.classic.initial.rebalance.delay.ms` for more members.

**Answers that wait.** Every other handler of the core answers at once; a classic JoinGroup waits for
the end of the join phase, and a SyncGroup for the leader's assignment. The core records who waits
(`ClassicGroup.awaiting_join` / `awaiting_sync`: member -> token) and answers with a `ClassicWait`
(group, member, kind, token) as the handler's response: the runtime parks the call under that
token. Whatever completes the phase later -- another member's request, a timer in `poll` -- returns
one `ClassicAnswer(group, member, token, response)` per waiting member in `Result.answers`, which
the runtime releases like the effects, once the records are durable (never if they are lost), and
delivers to the parked call. When the requester's own call completes the phase, its answer is the
handler's response. A member that calls again while parked has its previous call answered
REBALANCE_IN_PROGRESS; a member removed while parked, UNKNOWN_MEMBER_ID. (The runtime wiring is a
later step of issue 35; it must also fail the parked calls of a group it unloads or reloads, and of
a request whose commit failed, whose waiters the core forgets.)

**Durability.** `ClassicGroupMetadata` (generation, state, protocol type and name, leader) is written
at every change of those, `ClassicMemberMetadata` at every member joined, changed or removed and at
every assignment stored. Unlike Kafka, which writes the group only once the leader's assignment is
stored, the new generation is durable before any member hears of it, so a restart never moves it
back. What waits is volatile: after a load, members get fresh sessions of their own timeout, a group
`PreparingRebalance` waits its rebalance timeout again for its members to rejoin (their parked calls
are gone; they call again, as after a Kafka coordinator failover), one `CompletingRebalance` waits
as long for every member's SyncGroup.

Where this differs from Kafka, on purpose: a SyncGroup from a non-leader carrying assignments, and a
leader's assignment for a member that is not in the generation, are refused INVALID_REQUEST naming
the field, nothing stored (Kafka ignores both; no correct client sends either, SPEC §12 "Bad input");
the protocol type must be `connect` and the protocol names Connect's (`default`, `compatible`,
`sessioned`), else INCONSISTENT_GROUP_PROTOCOL; a member changing its protocols is checked against
the other members' (Kafka counts its old protocols too); a known member's rejoin is never refused for
the group's size; handed-out member ids are bounded by the group size too; the group's protocol is
chosen by vote with ties going to the earliest-joined member's choice (Kafka: map order); after
generation 2147483647 comes 1 (Kafka overflows into negative numbers); there are no static members
(SPEC's JoinGroup has no instance id).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from connect.coordinator.v1 import classic_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core import validation
from services.coordinator.core.config import INT32_MAX, MAX_SIZE
from services.coordinator.core.errors import ApiError, clip, invalid
from services.coordinator.core.handler import GROUP_TYPE, ClassicAnswer, ClassicWait, CoreBase, Result, Sink
from services.coordinator.core.records import (
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    EventType,
    GroupMetadata,
)
from services.coordinator.core.state import ClassicGroup, ClassicMember, Group, classic_metadata_bytes
from services.coordinator.core.timers import TimerKey, TimerKind

CLASSIC_GROUP_TYPE = "classic"
# Kafka Connect's classic protocol type and protocol names (WorkerCoordinator / ConnectProtocolCompatibility).
CONNECT_PROTOCOL_TYPE = "connect"
CONNECT_PROTOCOLS = ("default", "compatible", "sessioned")
# Kafka's classicGroupNewMemberJoinTimeoutMs: a member's first JoinGroup cannot heartbeat while it
# is parked, so it is given this long instead of its session before it is dropped.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
MAX_REASON_LENGTH = 1024

EMPTY = ClassicGroupState.EMPTY
PREPARING = ClassicGroupState.PREPARING_REBALANCE
COMPLETING = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE

JOIN = "join"
SYNC = "sync"

Protocols = tuple[tuple[str, bytes], ...]


def _protocols(req: classic_pb2.JoinGroupRequest) -> Protocols:
    return tuple((p.name, bytes(p.metadata)) for p in req.protocols)


def _next_generation(generation: int) -> int:
    """The generation after `generation`: int32 on the wire, so after 2147483647 comes 1 (never 0,
    the generation of a group that never rebalanced, nor a negative one)."""
    return generation + 1 if generation < INT32_MAX else 1


def _ordered(classic: ClassicGroup) -> list[ClassicMember]:
    """The members in the order they joined (then by id): the same after a restart, whatever order
    the records came back in."""
    return sorted(classic.members.values(), key=lambda m: (m.value.joined_ms, m.member_id))


class ClassicGroups(CoreBase):
    """ConnectClassicGroup's handlers, and the timers of classic groups."""

    # The last token handed to a parked call (see ClassicWait); counts up for the coordinator's life.
    _classic_token: int = 0

    # ---- the handlers ---------------------------------------------------------------------------

    def join_group(self, req: classic_pb2.JoinGroupRequest, now_ms: int) -> Result:
        """The answer, or a `ClassicWait`: the call waits for the join phase to end."""
        sink = Sink(self.state, now_ms)
        try:
            self._check_join_request(req)
            response: Any = self._join_group(sink, req, now_ms)
        except ApiError as e:
            response = classic_pb2.JoinGroupResponse(error_code=e.code, error_message=e.message)
        return self._classic_result(sink, response)

    def sync_group(self, req: classic_pb2.SyncGroupRequest, now_ms: int) -> Result:
        """The answer, or a `ClassicWait`: the call waits for the leader's assignment."""
        sink = Sink(self.state, now_ms)
        try:
            self._check_sync_request(req)
            response = self._sync_group(sink, req, now_ms)
        except ApiError as e:
            response = classic_pb2.SyncGroupResponse(error_code=e.code, error_message=e.message)
        return self._classic_result(sink, response)

    def classic_heartbeat(self, req: classic_pb2.HeartbeatRequest, now_ms: int) -> Result:
        """Writes nothing: it re-arms the member's session and says whether to rejoin."""
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.member_id, "member_id", cfg=self.config)
            group, member = self._classic_member(req.group_id, req.member_id)
            classic = group.classic
            assert classic is not None
            self._check_generation(classic, req.generation_id)
            self._arm_session(group, member, now_ms)
            if classic.state == PREPARING:
                raise ApiError(
                    ErrorCode.REBALANCE_IN_PROGRESS,
                    f"group '{req.group_id}' is rebalancing (generation {classic.generation}): rejoin (JoinGroup)",
                )
            response = classic_pb2.HeartbeatResponse()
        except ApiError as e:
            response = classic_pb2.HeartbeatResponse(error_code=e.code, error_message=e.message)
        return Result([], response, [])

    def leave_group(self, req: classic_pb2.LeaveGroupRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        response = classic_pb2.LeaveGroupResponse()
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            if not req.member_ids:
                raise invalid("member_ids must name at least one member")
            validation.check_count(len(req.member_ids), "member_ids", self.config)
            for i, mid in enumerate(req.member_ids):
                validation.check_id(mid, f"member_ids[{i}]", cfg=self.config)
            group = self.state.groups.get(req.group_id)
            classic = group.classic if group is not None else None
            if group is None or classic is None:
                raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"group '{req.group_id}' has no classic members")
            left = False
            for mid in req.member_ids:
                result = response.results.add(member_id=mid)
                if mid in classic.pending:
                    del classic.pending[mid]
                    self.timer.cancel(TimerKey(TimerKind.CLASSIC_SESSION, group.group_id, mid))
                    left = True
                elif mid in classic.members:
                    self._drop_classic_member(sink, group, classic.members[mid], EventType.MEMBER_LEFT)
                    left = True
                else:
                    result.error_code = ErrorCode.UNKNOWN_MEMBER_ID
                    result.error_message = f"member '{mid}' is not a member of group '{group.group_id}'"
            if left:
                self._after_removal(sink, group, "members_left", now_ms)
                self._after_change(sink, group, now_ms)
        except ApiError as e:
            del response.results[:]
            response.error_code, response.error_message = e.code, e.message
        return sink.result(response)

    # ---- JoinGroup ------------------------------------------------------------------------------

    def _check_join_request(self, req: classic_pb2.JoinGroupRequest) -> None:
        """Every field of a JoinGroup, before anything is looked up or changed."""
        cfg = self.config
        validation.check_id(req.group_id, "group_id", cfg=cfg)
        validation.check_id(req.member_id, "member_id", required=False, cfg=cfg)
        validation.check_id(req.protocol_type, "protocol_type", cfg=cfg)
        if req.protocol_type != CONNECT_PROTOCOL_TYPE:
            raise ApiError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol_type '{clip(req.protocol_type)}' is not supported: this coordinator runs Kafka Connect "
                f"groups (protocol_type '{CONNECT_PROTOCOL_TYPE}')",
            )
        if not req.protocols:
            raise invalid("protocols must list at least one protocol")
        self._check_unique_ids([p.name for p in req.protocols], "protocols", "name")
        for i, p in enumerate(req.protocols):
            if p.name not in CONNECT_PROTOCOLS:
                raise ApiError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"protocols[{i}].name '{clip(p.name)}' is not a Connect protocol "
                    f"(known: {', '.join(CONNECT_PROTOCOLS)})",
                )
        size = sum(len(p.metadata) for p in req.protocols)
        if size > cfg.max_member_metadata_bytes:
            raise invalid(
                f"protocols: {size} bytes of protocol metadata; group.connect.max.member.metadata.bytes is "
                f"{cfg.max_member_metadata_bytes}"
            )
        low, high = cfg.classic_min_session_timeout_ms, cfg.classic_max_session_timeout_ms
        if not low <= req.session_timeout_ms <= high:
            raise invalid(
                f"session_timeout_ms must be between {low} (group.classic.min.session.timeout.ms) and {high} "
                f"(group.classic.max.session.timeout.ms), got {req.session_timeout_ms}"
            )
        if not 1 <= req.rebalance_timeout_ms <= cfg.max_rebalance_timeout_ms:
            raise invalid(
                f"rebalance_timeout_ms must be between 1 and {cfg.max_rebalance_timeout_ms} "
                f"(group.connect.max.rebalance.timeout.ms), got {req.rebalance_timeout_ms}"
            )
        if req.HasField("client_id"):
            validation.check_text(req.client_id, "client_id", cfg.max_id_length, " (group.connect.max.id.length)")
        if req.HasField("reason"):
            validation.check_text(req.reason, "reason", MAX_REASON_LENGTH)

    def _check_unique_ids(self, ids: list[str], field: str, name: str) -> None:
        """Each of `ids` (`field[i].name`) a valid id, none twice."""
        seen: set[str] = set()
        for i, value in enumerate(ids):
            validation.check_id(value, f"{field}[{i}].{name}", cfg=self.config)
            if value in seen:
                raise invalid(f"{field}[{i}].{name} '{clip(value)}' is listed twice")
            seen.add(value)

    def _join_group(
        self, sink: Sink, req: classic_pb2.JoinGroupRequest, now: int
    ) -> classic_pb2.JoinGroupResponse | ClassicWait:
        gid, mid = req.group_id, req.member_id
        group = self.state.groups.get(gid)
        classic = group.classic if group is not None else None
        if group is not None and classic is None and (group.members or group.held):
            # SPEC §12 rule 5 (converting a live group is a later step: rules 2-4).
            raise ApiError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group '{gid}' is a {GROUP_TYPE} group with {len(group.members)} members"
                + (f" and work held for {len(group.held)} fenced members" if group.held else "")
                + ": a classic member cannot join it",
            )
        member = classic.members.get(mid) if classic is not None and mid else None
        if mid and member is None and (classic is None or mid not in classic.pending):
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{clip(mid)}' is not a member of group '{gid}': rejoin without a member id",
            )
        protocols = _protocols(req)
        if group is not None and classic is not None:
            self._check_protocols(classic, req.protocol_type, protocols, member)
            self._check_group_size(group, classic, mid, member)
        # Every check is done: from here on the request changes the group.
        if group is None:
            group = self._create_group(sink, gid, now)
            group.created_by_join = True
        if classic is None:
            classic = self._become_classic(sink, group, now)
        if not mid:
            response = self._hand_out_member_id(group, classic, req, now)
            self._after_change(sink, group, now)
            return response
        if member is None:
            return self._add_member(sink, group, classic, req, protocols, now)
        return self._rejoin(sink, group, classic, member, req, protocols, now)

    def _check_protocols(
        self, classic: ClassicGroup, protocol_type: str, protocols: Protocols, member: ClassicMember | None
    ) -> None:
        """Kafka's supportsProtocols: an empty group takes any protocols; otherwise the protocol type
        must be the group's and one of the protocols supported by every other member."""
        others = len(classic.members) - (member is not None)
        if not others:
            return
        if protocol_type != classic.value.protocol_type:
            raise ApiError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol_type '{clip(protocol_type)}' is not the group's ('{classic.value.protocol_type}')",
            )
        own = {name for name, _ in member.value.protocols} if member is not None else set()
        if not any(classic.protocol_counts.get(name, 0) - (name in own) == others for name, _ in protocols):
            common = sorted(name for name, n in classic.protocol_counts.items() if n - (name in own) == others)
            raise ApiError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocols: none of {', '.join(name for name, _ in protocols)} is supported by every other "
                f"member of the group (they all support: {', '.join(common) or 'nothing in common'})",
            )
        size = sum(len(metadata) for _, metadata in protocols)
        total = classic.metadata_bytes - (classic_metadata_bytes(member.value) if member is not None else 0) + size
        if total > self.config.max_group_metadata_bytes:
            raise invalid(
                f"protocols: the group's members would send {total} bytes of protocol metadata together; "
                f"group.connect.max.group.metadata.bytes is {self.config.max_group_metadata_bytes}"
            )

    def _check_group_size(self, group: Group, classic: ClassicGroup, mid: str, member: ClassicMember | None) -> None:
        """Kafka's acceptJoiningMember: while rebalancing, the members that rejoined count (so the last
        to rejoin are the ones refused if the group is over its size); otherwise all of them. A known
        member is always taken back; handed-out member ids count against the size too."""
        if member is not None:
            return
        limit = min(self._int_config(group, MAX_SIZE, self.config.max_size), self.config.max_members_per_group)
        state = classic.state
        counted = len(classic.awaiting_join) if state == PREPARING else len(classic.members)
        if state != EMPTY and counted >= limit:
            raise ApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group '{group.group_id}' has reached its size of {limit} members "
                "(max.size, group.connect.max.members.per.group)",
            )
        if not mid and len(classic.pending) >= limit:
            raise ApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group '{group.group_id}' has handed out {len(classic.pending)} member ids not yet used to join; "
                f"its size is {limit} members",
            )

    def _become_classic(self, sink: Sink, group: Group, now: int) -> ClassicGroup:
        """A new group, or an empty `connect` group, becomes a classic group (SPEC §12 rule 1), its
        generation starting at its epoch so that it never goes back; its connectors and configs stay."""
        if group.process.in_flight is not None:
            self._abandon_assignment(sink, group, now, "the group became classic")
        sink.emit(GroupMetadata(group.group_id, replace(group.meta, group_type=CLASSIC_GROUP_TYPE)))
        sink.emit(ClassicGroupMetadata(group.group_id, ClassicGroupValue(generation=group.epoch, state=EMPTY)))
        classic = group.classic
        assert classic is not None
        return classic

    def _hand_out_member_id(
        self, group: Group, classic: ClassicGroup, req: classic_pb2.JoinGroupRequest, now: int
    ) -> classic_pb2.JoinGroupResponse:
        """Kafka's MEMBER_ID_REQUIRED: the id is pending (volatile) until the member joins with it, or
        its session timeout passes."""
        new_id = self.new_member_id()
        classic.pending[new_id] = now + req.session_timeout_ms
        self.timer.schedule(TimerKey(TimerKind.CLASSIC_SESSION, group.group_id, new_id), now + req.session_timeout_ms)
        return classic_pb2.JoinGroupResponse(
            error_code=ErrorCode.MEMBER_ID_REQUIRED,
            error_message="rejoin with this member_id",
            member_id=new_id,
        )

    def _add_member(
        self,
        sink: Sink,
        group: Group,
        classic: ClassicGroup,
        req: classic_pb2.JoinGroupRequest,
        protocols: Protocols,
        now: int,
    ) -> ClassicWait:
        gid, mid = group.group_id, req.member_id
        del classic.pending[mid]
        value = ClassicMemberValue(
            client_id=req.client_id,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocols=protocols,
            joined_ms=now,
        )
        if not classic.members:
            self._set_group(sink, group, protocol_type=req.protocol_type, leader=mid)
        sink.emit(ClassicMemberMetadata(gid, mid, value))
        member = classic.members[mid]
        member.is_new = True
        # Its parked JoinGroup cannot heartbeat: dropped if the join phase does not end in time.
        member.session_deadline_ms = now + NEW_MEMBER_JOIN_TIMEOUT_MS
        self.timer.schedule(TimerKey(TimerKind.CLASSIC_SESSION, gid, mid), member.session_deadline_ms)
        if classic.state == PREPARING and classic.initial_delay is not None:
            classic.new_member_added = True
        self._event(sink, group, EventType.MEMBER_JOINED, mid, client_id=value.client_id, reason=req.reason or None)
        wait = self._park(sink, group, mid, JOIN)
        self._rebalance_or_complete_join(sink, group, "member_joined", now)
        self._after_change(sink, group, now)
        return wait

    def _rejoin(
        self,
        sink: Sink,
        group: Group,
        classic: ClassicGroup,
        member: ClassicMember,
        req: classic_pb2.JoinGroupRequest,
        protocols: Protocols,
        now: int,
    ) -> classic_pb2.JoinGroupResponse | ClassicWait:
        """Kafka's classicGroupJoinExistingMember."""
        mid = member.member_id
        same = member.value.protocols == protocols
        state = classic.state
        if state == COMPLETING and same:
            # It missed its JoinGroup answer: the current generation's again.
            return self._join_answer(classic, mid)
        if state == STABLE and same and mid != classic.value.leader:
            # A follower with nothing new: the current generation, then SyncGroup.
            return self._join_answer(classic, mid, with_members=False)
        new = replace(
            member.value,
            client_id=req.client_id,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocols=protocols,
        )
        if new != member.value:
            sink.emit(ClassicMemberMetadata(group.group_id, mid, new))
        wait = self._park(sink, group, mid, JOIN)
        if state == PREPARING:
            self._maybe_complete_join(sink, group, now)
        else:  # the leader rejoining, or a member with new protocols
            why = "metadata_changed" if not same else "leader_rejoined"
            self._prepare_rebalance(sink, group, why, now, mid)
        self._after_change(sink, group, now)
        return wait

    def _join_answer(self, classic: ClassicGroup, mid: str, with_members: bool = True) -> classic_pb2.JoinGroupResponse:
        """The current generation's JoinGroup answer for `mid`; the leader's lists every member with its
        metadata for the group's protocol."""
        v = classic.value
        response = classic_pb2.JoinGroupResponse(
            generation_id=v.generation, protocol_name=v.protocol_name, leader=v.leader, member_id=mid
        )
        if with_members and mid == v.leader:
            for m in _ordered(classic):
                response.members.add(member_id=m.member_id, metadata=dict(m.value.protocols)[v.protocol_name])
        return response

    # ---- SyncGroup ------------------------------------------------------------------------------

    def _check_sync_request(self, req: classic_pb2.SyncGroupRequest) -> None:
        cfg = self.config
        validation.check_id(req.group_id, "group_id", cfg=cfg)
        validation.check_id(req.member_id, "member_id", cfg=cfg)
        if req.HasField("protocol_name"):
            validation.check_id(req.protocol_name, "protocol_name", cfg=cfg)
        if req.HasField("protocol_type"):
            validation.check_id(req.protocol_type, "protocol_type", cfg=cfg)
        validation.check_count(len(req.assignments), "assignments", cfg)
        self._check_unique_ids([a.member_id for a in req.assignments], "assignments", "member_id")
        size = sum(len(a.assignment) for a in req.assignments)
        if size > cfg.max_group_metadata_bytes:
            raise invalid(
                f"assignments: {size} bytes together; group.connect.max.group.metadata.bytes is "
                f"{cfg.max_group_metadata_bytes}"
            )

    def _sync_group(
        self, sink: Sink, req: classic_pb2.SyncGroupRequest, now: int
    ) -> classic_pb2.SyncGroupResponse | ClassicWait:
        group, member = self._classic_member(req.group_id, req.member_id)
        classic = group.classic
        assert classic is not None
        mid, v = member.member_id, classic.value
        self._check_generation(classic, req.generation_id)
        for name, value, ours in (
            ("protocol_type", req.protocol_type, v.protocol_type),
            ("protocol_name", req.protocol_name, v.protocol_name),
        ):
            if req.HasField(name) and value != ours:
                raise ApiError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"{name} '{clip(value)}' is not the group's ('{ours}') in generation {v.generation}",
                )
        if req.assignments and mid != v.leader:
            raise invalid(
                f"assignments: only the leader ('{v.leader}') sends assignments; member '{mid}' is not the "
                f"leader of generation {v.generation}"
            )
        if classic.state == PREPARING:
            raise ApiError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"group '{group.group_id}' is rebalancing (generation {v.generation}): rejoin (JoinGroup)",
            )
        assignment: dict[str, bytes] = {}
        if classic.state == COMPLETING and mid == v.leader:
            for i, a in enumerate(req.assignments):
                if a.member_id not in classic.members:
                    raise invalid(
                        f"assignments[{i}].member_id '{clip(a.member_id)}' is not a member of generation {v.generation}"
                    )
                assignment[a.member_id] = bytes(a.assignment)
        self._synced(group, mid)
        if classic.state == STABLE:
            return classic_pb2.SyncGroupResponse(protocol_name=v.protocol_name, assignment=member.value.assignment)
        wait = self._park(sink, group, mid, SYNC)
        if mid == v.leader:
            self._install_classic_assignment(sink, group, assignment, now)
        self._after_change(sink, group, now)
        return wait

    def _synced(self, group: Group, mid: str) -> None:
        """`mid` sent its SyncGroup: once everyone did, the sync deadline is off."""
        classic = group.classic
        assert classic is not None
        classic.pending_sync.discard(mid)
        if not classic.pending_sync:
            self.timer.cancel(TimerKey(TimerKind.CLASSIC_SYNC, group.group_id))

    def _install_classic_assignment(self, sink: Sink, group: Group, assignment: dict[str, bytes], now: int) -> None:
        """The leader's assignment: stored for every member (a member it left out gets empty bytes),
        the group is Stable, and every member waiting in SyncGroup gets its own."""
        classic = group.classic
        assert classic is not None
        gid, v = group.group_id, classic.value
        for m in _ordered(classic):
            mine = assignment.get(m.member_id, b"")
            if m.value.assignment != mine:
                sink.emit(ClassicMemberMetadata(gid, m.member_id, replace(m.value, assignment=mine)))
        self._set_group(sink, group, state=STABLE)
        self._event(
            sink,
            group,
            EventType.CLASSIC_ASSIGNMENT_INSTALLED,
            v.leader,
            protocol=v.protocol_name,
            members=len(classic.members),
            left_out=len(classic.members) - len(assignment),
            bytes=sum(len(a) for a in assignment.values()),
        )
        for mid, token in sorted(classic.awaiting_sync.items()):
            member = classic.members[mid]
            self._arm_session(group, member, now)
            response = classic_pb2.SyncGroupResponse(protocol_name=v.protocol_name, assignment=member.value.assignment)
            sink.answers.append(ClassicAnswer(gid, mid, token, response))
        classic.awaiting_sync.clear()

    # ---- the rebalance --------------------------------------------------------------------------

    def _rebalance_or_complete_join(self, sink: Sink, group: Group, reason: str, now: int, member_id: str = "") -> None:
        """Kafka's maybePrepareRebalanceOrCompleteJoin."""
        classic = group.classic
        assert classic is not None
        if classic.state in (EMPTY, STABLE, COMPLETING):
            self._prepare_rebalance(sink, group, reason, now, member_id)
        else:
            self._maybe_complete_join(sink, group, now)

    def _prepare_rebalance(
        self, sink: Sink, group: Group, reason: str, now: int, member_id: str = "", **details: Any
    ) -> None:
        """Kafka's prepareRebalance: members waiting in SyncGroup are told to rejoin, the group is
        PreparingRebalance; the first rebalance of an empty group waits the initial delay, any other
        one ends once every member rejoined, or at the rebalance timeout. `details` go in its event."""
        classic = group.classic
        assert classic is not None
        gid = group.group_id
        if classic.state == COMPLETING:
            message = "the group is rebalancing again: rejoin (JoinGroup)"
            self._answer_syncs(sink, group, ErrorCode.REBALANCE_IN_PROGRESS, message, now)
        classic.pending_sync.clear()
        self.timer.cancel(TimerKey(TimerKind.CLASSIC_SYNC, gid))
        initial = classic.state == EMPTY
        self._set_group(sink, group, state=PREPARING)
        classic.rebalance_reason = reason
        self._event(sink, group, EventType.CLASSIC_REBALANCE_STARTED, member_id, reason=reason, **details)
        key = TimerKey(TimerKind.CLASSIC_JOIN, gid)
        if initial:
            delay = self.config.classic_initial_rebalance_delay_ms
            classic.initial_delay = (delay, max(classic.rebalance_timeout_ms() - delay, 0))
            classic.new_member_added = False
            self.timer.schedule(key, now + delay)
        elif classic.all_joined():
            self._complete_join(sink, group, now)
        else:
            self.timer.schedule(key, now + classic.rebalance_timeout_ms())

    def _classic_connectors_changed(self, sink: Sink, group: Group, now: int, **details: Any) -> None:
        """PutConnector / DeleteConnector changed the group's connectors: as in a Connect cluster, whose
        leader sees the config change and the group rejoins, a Stable or CompletingRebalance group
        rebalances (its members learn it from their heartbeats or their parked SyncGroup); a
        rebalance under way goes on (its leader reads the new configuration), an empty group has
        nobody to tell."""
        classic = group.classic
        assert classic is not None
        if classic.members and classic.state in (STABLE, COMPLETING):
            self._prepare_rebalance(sink, group, "connector_changed", now, **details)

    def _maybe_complete_join(self, sink: Sink, group: Group, now: int) -> None:
        """Kafka's maybeCompleteJoinPhase: once every member rejoined -- not during the initial delay,
        which only its timer ends."""
        classic = group.classic
        assert classic is not None
        if classic.state == PREPARING and classic.initial_delay is None and classic.all_joined():
            self._complete_join(sink, group, now)

    def _complete_join(self, sink: Sink, group: Group, now: int) -> None:
        """Kafka's completeClassicGroupJoin: the members that did not rejoin are removed, the next
        generation begins with its protocol and leader, and every member waiting in JoinGroup gets its
        answer; then they must all sync within the rebalance timeout."""
        classic = group.classic
        assert classic is not None
        gid = group.group_id
        self.timer.cancel(TimerKey(TimerKind.CLASSIC_JOIN, gid))
        classic.initial_delay = None
        classic.new_member_added = False
        for m in _ordered(classic):
            if m.member_id not in classic.awaiting_join:
                self._drop_classic_member(sink, group, m, EventType.MEMBER_EXPIRED, cause="not_rejoined")
        generation = _next_generation(classic.generation)
        details: dict[str, Any] = {"reason": classic.rebalance_reason, "previous": classic.generation}
        if not classic.members:
            self._set_group(sink, group, generation=generation, state=EMPTY, protocol_name="", leader="")
            self._event(sink, group, EventType.GENERATION_BUMPED, members=0, **details)
            return
        protocol = self._select_protocol(classic)
        self._set_group(sink, group, generation=generation, state=COMPLETING, protocol_name=protocol)
        leader = classic.value.leader
        self._event(
            sink, group, EventType.GENERATION_BUMPED, leader, protocol=protocol, members=len(classic.members), **details
        )
        for m in _ordered(classic):
            mid = m.member_id
            sink.answers.append(ClassicAnswer(gid, mid, classic.awaiting_join[mid], self._join_answer(classic, mid)))
            m.is_new = False
            self._arm_session(group, m, now, force=True)
            classic.pending_sync.add(mid)
        classic.awaiting_join.clear()
        self.timer.schedule(TimerKey(TimerKind.CLASSIC_SYNC, gid), now + classic.rebalance_timeout_ms())

    @staticmethod
    def _select_protocol(classic: ClassicGroup) -> str:
        """Kafka's selectProtocol: each member votes for its most preferred protocol among those every
        member supports; the most votes win, a tie goes to the earliest-joined member's vote."""
        everyone = len(classic.members)
        candidates = {name for name, n in classic.protocol_counts.items() if n == everyone}
        votes: dict[str, int] = {}
        for m in _ordered(classic):
            vote = next(name for name, _ in m.value.protocols if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def _after_removal(self, sink: Sink, group: Group, reason: str, now: int, *, expired: bool = False) -> None:
        """Members are gone: a Stable or CompletingRebalance group rebalances without them; a join phase
        that waited only for them ends -- after a LeaveGroup not during the initial delay (Kafka's
        maybeCompleteJoinPhase), after an expiry at once (removeMemberAndUpdateClassicGroup)."""
        classic = group.classic
        assert classic is not None
        if classic.state in (STABLE, COMPLETING):
            self._prepare_rebalance(sink, group, reason, now)
        elif expired and classic.state == PREPARING and classic.all_joined():
            self._complete_join(sink, group, now)
        else:
            self._maybe_complete_join(sink, group, now)

    # ---- members --------------------------------------------------------------------------------

    def _classic_member(self, group_id: str, member_id: str) -> tuple[Group, ClassicMember]:
        group = self.state.groups.get(group_id)
        classic = group.classic if group is not None else None
        member = classic.members.get(member_id) if classic is not None else None
        if group is None or member is None:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{clip(member_id)}' is not a member of classic group '{group_id}': rejoin (JoinGroup)",
            )
        return group, member

    @staticmethod
    def _check_generation(classic: ClassicGroup, generation: int) -> None:
        if generation != classic.generation:
            raise ApiError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation_id {generation} is not the group's generation {classic.generation}: rejoin (JoinGroup)",
            )

    def _arm_session(self, group: Group, member: ClassicMember, now: int, force: bool = False) -> None:
        """The member is alive: its session runs from now (a new member's join timeout is not cut
        short by a heartbeat it cannot send -- unless `force`, at the end of its first join phase)."""
        deadline = now + member.value.session_timeout_ms
        if member.is_new and not force:
            deadline = max(deadline, member.session_deadline_ms)
        member.session_deadline_ms = deadline
        self.timer.schedule(TimerKey(TimerKind.CLASSIC_SESSION, group.group_id, member.member_id), deadline)

    def _drop_classic_member(
        self, sink: Sink, group: Group, member: ClassicMember, reason: EventType, **details: Any
    ) -> None:
        """Remove one member: its parked calls get UNKNOWN_MEMBER_ID, a leader is replaced by the
        earliest-joined remaining member (Kafka: any). What follows for the group is the caller's."""
        classic = group.classic
        assert classic is not None
        gid, mid = group.group_id, member.member_id
        self.timer.cancel(TimerKey(TimerKind.CLASSIC_SESSION, gid, mid))
        gone = f"member '{mid}' was removed from group '{gid}' ({reason}): rejoin without a member id"
        token = classic.awaiting_join.pop(mid, None)
        if token is not None:
            failed = classic_pb2.JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message=gone)
            sink.answers.append(ClassicAnswer(gid, mid, token, failed))
        token = classic.awaiting_sync.pop(mid, None)
        if token is not None:
            failed_sync = classic_pb2.SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message=gone)
            sink.answers.append(ClassicAnswer(gid, mid, token, failed_sync))
        classic.pending_sync.discard(mid)
        sink.emit(ClassicMemberMetadata(gid, mid, None))
        self._event(sink, group, reason, mid, **details)
        if classic.value.leader == mid:
            rest = _ordered(classic)
            self._set_group(sink, group, leader=rest[0].member_id if rest else "")

    def _park(self, sink: Sink, group: Group, mid: str, kind: str) -> ClassicWait:
        """`mid`'s JoinGroup or SyncGroup waits; a call of the same kind it had parked is answered
        REBALANCE_IN_PROGRESS (superseded: it retried)."""
        classic = group.classic
        assert classic is not None
        waiting = classic.awaiting_join if kind == JOIN else classic.awaiting_sync
        old = waiting.get(mid)
        if old is not None:
            message = f"superseded by a newer {'JoinGroup' if kind == JOIN else 'SyncGroup'} of the same member"
            superseded: Any = (classic_pb2.JoinGroupResponse if kind == JOIN else classic_pb2.SyncGroupResponse)(
                error_code=ErrorCode.REBALANCE_IN_PROGRESS, error_message=message
            )
            sink.answers.append(ClassicAnswer(group.group_id, mid, old, superseded))
        self._classic_token += 1
        waiting[mid] = self._classic_token
        return ClassicWait(group.group_id, mid, kind, self._classic_token)

    def _answer_syncs(self, sink: Sink, group: Group, code: ErrorCode, message: str, now: int) -> None:
        """Every member waiting in SyncGroup gets `code`; its session runs again from now (its parked
        call kept it alive so far)."""
        classic = group.classic
        assert classic is not None
        for mid, token in sorted(classic.awaiting_sync.items()):
            self._arm_session(group, classic.members[mid], now)
            response = classic_pb2.SyncGroupResponse(error_code=code, error_message=message)
            sink.answers.append(ClassicAnswer(group.group_id, mid, token, response))
        classic.awaiting_sync.clear()

    @staticmethod
    def _classic_result(sink: Sink, response: Any) -> Result:
        """The handler's result: a parked call whose own answer is already among the answers (the
        request completed the phase) gets it as its response."""
        if isinstance(response, ClassicWait):
            for i, answer in enumerate(sink.answers):
                if answer.token == response.token:
                    del sink.answers[i]
                    return sink.result(answer.response)
        return sink.result(response)

    # ---- records and events ---------------------------------------------------------------------

    def _set_group(self, sink: Sink, group: Group, **changes: Any) -> None:
        classic = group.classic
        assert classic is not None
        value = replace(classic.value, **changes)
        if value != classic.value:
            sink.emit(ClassicGroupMetadata(group.group_id, value))

    @staticmethod
    def _event(sink: Sink, group: Group, event: EventType, member_id: str = "", **details: Any) -> None:
        """An event of the log for a classic group: its generation stands for the epochs (SPEC §12
        rule 7: generation = epoch); details that are None are left out."""
        classic = group.classic
        generation = classic.generation if classic is not None else 0
        kept = {k: v for k, v in details.items() if v is not None}
        member_epoch = generation if member_id else 0
        sink.event(group, event, member_id, member_epoch, epochs=(generation, generation), **kept)

    # ---- timers ---------------------------------------------------------------------------------

    def _on_classic_session_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """Kafka's expireClassicGroupMemberHeartbeat: a handed-out id that was never used is forgotten;
        a member that did not heartbeat is removed -- unless it waits in JoinGroup or SyncGroup (which
        keeps it alive, except in its first join phase)."""
        classic = group.classic
        if classic is None:
            return False
        mid = key.member_id
        if mid in classic.pending:
            if classic.pending[mid] <= now:
                del classic.pending[mid]
                if classic.state == PREPARING and classic.all_joined():
                    self._complete_join(sink, group, now)
            return False
        member = classic.members.get(mid)
        if member is None or member.session_deadline_ms > now:
            return False
        if not member.is_new and (mid in classic.awaiting_join or mid in classic.awaiting_sync):
            return False
        self._drop_classic_member(sink, group, member, EventType.MEMBER_EXPIRED, cause="session_timeout")
        self._after_removal(sink, group, "member_expired", now, expired=True)
        return False

    def _on_classic_join_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """The join phase's deadline: the initial delay (again while members keep joining, up to the
        rebalance timeout: Kafka's tryCompleteInitialRebalanceElseSchedule), or the rebalance timeout."""
        classic = group.classic
        if classic is None or classic.state != PREPARING:
            return False
        if classic.initial_delay is not None:
            delay, remaining = classic.initial_delay
            if classic.new_member_added and remaining:
                again = min(self.config.classic_initial_rebalance_delay_ms, remaining)
                classic.initial_delay = (again, max(remaining - delay, 0))
                classic.new_member_added = False
                self.timer.schedule(key, now + again)
                return False
        self._complete_join(sink, group, now)
        return False

    def _on_classic_sync_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """Kafka's expirePendingSync: the members that did not send SyncGroup within the rebalance
        timeout are removed, and the group rebalances without them."""
        classic = group.classic
        if classic is None or classic.state not in (COMPLETING, STABLE) or not classic.pending_sync:
            return False
        for mid in sorted(classic.pending_sync):
            self._drop_classic_member(sink, group, classic.members[mid], EventType.MEMBER_EXPIRED, cause="not_synced")
        self._prepare_rebalance(sink, group, "members_did_not_sync", now)
        return False

    # ---- what the facade calls ------------------------------------------------------------------

    def _classic_is_empty(self, group: Group) -> bool:
        """No classic member, and no member id handed out and not yet used (retention may run)."""
        classic = group.classic
        return classic is None or (not classic.members and not classic.pending)

    def _classic_rearm(self, group: Group, now: int) -> None:
        """After a load: what is not stored. Every member's session runs again with its own timeout; a
        join phase waits its rebalance timeout again for the members to rejoin (their parked calls
        are gone), a sync phase as long for every member's SyncGroup."""
        classic = group.classic
        assert classic is not None
        gid = group.group_id
        for m in classic.members.values():
            self._arm_session(group, m, now)
        if classic.state == PREPARING:
            classic.rebalance_reason = "coordinator_loaded"
            self.timer.schedule(TimerKey(TimerKind.CLASSIC_JOIN, gid), now + classic.rebalance_timeout_ms())
        elif classic.state == COMPLETING:
            classic.pending_sync = set(classic.members)
            self.timer.schedule(TimerKey(TimerKind.CLASSIC_SYNC, gid), now + classic.rebalance_timeout_ms())

    def _classic_yield_to_connect(self, sink: Sink, group: Group) -> None:
        """A `connect` member joins a classic group: an empty one becomes a `connect` group (SPEC §12
        rule 1; its epoch never behind its generation), a live one answers GROUP_ID_NOT_FOUND (rule 5;
        converting a live group is a later step)."""
        classic = group.classic
        assert classic is not None
        if not self._classic_is_empty(group):
            raise ApiError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group '{group.group_id}' is a classic group with {len(classic.members)} members: "
                f"a {GROUP_TYPE} member cannot join it",
            )
        gid = group.group_id
        for kind in (TimerKind.CLASSIC_JOIN, TimerKind.CLASSIC_SYNC):
            self.timer.cancel(TimerKey(kind, gid))
        sink.emit(ClassicGroupMetadata(gid, None))
        epoch = max(group.epoch, classic.generation)
        sink.emit(GroupMetadata(gid, replace(group.meta, group_type=GROUP_TYPE, epoch=epoch)))
