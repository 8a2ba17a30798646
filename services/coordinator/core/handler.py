"""What every part of the coordinator's core shares: a handler's result, its effects, the record
sink, and `CoreBase` -- the state, the timers and the configuration the parts work on.

A handler takes the state, a request and the time and returns a `Result`: the records to write, the
response, and the effects the runtime must carry out once the records are durable. Records are
applied to memory as they are emitted (`Sink.emit`, through `CoordinatorState.replay` -- the
function recovery uses), so later steps of the same handler and later requests see them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from connect.coordinator.v1 import assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from services.coordinator.core.config import (
    ASSIGNMENT_MODE,
    HEARTBEAT_INTERVAL,
    LOAD_COOLDOWN,
    MIGRATION_POLICY,
    REBALANCE_PROTOCOLS_KEY,
    SESSION_TIMEOUT,
    ServerConfig,
    effective_group_configs,
)
from services.coordinator.core.errors import ApiError, clip
from services.coordinator.core.records import (
    CurrentAssignment,
    CurrentAssignmentValue,
    EventType,
    GroupMetadata,
    GroupMetadataValue,
    MemberState,
    RebalanceEvent,
    Record,
    TargetMemberValue,
)
from services.coordinator.core.state import CoordinatorState, Group, Member
from services.coordinator.core.timers import Timer

if TYPE_CHECKING:
    from services.coordinator.core.assignment import AssignPayload

GROUP_TYPE = "connect"


@dataclass
class ServiceAssignment:
    """An assignment the runtime must compute with the assignor service, then report back."""

    group_id: str
    group_epoch: int
    # The request, serialized in pieces (`assignment.serialize_snapshot`): no message of the group.
    payload: AssignPayload

    @property
    def request(self) -> assignor_pb2.AssignRequest:
        """The request as one message, in full: parsed anew at each read (tests, the simulator)."""
        return self.payload.message()


@dataclass(frozen=True, slots=True)
class Nudge:
    """Members that have something to do now (SPEC §11): the runtime tells them over their push
    streams and they heartbeat at once. A hint only: losing it costs latency, never safety."""

    group_id: str
    member_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class ClassicWait:
    """A classic JoinGroup or SyncGroup that waits for the rebalance (SPEC §12): the handler's
    response when it has no answer yet. The runtime parks the call under (`group_id`, `token`) and
    answers it with the `ClassicAnswer` that names the same token, or with an error of its own when
    the group is unloaded or reloaded (the core forgets who waits then; the member calls again)."""

    group_id: str
    member_id: str
    kind: str  # "join" or "sync"
    token: int


@dataclass(frozen=True, slots=True)
class ClassicAnswer:
    """The answer to a parked classic call (`ClassicWait` with the same group and token), in
    `Result.answers`: released, like the effects, only once the records of the change that produced
    it are durable."""

    group_id: str
    member_id: str
    token: int
    response: Any  # a JoinGroupResponse or a SyncGroupResponse


NUDGE_COMPUTE = "compute_assignment"
NUDGE_TARGET = "target_changed"
NUDGE_RELEASED = "items_released"
NUDGE_EPOCH = "epoch_advanced"  # only the member epoch moves: nudged after the members with work

# What a handler asks the runtime to do once its records are durable (and never if they are lost).
Effect = ServiceAssignment | Nudge


@dataclass
class Result:
    records: list[Record]
    response: Any = None
    effects: list[Effect] = field(default_factory=list)
    # Answers to parked classic calls (SPEC §12): released like the effects, once the records are
    # durable (and never if they are lost), each to the call parked under its token.
    answers: list[ClassicAnswer] = field(default_factory=list)


class Sink:
    """Collects a handler's records and effects; applies each record to memory at once (same replay as recovery)."""

    def __init__(self, state: CoordinatorState, now_ms: int) -> None:
        self.state = state
        self.now_ms = now_ms
        self.records: list[Record] = []
        self.effects: list[Effect] = []
        self.answers: list[ClassicAnswer] = []
        # Groups this handler changed or logged something for (group_stable is only checked for them).
        self.touched: set[str] = set()
        # The member whose request this is: its response tells it everything, so it is never nudged.
        self.requester = ""

    def emit(self, record: Record) -> None:
        self.state.replay(record)
        self.records.append(record)
        self.touched.add(record.group_id)

    def event(
        self,
        group: Group,
        event: EventType,
        member_id: str = "",
        member_epoch: int = 0,
        *,
        epochs: tuple[int, int] | None = None,
        **details: Any,
    ) -> None:
        """Log an event; `epochs` (group, assignment) stand in for the group's own (a classic group's
        generation, SPEC §12 rule 7)."""
        group_epoch, assignment_epoch = epochs if epochs is not None else (group.epoch, group.assignment_epoch)
        self.touched.add(group.group_id)
        self.records.append(
            RebalanceEvent(
                group_id=group.group_id,
                time_ms=self.now_ms,
                event=event,
                member_id=member_id,
                group_epoch=group_epoch,
                assignment_epoch=assignment_epoch,
                member_epoch=member_epoch,
                details=details,
            )
        )

    def nudge_requester(self, group_id: str, reason: str) -> None:
        """Nudge the member whose request this is: its answer does not tell it everything (a
        lost-response answer moves it to its epoch only; it has a newer target to reconcile to)."""
        self.effects.append(Nudge(group_id, (self.requester,), reason))

    def nudge(self, group_id: str, member_ids: Iterable[str], reason: str) -> None:
        members = tuple(m for m in member_ids if m != self.requester)
        if members:
            self.effects.append(Nudge(group_id, members, reason))

    def result(self, response: Any = None) -> Result:
        return Result(self.records, response, self.effects, self.answers)


