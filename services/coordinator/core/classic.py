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

**The event log** names a classic group's items as it does a `connect` group's (SPEC §8, §12 rule 7),
by what each member runs by the coordinator's account (`explain.classic_view`): a member handed its
assignment (its SyncGroup answered) `items_assigned` what it starts and, from V1 on,
`revocation_requested` what it must stop; a member rejoining `revocation_acknowledged` what it stopped
-- under V0 (eager) everything it ran, stopped unasked, so also `revocation_requested` at the
generation to come; a member leaving, expiring or removed names what it ran (an expiry its last
heartbeat). The heartbeat writes nothing.

**Online migration** (SPEC §12 rules 1-5, Kafka's GroupMetadataManager convertToConsumerGroup /
convertToClassicGroup): a `connect` join to a live classic group upgrades it when its policy allows
(`_upgrade`: epochs from the generation; every member a `classic` member of the `connect` group whose
current and target assignment are what it runs by its last classic assignment -- read as
DescribeGroups reads it, `explain.classic_view`: V0 whole, V1/V2 its allocation with the assignment's
delta; parked calls answered REBALANCE_IN_PROGRESS; refused, nothing changed, when a member's bytes do
not decode or two members claim one item). Classic members of a `connect` group are reconciled like
any member through their own APIs (`_migration_join` / `_migration_sync` / `_migration_heartbeat` /
`_migration_leave`): what a JoinGroup's metadata says it runs (its allocation; nothing under V0,
which stops everything before it joins) acknowledges revocations, its epoch is its generation,
its liveness its JoinGroup's session timeout, a missed rejoin or sync fences it (work held). When
only classic members remain, no fenced member's work is held and the policy allows it, the group goes
back to classic (`_maybe_downgrade`): generation = the group epoch, each member's target its stored
assignment, then a classic rebalance.

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
from services.classic import (
    ConnectAssignment,
    ProtocolError,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    protocol_version,
)
from services.common.items import EMPTY as EMPTY_ITEMS
from services.common.items import Items
from services.coordinator.core import validation
from services.coordinator.core.assignment import AssignorSelectionError
from services.coordinator.core.config import (
    INT32_MAX,
    MAX_SIZE,
    MIGRATION_POLICY,
    MIGRATION_POLICY_KEY,
    MODE_SERVICE,
    POLICY_DISABLED,
    POLICY_DOWNGRADE,
    POLICY_UPGRADE,
    policy_allows,
)
from services.coordinator.core.errors import ApiError, clip, invalid
from services.coordinator.core.handler import GROUP_TYPE, ClassicAnswer, ClassicWait, CoreBase, Result, Sink
from services.coordinator.core.records import (
    MEMBER_TYPE_CLASSIC,
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    CurrentAssignment,
    CurrentAssignmentValue,
    EventType,
    GroupMetadata,
    MemberMetadata,
    MemberMetadataValue,
    MemberState,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
)
from services.coordinator.core.state import (
    NO_ASSIGNMENT,
    ClassicGroup,
    ClassicMember,
    Group,
    Member,
    classic_metadata_bytes,
)
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