def _same_extras(target: TargetMemberValue | None, current: CurrentAssignmentValue) -> bool:
    """Whether a member's target tells it nothing its current assignment has not (error, version,
    metadata: the assignor's word to the worker, carried by the answer that moves it)."""
    if target is None:
        return current.error == 0 and current.version == 0 and current.metadata == b""
    return target.error == current.error and target.version == current.version and target.metadata == current.metadata


@dataclass
class CoreBase:
    """The state and configuration every part of the core works on, and the steps the parts call
    across each other (implemented in membership.py, assignment_process.py and admin.py, assembled by
    coordinator.py's GroupCoordinator)."""

    config: ServerConfig = field(default_factory=ServerConfig)
    # Assignors of the assignor service (name -> version range); None: no service, client-side mode only.
    service_assignors: dict[str, tuple[int, int]] | None = None
    new_member_id: Callable[[], str] = field(default_factory=lambda: lambda: str(uuid.uuid4()))
    state: CoordinatorState = field(default_factory=CoordinatorState, init=False)
    # Volatile deadlines (sessions, revocations, ...), re-armed by `load` after a restart.
    timer: Timer = field(default_factory=Timer, init=False)

    # ---- configuration -----------------------------------------------------------------------

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

    def _load_cooldown_ms(self, group: Group) -> int:
        """The group's load.cooldown.ms (SPEC §13), else group.connect.load.cooldown.ms."""
        return self._int_config(group, LOAD_COOLDOWN, self.config.load_cooldown_ms)

    def heartbeat_interval_ms(self, group: Group) -> int:
        return self._int_config(group, HEARTBEAT_INTERVAL, self.config.heartbeat_interval_ms)

    def assignment_mode(self, group: Group | None) -> str:
        """The group's assignment.mode; for a group not created yet, the server default."""
        overrides = group.configs if group is not None else {}
        return effective_group_configs(self.config, overrides, self.service_assignors is not None)[ASSIGNMENT_MODE]

    def check_protocol_enabled(self, protocol: str) -> None:
        """The feature flag (SPEC §12): a group protocol this server does not speak is refused on
        every one of its RPCs (UNSUPPORTED_VERSION, naming the key)."""
        if protocol not in self.config.rebalance_protocols:
            raise ApiError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"the {protocol} group protocol is disabled on this coordinator "
                f"({REBALANCE_PROTOCOLS_KEY}={','.join(self.config.rebalance_protocols)})",
            )

    def migration_policy(self, group: Group | None) -> str:
        """The group's `migration.policy`, else the server's group.connect.migration.policy (SPEC §12)."""
        value = group.configs.get(MIGRATION_POLICY) if group is not None else None
        return value if value is not None else self.config.migration_policy

    def _create_group(self, sink: Sink, group_id: str, now: int) -> Group:
        """A new group (a first join, or an operator's PutConnector / AlterConfigs --create): refused
        in band once this coordinator holds group.coordinator.max.groups groups, so that no client
        can fill memory, the database and the next restart's load with groups."""
        held = len(self.state.groups)
        if held >= self.config.max_groups:
            raise ApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group '{clip(group_id)}' not created: this coordinator holds {held} groups "
                f"(group.coordinator.max.groups is {self.config.max_groups})",
            )
        sink.emit(GroupMetadata(group_id, GroupMetadataValue(epoch=0, group_type=GROUP_TYPE, created_ms=now)))
        group = self.state.groups[group_id]
        sink.event(group, EventType.GROUP_CREATED)
        return group

    def _nudge_waiting(self, sink: Sink, group: Group, released: Items) -> None:
        """`released` are free now: nudge the members whose target has them and who wait for them
        (UnreleasedItems, or not yet at the target's epoch: an install does not nudge a member all
        of whose new items are still owned by others -- see `_nudge_target`). O(released items),
        whatever the group's size. The members are nudged in member-id order: `released` is a set,
        whose order changes with the process's hash seed, and one seed of the simulator must be one
        exact run in any process."""
        waiting: dict[str, None] = {}
        epoch = group.assignment_epoch
        for key in released.item_keys():
            mid = group.target_owner.get(key)
            if mid is not None and mid not in waiting:
                m = group.members.get(mid)
                if m is not None and (
                    m.current.state == MemberState.UNRELEASED_ITEMS or 0 <= m.current.member_epoch < epoch
                ):
                    waiting[mid] = None
        sink.nudge(group.group_id, sorted(waiting), NUDGE_RELEASED)

    # ---- steps one part calls in another ----------------------------------------------------------

    def _nudge_target(self, sink: Sink, group: Group) -> None:
        """A new target is installed. Nudged now: the members with something to do at once -- items
        to revoke (the critical path: what they release, others wait for), or items to receive that
        are free. Nudged when their items are released (`_nudge_waiting`): members all of whose new
        items someone else still owns (a heartbeat now would only tell them to wait). Members whose
        work does not change are moved to the new epoch here, without a heartbeat, when they are
        known to hold their epoch (`_advance_quietly`); the others among them are nudged once all
        that work is done (`_nudge_epoch_laggards`). O(items) -- as the install itself."""
        proc = group.process
        work: list[str] = []
        now: list[str] = []
        quiet: list[Member] = []
        epoch = group.assignment_epoch
        quietly = self.config.quiet_epoch_advance
        for mid, m in group.members.items():
            current = m.current
            value = group.target_members.get(mid)
            target = value.items if value is not None else EMPTY
            if current.state == MemberState.STABLE and target == current.assigned:
                if (
                    quietly
                    and 1 <= m.confirmed_epoch == current.member_epoch < epoch
                    and not m.meta.is_classic
                    and _same_extras(value, current)
                ):
                    quiet.append(m)
                continue
            work.append(mid)
            wanted = target - current.assigned
            if (
                current.state != MemberState.STABLE
                or not current.assigned.issubset(target)
                or not wanted
                or any(group.is_free_for(mid, key) for key in wanted.item_keys())
            ):
                now.append(mid)
        for m in quiet:
            self._advance_quietly(sink, group, m, epoch)
        lagging = len(group.members) - len(work) - len(quiet)
        if not work:
            # Only the epoch moves, for everyone: those not moved already heartbeat to it.
            sink.nudge(
                group.group_id, [mid for mid, m in group.members.items() if m.member_epoch != epoch], NUDGE_TARGET
            )
            proc.awaiting_work.clear()
            proc.epoch_nudge_due = False
            return
        sink.nudge(group.group_id, now, NUDGE_TARGET)
        proc.awaiting_work = set(work)
        proc.epoch_nudge_due = lagging > 0

    def _advance_quietly(self, sink: Sink, group: Group, member: Member, epoch: int) -> None:
        """Move a member whose work does not change to the installed target's epoch without its
        heartbeat (a record, no nudge): at a join into N workers, the N - 10 or so whose items stay
        put no longer wake up, and the group is Stable once the members that move work are done.
        Only a member whose last request was at its epoch (`confirmed_epoch`): its next request, at
        that epoch, is then the lost-response case (its previous epoch, owning a subset of its
        assignment), accepted and answered with the new epoch. Not a classic member (its generation is
        its epoch, SPEC §12). It runs exactly what it ran: no item changes hands."""
        current = member.current
        sink.emit(
            CurrentAssignment(
                group.group_id,
                member.member_id,
                replace(
                    current,
                    member_epoch=epoch,
                    previous_member_epoch=current.member_epoch,
                    request_sequence=member.last_request_sequence,  # (never below the stored one: replay)
                ),
            )
        )
        sink.event(
            group,
            EventType.MEMBER_EPOCH_ADVANCED,
            member.member_id,
            epoch,
            previous=current.member_epoch,
            heartbeat=False,
        )

    def _work_done(self, group: Group, member_id: str) -> None:
        """The member reconciled with the installed target, or left the group."""
        group.process.awaiting_work.discard(member_id)

    def _nudge_epoch_laggards(self, sink: Sink, group: Group) -> None:
        """Every member with work is done: nudge the rest to the assignment epoch (the group is Stable
        once they heartbeat). Once per installed target."""
        proc = group.process
        if proc.epoch_nudge_due and not proc.awaiting_work:
            proc.epoch_nudge_due = False
            epoch = group.assignment_epoch
            lagging = [mid for mid, m in group.members.items() if m.current.member_epoch != epoch]
            sink.nudge(group.group_id, lagging, NUDGE_EPOCH)

    def _after_change(self, sink: Sink, group: Group, now: int) -> None:
        raise NotImplementedError

    def _bump(self, sink: Sink, group: Group, reason: str, member_id: str = "", **details: Any) -> None:
        raise NotImplementedError

    def _selected_assignor(self, group: Group) -> str:
        raise NotImplementedError

    def _maybe_start_assignment(self, sink: Sink, group: Group, now: int) -> None:
        raise NotImplementedError

    def _abandon_assignment(self, sink: Sink, group: Group, now: int, why: str, backoff: bool = False) -> None:
        raise NotImplementedError

    def _remove_member(
        self, sink: Sink, group: Group, member: Member, now: int, reason: EventType, hold: bool, **details: Any
    ) -> None:
        raise NotImplementedError

    def _delete_group(self, sink: Sink, group: Group) -> None:
        raise NotImplementedError

    def _classic_yield_to_connect(self, sink: Sink, group: Group, now: int) -> None:
        raise NotImplementedError

    def _reconcile(self, sink: Sink, group: Group, member: Member, owned: Items | None, now: int) -> None:
        raise NotImplementedError

    def _drop_member(self, sink: Sink, group: Group, member: Member) -> None:
        raise NotImplementedError

    def _classic_connectors_changed(self, sink: Sink, group: Group, now: int, **details: Any) -> None:
        raise NotImplementedError

    def _classic_only_assignor(self, group: Group) -> str:
        raise NotImplementedError