def _revoked(assignment: bytes) -> Items:
    """The items a stored V1/V2 classic assignment told its member to stop (nothing if none or unreadable)."""
    try:
        a = decode_assignment(assignment) if assignment else None
    except ProtocolError:
        return EMPTY_ITEMS
    return Items.of(a.revoked_connectors, a.revoked_tasks) if a is not None else EMPTY_ITEMS


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
            self.check_protocol_enabled(CLASSIC_GROUP_TYPE)
            self._check_join_request(req)
            response: Any = self._join_group(sink, req, now_ms)
        except ApiError as e:
            response = classic_pb2.JoinGroupResponse(error_code=e.code, error_message=e.message)
        return self._classic_result(sink, response)

    def sync_group(self, req: classic_pb2.SyncGroupRequest, now_ms: int) -> Result:
        """The answer, or a `ClassicWait`: the call waits for the leader's assignment."""
        sink = Sink(self.state, now_ms)
        try:
            self.check_protocol_enabled(CLASSIC_GROUP_TYPE)
            self._check_sync_request(req)
            group = self.state.groups.get(req.group_id)
            response: Any
            if group is not None and group.classic is None:
                response = self._migration_sync(sink, group, req, now_ms)
            else:
                response = self._sync_group(sink, req, now_ms)
        except ApiError as e:
            response = classic_pb2.SyncGroupResponse(error_code=e.code, error_message=e.message)
        return self._classic_result(sink, response)

    def classic_heartbeat(self, req: classic_pb2.HeartbeatRequest, now_ms: int) -> Result:
        """Writes nothing: it re-arms the member's session and says whether to rejoin."""
        try:
            self.check_protocol_enabled(CLASSIC_GROUP_TYPE)
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.member_id, "member_id", cfg=self.config)
            found = self.state.groups.get(req.group_id)
            if found is not None and found.classic is None:
                return Result([], self._migration_heartbeat(found, req, now_ms), [])
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
            self.check_protocol_enabled(CLASSIC_GROUP_TYPE)
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            if not req.member_ids:
                raise invalid("member_ids must name at least one member")
            validation.check_count(len(req.member_ids), "member_ids", self.config)
            for i, mid in enumerate(req.member_ids):
                validation.check_id(mid, f"member_ids[{i}]", cfg=self.config)
            group = self.state.groups.get(req.group_id)
            classic = group.classic if group is not None else None
            if group is not None and classic is None and group.classic_members:
                self._migration_leave(sink, group, req, response, now_ms)
                return sink.result(response)
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
        for i, p in enumerate(req.protocols):
            # Connect's own metadata (version, url, config offset[, allocation]): bytes that do not parse
            # would reach the leader (and a migration) as a member nobody can read.
            try:
                decode_metadata(p.metadata)
            except ProtocolError as e:
                raise invalid(f"protocols[{i}].metadata does not parse as Connect's worker metadata: {e}") from None
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
            # A classic worker in a live `connect` group (SPEC §12 rule 3; rule 5 refuses it).
            return self._migration_join(sink, group, req, now)
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
            # A follower with nothing new: the current generation, then SyncGroup (it is alive).
            self._arm_session(group, member, now)
            return self._join_answer(classic, mid, with_members=False)
        ran, told = self._runs(group, mid)
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
        self._log_rejoin(sink, group, mid, ran, told)
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
        handover = classic.state == STABLE and mid in classic.pending_sync
        ran, _ = self._runs(group, mid) if handover else (EMPTY_ITEMS, EMPTY_ITEMS)
        self._synced(group, mid)
        if classic.state == STABLE:
            if handover:  # (the leader's assignment came before this member's SyncGroup)
                self._log_handover(sink, group, mid, ran)
            # Kafka's rescheduleClassicGroupMemberHeartbeat: a member that lost its SyncGroup answer (or,
            # after a coordinator restart, whose session runs from the load) is alive from now.
            self._arm_session(group, member, now)
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
        ran = {mid: self._runs(group, mid)[0] for mid in sorted(classic.awaiting_sync)}
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
        for mid, before in ran.items():  # (the others are handed theirs at their SyncGroup)
            self._log_handover(sink, group, mid, before)
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
        ran, _ = self._runs(group, mid)
        # Its last heartbeat (or join or sync): when its session was last armed -- a new member's
        # join timeout is not one (it runs nothing yet).
        alive_ms = None if member.is_new else member.session_deadline_ms - member.value.session_timeout_ms
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
        self._event(sink, group, reason, mid, items=len(ran), last_heartbeat_ms=alive_ms, **ran.names(), **details)
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
    def _event(
        sink: Sink, group: Group, event: EventType, member_id: str = "", at: int | None = None, **details: Any
    ) -> None:
        """An event of the log for a classic group: its generation (or the generation `at`) stands for
        the epochs (SPEC §12 rule 7: generation = epoch); details that are None are left out."""
        classic = group.classic
        generation = at if at is not None else classic.generation if classic is not None else 0
        kept = {k: v for k, v in details.items() if v is not None}
        member_epoch = generation if member_id else 0
        sink.event(group, event, member_id, member_epoch, epochs=(generation, generation), **kept)

    # What classic members run, as the event log names it (SPEC §8 / §12 rule 7: the analytics job
    # reads a classic group's items from the same events as a `connect` group's). What a member runs is
    # the coordinator's account (`explain.classic_view`, DescribeGroups' reading of its metadata and its
    # assignment); an event names what that account gains or loses. Never on the heartbeat path.

    @staticmethod
    def _runs(group: Group, mid: str) -> tuple[Items, Items]:
        """What member `mid` runs by its metadata and its last assignment (nothing when they do not
        decode), and what that assignment told it to stop if it was handed to it and it has not
        rejoined since (its revocations outstanding)."""
        from services.coordinator.core import explain  # (explain reads this module: imported when used)

        classic = group.classic
        assert classic is not None
        member = classic.members[mid]
        view = explain.classic_view(classic, member)
        handed = view.state in (explain.CLASSIC_STABLE, explain.CLASSIC_REJOINING)
        return view.items, _revoked(member.value.assignment) if handed else EMPTY_ITEMS

    def _log_handover(self, sink: Sink, group: Group, mid: str, before: Items) -> None:
        """Member `mid` was handed its assignment (its SyncGroup answered): what it must stop now
        (V1/V2 `revoked`; it acknowledges by rejoining without them) and what it starts."""
        after, _ = self._runs(group, mid)
        revoked, gained = before - after, after - before
        if revoked:
            self._event(sink, group, EventType.REVOCATION_REQUESTED, mid, items=len(revoked), **revoked.names())
        if gained:
            self._event(sink, group, EventType.ITEMS_ASSIGNED, mid, items=len(gained), **gained.names())

    def _log_rejoin(self, sink: Sink, group: Group, mid: str, before: Items, told: Items) -> None:
        """Member `mid` rejoined (it is parked in JoinGroup) running what its metadata says: what it
        stopped without being told (all of it under V0, eager: the rebalance's doing, so a revocation
        of the generation to come, acknowledged at once) and the revocations it was told of and has
        done are acknowledged."""
        classic = group.classic
        assert classic is not None
        now_runs, _ = self._runs(group, mid)
        stopped = before - now_runs
        done = (told - now_runs) | stopped
        if stopped:
            nxt = _next_generation(classic.generation)
            self._event(sink, group, EventType.REVOCATION_REQUESTED, mid, nxt, items=len(stopped), **stopped.names())
        if done:
            self._event(sink, group, EventType.REVOCATION_ACKNOWLEDGED, mid, items=len(done), **done.names())

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
        rebalance timeout: Kafka's tryCompleteInitialRebalanceElseSchedule), or the rebalance timeout.
        A member's key: a classic member of a `connect` group told to rejoin (SPEC §12 rule 3)."""
        if key.member_id:
            self._on_member_rejoin_deadline(sink, group, key, now)
            return False
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
        timeout are removed, and the group rebalances without them. A member's key: a classic member
        of a `connect` group that joined and must sync (SPEC §12 rule 3)."""
        if key.member_id:
            self._on_member_sync_deadline(sink, group, key, now)
            return False
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

    def _classic_yield_to_connect(self, sink: Sink, group: Group, now: int) -> None:
        """A `connect` member joins a classic group: an empty one becomes a `connect` group (SPEC §12
        rule 1; its epoch never behind its generation), a live one is upgraded (rule 2) when its
        policy allows it, else the join gets GROUP_ID_NOT_FOUND saying why (rules 2 and 5)."""
        classic = group.classic
        assert classic is not None
        if not self._classic_is_empty(group):
            self._upgrade(sink, group, now)
            return
        gid = group.group_id
        for kind in (TimerKind.CLASSIC_JOIN, TimerKind.CLASSIC_SYNC):
            self.timer.cancel(TimerKey(kind, gid))
        sink.emit(ClassicGroupMetadata(gid, None))
        epoch = max(group.epoch, classic.generation)
        sink.emit(GroupMetadata(gid, replace(group.meta, group_type=GROUP_TYPE, epoch=epoch)))
        # The assignment epoch starts there too: after a downgrade it would otherwise start again at 0
        # (the downgrade deleted the target), behind what the group's members were told before.
        sink.emit(TargetMetadata(gid, TargetMetadataValue(assignment_epoch=epoch, computed_by=CLASSIC_GROUP_TYPE)))

    # ---- online migration (SPEC §12 rules 2-5; Kafka's GroupMetadataManager online upgrade and downgrade)

    def _upgrade_refusal(self, group: Group) -> str | None:
        """Why the live classic group cannot be upgraded (Kafka's validateOnlineUpgrade), or None."""
        classic = group.classic
        assert classic is not None
        policy = self.migration_policy(group)
        if not policy_allows(policy, POLICY_UPGRADE):
            return f"its migration policy is '{policy}' ({MIGRATION_POLICY} / {MIGRATION_POLICY_KEY}), which allows no upgrade"
        if classic.value.protocol_type != CONNECT_PROTOCOL_TYPE:
            return f"its protocol type is '{classic.value.protocol_type}', not '{CONNECT_PROTOCOL_TYPE}'"
        limit = min(self._int_config(group, MAX_SIZE, self.config.max_size), self.config.max_members_per_group)
        if len(classic.members) >= limit:
            return f"it has {len(classic.members)} members and may have {limit} (max.size, group.connect.max.members.per.group)"
        return None

    def _classic_running(self, group: Group) -> dict[str, tuple[str, Items]]:
        """What each classic member runs by its last classic assignment (DescribeGroups' reading:
        `explain.classic_view`): a V0 assignment whole; from V1 on, the member's allocation (what it
        reported running at its last JoinGroup) minus what it was told to revoke plus what it was
        assigned -- its allocation alone once it rejoined. Raises (nothing changed) when a member's
        bytes do not decode or two members would own one item."""
        from services.coordinator.core import explain  # (explain reads this module: imported when used)

        classic = group.classic
        assert classic is not None
        running: dict[str, tuple[str, Items]] = {}
        owner: dict[Any, str] = {}
        for m in _ordered(classic):
            view = explain.classic_view(classic, m)
            if view.state.startswith(explain.CLASSIC_UNREADABLE):
                raise self._not_upgraded(group, f"what member '{m.member_id}' runs cannot be read ({view.state})")
            # What it was told to stop may still run: the answer may never have reached it (lost, or
            # the coordinator crashed), and only its next JoinGroup would tell (found by the simulator).
            view = replace(view, items=view.items | _revoked(m.value.assignment))
            for key in view.items.item_keys():
                other = owner.get(key) or group.held_owner.get(key)
                if other is not None:
                    raise self._not_upgraded(
                        group, f"{key} is claimed by both '{other}' and '{m.member_id}': let the classic rebalance end"
                    )
                owner[key] = m.member_id
            running[m.member_id] = (view.url, view.items)
        return running

    @staticmethod
    def _not_upgraded(group: Group, why: str) -> ApiError:
        classic = group.classic
        n = len(classic.members) if classic is not None else 0
        return ApiError(
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"group '{group.group_id}' is a classic group with {n} members and cannot be upgraded to the "
            f"{GROUP_TYPE} protocol: {why}",
        )

    def _upgrade(self, sink: Sink, group: Group, now: int) -> None:
        """SPEC §12 rule 2 (Kafka's convertToConsumerGroup): the group epoch and the assignment epoch
        become the classic generation; every classic member becomes a `classic` member at that epoch
        whose current and target assignment are what it runs by its last classic assignment;
        parked JoinGroup / SyncGroup calls get REBALANCE_IN_PROGRESS. Records only: the join that
        follows (the caller's) goes in the same write."""
        why = self._upgrade_refusal(group)
        if why is not None:
            raise self._not_upgraded(group, why)
        running = self._classic_running(group)
        classic = group.classic
        assert classic is not None
        gid, generation = group.group_id, classic.generation
        before = classic.value
        members = _ordered(classic)
        self._end_classic_part(sink, group, f"group '{gid}' was upgraded to the {GROUP_TYPE} protocol: rejoin")
        sink.emit(GroupMetadata(gid, replace(group.meta, group_type=GROUP_TYPE, epoch=generation)))
        for mid in sorted(set(group.target_members) - set(running)):
            sink.emit(TargetMember(gid, mid, None))  # (left by a former `connect` life of the group)
        sink.emit(TargetMetadata(gid, TargetMetadataValue(assignment_epoch=generation, computed_by=CLASSIC_GROUP_TYPE)))
        # This target is what the members run, not one validated against the connectors (a classic
        # worker may still run a task of a connector that shrank): the next assignor input does not
        # vouch for it (else the assignor kept unconfigured tasks and every answer was refused, the
        # group Assigning for ever: found by the simulator, seed 200246).
        group.process.target_checked_at = None
        for m in members:
            mid, v = m.member_id, m.value
            meta = MemberMetadataValue(
                instance_id=None,
                url=running[mid][0],
                client_id=v.client_id,
                rebalance_timeout_ms=v.rebalance_timeout_ms,
                assignors=(),
                joined_ms=v.joined_ms,
                member_type=MEMBER_TYPE_CLASSIC,
                session_timeout_ms=v.session_timeout_ms,
                protocols=v.protocols,
            )
            sink.emit(MemberMetadata(gid, mid, meta))
            sink.emit(TargetMember(gid, mid, TargetMemberValue(running[mid][1])))
            current = CurrentAssignmentValue(generation, -1, MemberState.STABLE, group.target_of(mid), EMPTY_ITEMS)
            sink.emit(CurrentAssignment(gid, mid, current))
            self._arm_connect_session(group, group.members[mid], now)
        sink.event(
            group,
            EventType.GROUP_UPGRADED,
            generation=generation,
            epoch=generation,
            members=len(members),
            classic_state=before.state.value,
            protocol=before.protocol_name or None,
        )

    def _end_classic_part(self, sink: Sink, group: Group, message: str) -> None:
        """The classic part of a group ends (it is upgraded): its parked calls are answered
        REBALANCE_IN_PROGRESS, its timers are off, its records are tombstoned (members first)."""
        classic = group.classic
        assert classic is not None
        gid = group.group_id
        for waiting, kind in ((classic.awaiting_join, JOIN), (classic.awaiting_sync, SYNC)):
            for mid, token in sorted(waiting.items()):
                response: Any = (classic_pb2.JoinGroupResponse if kind == JOIN else classic_pb2.SyncGroupResponse)(
                    error_code=ErrorCode.REBALANCE_IN_PROGRESS, error_message=message
                )
                sink.answers.append(ClassicAnswer(gid, mid, token, response))
            waiting.clear()
        for kind in (TimerKind.CLASSIC_JOIN, TimerKind.CLASSIC_SYNC):
            self.timer.cancel(TimerKey(kind, gid))
        for mid in [*classic.members, *classic.pending]:
            self.timer.cancel(TimerKey(TimerKind.CLASSIC_SESSION, gid, mid))
        for m in _ordered(classic):
            sink.emit(ClassicMemberMetadata(gid, m.member_id, None))
        sink.emit(ClassicGroupMetadata(gid, None))

    def _arm_connect_session(self, group: Group, member: Member, now: int) -> None:
        """A classic member of a `connect` group is alive: its session (its JoinGroup's timeout) runs
        from now."""
        member.session_deadline_ms = max(member.session_deadline_ms, now + member.meta.session_timeout_ms)
        self.timer.schedule(member.session_timer(group.group_id), member.session_deadline_ms)

    # -- a classic member in a `connect` group (rule 3)

    def _migration_join(
        self, sink: Sink, group: Group, req: classic_pb2.JoinGroupRequest, now: int
    ) -> classic_pb2.JoinGroupResponse:
        """Kafka's classicGroupJoinToConsumerGroup: the member's metadata says what it runs (its
        allocation: V1/V2; nothing under V0, which revokes everything before it joins), it is
        reconciled like any member, and it is answered at once with its epoch as the generation --
        never as the leader (the coordinator's assignor assigns)."""
        gid, mid = group.group_id, req.member_id
        member = group.members.get(mid) if mid else None
        if member is not None and not member.meta.is_classic:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{mid}' of group '{gid}' uses the {GROUP_TYPE} protocol (ConnectGroupHeartbeat), not JoinGroup",
            )
        if member is None and mid in group.held:
            # Fenced, its work held until its session would have expired: it must stop that work,
            # which a rejoin under the same id would not make it do (nothing it runs is its own any more).
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{clip(mid)}' of group '{gid}' was fenced and its work is held: "
                "stop it and rejoin (JoinGroup) without a member id",
            )
        policy = self.migration_policy(group)
        if member is None and policy == POLICY_DISABLED:
            raise ApiError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group '{gid}' is a {GROUP_TYPE} group with {len(group.members)} members"
                + (f" and work held for {len(group.held)} fenced members" if group.held else "")
                + f" and its migration policy is '{policy}': a classic member cannot join it",
            )
        protocols = _protocols(req)
        url, owned = self._read_metadata(protocols)
        if member is None and mid and owned:
            # Dropped (by the classic group before an upgrade, or fenced or expired since) and still
            # running work that is no longer its own: a new member under that id would never be told
            # to stop it (found by the simulator). It stops everything and joins anew.
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{clip(mid)}' is not a member of group '{gid}' and says it runs {len(owned)} items: "
                "stop them and rejoin (JoinGroup) without a member id",
            )
        if not mid:
            self._check_connect_group_size(group)
            return classic_pb2.JoinGroupResponse(
                error_code=ErrorCode.MEMBER_ID_REQUIRED,
                error_message="rejoin with this member_id",
                member_id=self.new_member_id(),
            )
        # Every check is done: from here on the request changes the group.
        meta = MemberMetadataValue(
            instance_id=None,
            url=url,
            client_id=req.client_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            assignors=(),
            joined_ms=member.meta.joined_ms if member is not None else now,
            member_type=MEMBER_TYPE_CLASSIC,
            session_timeout_ms=req.session_timeout_ms,
            protocols=protocols,
        )
        if member is None:
            self._check_connect_group_size(group)
            sink.emit(MemberMetadata(gid, mid, meta))
            sink.emit(CurrentAssignment(gid, mid, NO_ASSIGNMENT))
            sink.event(group, EventType.MEMBER_JOINED, mid, 0, url=url, member_type=MEMBER_TYPE_CLASSIC)
            self._bump(sink, group, "member_joined", mid)
        elif meta != member.meta:
            sink.emit(MemberMetadata(gid, mid, meta))
            if meta.url != member.meta.url:
                self._bump(sink, group, "member_metadata_changed", mid)
        member = group.members[mid]
        if not protocol_version(protocols[0][0]) and member.current.assigned:
            # Eager (V0): it stopped everything before this JoinGroup (its SyncGroup restarts what it keeps).
            stopped, epoch = member.current.assigned, member.member_epoch
            for event in (EventType.REVOCATION_REQUESTED, EventType.REVOCATION_ACKNOWLEDGED):
                sink.event(group, event, mid, epoch, items=len(stopped), **stopped.names())
        for _ in range(2):  # a revocation asked now is acknowledged at once if it is done (V0: always)
            self._reconcile(sink, group, member, owned, now)
            member = group.members[mid]
        self._arm_connect_session(group, member, now)
        self.timer.cancel(TimerKey(TimerKind.CLASSIC_JOIN, gid, mid))
        self.timer.schedule(TimerKey(TimerKind.CLASSIC_SYNC, gid, mid), now + meta.rebalance_timeout_ms)
        self._after_change(sink, group, now)
        return classic_pb2.JoinGroupResponse(
            generation_id=member.member_epoch, protocol_name=protocols[0][0], leader="", member_id=mid
        )

    def _check_connect_group_size(self, group: Group) -> None:
        limit = min(self._int_config(group, MAX_SIZE, self.config.max_size), self.config.max_members_per_group)
        if len(group.members) >= limit:
            raise ApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group '{group.group_id}' has reached its size of {limit} members "
                "(max.size, group.connect.max.members.per.group)",
            )

    @staticmethod
    def _read_metadata(protocols: Protocols) -> tuple[str, Items]:
        """A classic worker's URL and what it runs, from its JoinGroup metadata (each protocol's must
        decode: the coordinator, not a leader, reads them here); INVALID_REQUEST naming the field."""
        decoded = []
        for i, (_, raw) in enumerate(protocols):
            try:
                decoded.append(decode_metadata(raw))
            except ProtocolError as e:
                raise invalid(f"protocols[{i}].metadata is not Connect's worker metadata: {e}") from None
        allocation = decoded[0].allocation
        owned = Items.of(allocation.connectors, allocation.tasks) if allocation is not None else EMPTY_ITEMS
        return decoded[0].url, owned

    def _converted_member(self, group: Group, member_id: str) -> Member:
        """The classic member `member_id` of the `connect` group (rule 3: else UNKNOWN_MEMBER_ID)."""
        member = group.members.get(member_id)
        if member is None or not member.meta.is_classic:
            uses = "" if member is None else f" (it uses the {GROUP_TYPE} protocol: ConnectGroupHeartbeat)"
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member '{clip(member_id)}' is not a classic member of group '{group.group_id}'{uses}: "
                "rejoin (JoinGroup) without a member id",
            )
        return member

    @staticmethod
    def _check_member_generation(member: Member, generation: int) -> None:
        if generation != member.member_epoch:
            raise ApiError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation_id {generation} is not the member's epoch {member.member_epoch}: rejoin (JoinGroup)",
            )

    def _migration_sync(
        self, sink: Sink, group: Group, req: classic_pb2.SyncGroupRequest, now: int
    ) -> classic_pb2.SyncGroupResponse:
        """Kafka's classicGroupSyncToConsumerGroup: checked in order -- a classic member, its epoch,
        the protocol -- then answered at once with what it may run, in its protocol's version."""
        member = self._converted_member(group, req.member_id)
        self._check_member_generation(member, req.generation_id)
        own = member.meta.protocols[0][0]
        for name, value, ours in (
            ("protocol_type", req.protocol_type, CONNECT_PROTOCOL_TYPE),
            ("protocol_name", req.protocol_name, own),
        ):
            if req.HasField(name) and value != ours:
                raise ApiError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"{name} '{clip(value)}' is not the member's ('{ours}') at epoch {member.member_epoch}",
                )
        if req.assignments:
            # The leader of the last classic generation, answered before the group was upgraded: in
            # band and retriable (INVALID_REQUEST would stop the worker for good), nothing changes.
            raise ApiError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"group '{group.group_id}' was upgraded to the {GROUP_TYPE} protocol, whose coordinator assigns: "
                f"member '{member.member_id}' leads no generation and its assignments are ignored; rejoin (JoinGroup)",
            )
        gid = group.group_id
        self.timer.cancel(TimerKey(TimerKind.CLASSIC_SYNC, gid, member.member_id))
        self._arm_connect_session(group, member, now)
        restarted = member.current.assigned
        if not protocol_version(own) and restarted:  # eager (V0): it starts all of it again now
            sink.event(
                group,
                EventType.ITEMS_ASSIGNED,
                member.member_id,
                member.member_epoch,
                items=len(restarted),
                **restarted.names(),
            )
        return classic_pb2.SyncGroupResponse(protocol_name=own, assignment=self._member_assignment(group, member))

    @staticmethod
    def _member_assignment(group: Group, member: Member) -> bytes:
        """What the member may run, in its protocol's version: V0 whole (an eager member rejoined
        owning nothing and restarts it), V1/V2 the same items with what it must stop as `revoked`
        (Connect applies `revoked` first, then adds the items it does not run yet)."""
        version = protocol_version(member.meta.protocols[0][0])
        cur = member.current
        revoking = cur.revoking if version else EMPTY_ITEMS
        assignment = ConnectAssignment(
            version=version,
            error=0,
            leader="",
            leader_url="",
            config_offset=group.meta.config_offset,
            connectors=tuple(sorted(cur.assigned.connectors)),
            tasks=tuple(sorted(cur.assigned.tasks)),
            revoked_connectors=tuple(sorted(revoking.connectors)),
            revoked_tasks=tuple(sorted(revoking.tasks)),
        )
        return encode_assignment(assignment)

    def _must_rejoin(self, group: Group, member: Member) -> str:
        """Why a classic member of a `connect` group must rejoin now ("": it need not): its epoch is
        behind the group's (the installed target's), it must revoke, or items it waits for were released."""
        cur = member.current
        if cur.member_epoch < group.assignment_epoch:
            return f"its epoch {cur.member_epoch} is behind the group's {group.assignment_epoch}"
        if cur.state == MemberState.UNREVOKED_ITEMS:
            return f"it must stop {len(cur.revoking)} items"
        if cur.state == MemberState.UNRELEASED_ITEMS:
            mid = member.member_id
            if any(group.is_free_for(mid, key) for key in group.pending_of(member).item_keys()):
                return "items it waits for were released"
        return ""

    def _migration_heartbeat(
        self, group: Group, req: classic_pb2.HeartbeatRequest, now: int
    ) -> classic_pb2.HeartbeatResponse:
        """Kafka's classicGroupHeartbeatToConsumerGroup: the session runs again; REBALANCE_IN_PROGRESS
        when the member must rejoin -- which it must then do within its rebalance timeout."""
        member = self._converted_member(group, req.member_id)
        self._check_member_generation(member, req.generation_id)
        self._arm_connect_session(group, member, now)
        why = self._must_rejoin(group, member)
        if why:
            key = TimerKey(TimerKind.CLASSIC_JOIN, group.group_id, member.member_id)
            if self.timer.deadline(key) is None:
                self.timer.schedule(key, now + member.meta.rebalance_timeout_ms)
            raise ApiError(ErrorCode.REBALANCE_IN_PROGRESS, f"rejoin (JoinGroup): {why}")
        return classic_pb2.HeartbeatResponse()

    def _migration_leave(
        self, sink: Sink, group: Group, req: classic_pb2.LeaveGroupRequest, response: Any, now: int
    ) -> None:
        """Kafka's classicGroupLeaveToConsumerGroup: the classic members named leave (their work
        stopped: released at once); a `connect` member or an unknown one gets UNKNOWN_MEMBER_ID."""
        left = False
        for mid in req.member_ids:
            result = response.results.add(member_id=mid)
            member = group.members.get(mid)
            if member is None or not member.meta.is_classic:
                result.error_code = ErrorCode.UNKNOWN_MEMBER_ID
                result.error_message = (
                    f"member '{mid}' is not a member of group '{group.group_id}'"
                    if member is None
                    else f"member '{mid}' uses the {GROUP_TYPE} protocol: it leaves with ConnectGroupHeartbeat member_epoch -1"
                )
                continue
            self._remove_member(sink, group, member, now, reason=EventType.MEMBER_LEFT, hold=False)
            left = True
        if left:
            self._after_change(sink, group, now)

    def _on_member_rejoin_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> None:
        """Told to rejoin and did not within its rebalance timeout: fenced (its work held)."""
        member = group.members.get(key.member_id)
        if member is not None and member.meta.is_classic and self._must_rejoin(group, member):
            self._remove_member(
                sink, group, member, now, reason=EventType.MEMBER_FENCED, hold=True, cause="not_rejoined"
            )

    def _on_member_sync_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> None:
        """Joined and did not sync within its rebalance timeout: fenced (its work held)."""
        member = group.members.get(key.member_id)
        if member is not None and member.meta.is_classic:
            self._remove_member(sink, group, member, now, reason=EventType.MEMBER_FENCED, hold=True, cause="not_synced")

    # -- downgrade (rule 4)

    def _downgrade_refusal(self, group: Group) -> str | None:
        """Why a `connect` group left with classic members only stays `connect` (None: it converts)."""
        policy = self.migration_policy(group)
        if not policy_allows(policy, POLICY_DOWNGRADE):
            return f"policy '{policy}'"
        if group.held:
            return "work still held for fenced members"  # (converted once it is released)
        common = None
        for m in group.members.values():
            names = {name for name, _ in m.meta.protocols}
            common = names if common is None else common & names
        if not common:
            return "no protocol common to its members"
        return None

    def _maybe_downgrade(self, sink: Sink, group: Group, now: int) -> None:
        """SPEC §12 rule 4 (Kafka's convertToClassicGroup): a `connect` group whose members all use the
        classic protocol becomes classic when its policy allows it and no fenced member's work is
        held (else it waits for the release: a classic leader would give that work away): generation
        = the group epoch, each member holds what it may run (its target once reconciled), then a
        classic rebalance starts."""
        if not group.members or group.classic_members != len(group.members) or group.classic is not None:
            return
        if self._downgrade_refusal(group) is not None:
            return
        gid, epoch = group.group_id, group.epoch
        if group.process.in_flight is not None:
            self._abandon_assignment(sink, group, now, "the group became classic")
        self.timer.cancel(TimerKey(TimerKind.SCHEDULED, gid))
        self.timer.cancel(TimerKey(TimerKind.ASSIGNMENT, gid))
        members = sorted(group.members.values(), key=lambda m: (m.meta.joined_ms, m.member_id))
        # What each member may run (its assignment and what it is still revoking), not its target:
        # a member that has not confirmed a revocation still runs those items, and the classic
        # record is what a later upgrade counts as its own (simulator seed 12112 --protocol mixed:
        # held at its target, an eager member's revoked task was counted as no one's by the next
        # upgrade and handed out while it ran). Items targeted to it but not yet released stay
        # with their owner.
        targets = {m.member_id: m.owned for m in members}
        for m in members:
            self._drop_member(sink, group, m)
        for mid in sorted(group.target_members):
            sink.emit(TargetMember(gid, mid, None))
        sink.emit(TargetMetadata(gid, None))
        sink.emit(GroupMetadata(gid, replace(group.meta, group_type=CLASSIC_GROUP_TYPE)))
        sink.emit(
            ClassicGroupMetadata(
                gid, ClassicGroupValue(epoch, STABLE, CONNECT_PROTOCOL_TYPE, leader=members[0].member_id)
            )
        )
        for m in members:
            value = ClassicMemberValue(
                m.meta.client_id,
                m.meta.session_timeout_ms,
                m.meta.rebalance_timeout_ms,
                m.meta.protocols,
                b"",
                m.meta.joined_ms,
            )
            sink.emit(ClassicMemberMetadata(gid, m.member_id, value))
        classic = group.classic
        assert classic is not None
        protocol = self._select_protocol(classic)
        self._set_group(sink, group, protocol_name=protocol)
        version = protocol_version(protocol)
        for m in members:
            cm = classic.members[m.member_id]
            items = targets[m.member_id]
            held = ConnectAssignment(
                version,
                0,
                "",
                "",
                group.meta.config_offset,
                tuple(sorted(items.connectors)),
                tuple(sorted(items.tasks)),
            )
            sink.emit(ClassicMemberMetadata(gid, cm.member_id, replace(cm.value, assignment=encode_assignment(held))))
            self._arm_session(group, cm, now, force=True)
        self._event(sink, group, EventType.GROUP_DOWNGRADED, generation=epoch, epoch=epoch, members=len(members))
        self._prepare_rebalance(sink, group, "group_downgraded", now)

    def _classic_only_assignor(self, group: Group) -> str:
        """The assignor of a `connect` group with no `connect` member (classic members only: they do
        not vote): with an assignor service, its last target's (or the incremental cooperative one,
        Connect's default); without one nobody can compute."""
        served = self.service_assignors
        if not group.members or served is None or self.assignment_mode(group) != MODE_SERVICE:
            raise AssignorSelectionError("no member of the group can compute an assignment (classic members only)")
        for name in (group.target.assignor_name, "incremental-cooperative", *sorted(served)):
            if name in served:
                return name
        raise AssignorSelectionError("the assignor service provides no assignor")
