"""The assignment process (Kafka's TargetAssignmentBuilder role): when a new target is needed, which
assignor and executor compute it, the computation in flight, its deadline and retries, and the
validation and installation of its result (client-side Prepare/Install, or the assignor service)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from connect.coordinator.v1 import assignor_pb2, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core import loads, validation
from services.coordinator.core.assignment import (
    SERVICE_EXECUTOR,
    AssignAnswer,
    AssignorSelectionError,
    InvalidAssignment,
    executor_candidates,
    fill_snapshot,
    select_assignor_counted,
    serialize_snapshot,
    validate_result,
)
from services.coordinator.core.config import (
    MODE_SERVICE,
    load_settings,
)
from services.coordinator.core.errors import ApiError, clip, invalid
from services.coordinator.core.explain import SERVICE_LABEL
from services.coordinator.core.handler import NUDGE_COMPUTE, CoreBase, Result, ServiceAssignment, Sink
from services.coordinator.core.records import (
    EventType,
    GroupMetadata,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
)
from services.coordinator.core.state import (
    STABLE,
    Group,
    HandedOut,
    InFlightAssignment,
    assignors_key,
)
from services.coordinator.core.timers import TimerKey, TimerKind

# The reason of the epoch bump the load watch makes (SPEC §13).
LOAD_IMBALANCE = "load_imbalance"


class AssignmentProcess(CoreBase):
    """Group epochs, the assignment in flight, Prepare / Install and the assignor service's answers."""

    def _bump(self, sink: Sink, group: Group, reason: str, member_id: str = "", **details: Any) -> None:
        sink.emit(GroupMetadata(group.group_id, replace(group.meta, epoch=group.epoch + 1)))
        sink.event(group, EventType.GROUP_EPOCH_BUMPED, member_id, reason=reason, **details)
        if reason != LOAD_IMBALANCE:
            # The assignor's input changed: it may find a better placement.
            group.load_watch.futile, group.load_watch.streak = False, 0

    def _selected_assignor(self, group: Group) -> str:
        first = next((m for m in group.members.values() if not m.meta.is_classic), None)
        if first is None:  # (no member, or classic members only: SPEC §12)
            return self._classic_only_assignor(group)
        return select_assignor_counted(group.assignor_lists, assignors_key(first.meta))

    def _maybe_start_assignment(self, sink: Sink, group: Group, now: int) -> None:
        if group.process.in_flight is not None or not group.members or group.epoch <= group.assignment_epoch:
            return
        key = TimerKey(TimerKind.ASSIGNMENT, group.group_id)
        if self.timer.deadline(key) is not None:
            return  # backing off after a failure
        try:
            name = self._selected_assignor(group)
        except AssignorSelectionError:
            return
        if self.assignment_mode(group) == MODE_SERVICE:
            inflight = InFlightAssignment(SERVICE_EXECUTOR, now, now + self.config.assignor_timeout_ms)
            vouched = self._snapshot_taken(group, inflight, name)
            payload, inflight.snapshot_targets = serialize_snapshot(
                group, name, now, self.group_configs(group), vouched
            )
            sink.effects.append(ServiceAssignment(group.group_id, group.epoch, payload))
        else:
            candidates = executor_candidates(group.members, name)
            if not candidates:
                # Said once per epoch: the group stays Assigning until a member able to compute joins.
                if group.process.unassignable_epoch != group.epoch:
                    group.process.unassignable_epoch = group.epoch
                    group.process.last_error = ("", f"no worker supports every version of '{name}' in use", now)
                    sink.event(
                        group,
                        EventType.ASSIGNMENT_FAILED,
                        reason=f"no worker supports every version of '{name}' in use",
                    )
                return
            # Prefer the previous executor (sticky, like Connect's leader); skip ones that just failed.
            usable = [c for c in candidates if c not in group.process.failed_executors] or candidates
            executor = group.process.last_executor if group.process.last_executor in usable else usable[0]
            timeout = group.members[executor].meta.rebalance_timeout_ms
            inflight = InFlightAssignment(executor, now, now + timeout)
        group.process.in_flight = inflight
        self.timer.schedule(key, inflight.deadline_ms)
        sink.event(
            group,
            EventType.ASSIGNMENT_REQUESTED,
            inflight.executor,
            executor=inflight.executor or "service",
            assignor=name,
        )
        if inflight.executor:
            sink.nudge(group.group_id, (inflight.executor,), NUDGE_COMPUTE)

    def _snapshot_taken(self, group: Group, inflight: InFlightAssignment, name: str) -> bool:
        """Note in ``inflight`` the snapshot of the group the assignor's input is taken from; whether
        the coordinator vouches for its current target (current_target_checked: a result may then
        leave out the members whose entry stands, as handed out, accept_unchanged_omitted)."""
        inflight.group_epoch = group.epoch
        inflight.assignor_name = name
        inflight.snapshot_members = {mid: m.meta.instance_id for mid, m in group.members.items()}
        inflight.snapshot_connectors = dict(group.connectors)
        inflight.snapshot_shrinks = group.connector_shrinks
        inflight.snapshot_targets = None
        return group.process.target_checked_at == group.connector_shrinks

    def _prepare(
        self,
        out: coordinator_pb2.ConnectGroupPrepareAssignmentResponse,
        group: Group,
        inflight: InFlightAssignment,
        name: str,
        now: int,
        compact_tasks: bool = False,
    ) -> None:
        """The assignor's input written into Prepare's response ``out``, and the snapshot it was
        taken from noted in ``inflight``."""
        vouched = self._snapshot_taken(group, inflight, name)
        fill_snapshot(out, group, name, now, self.group_configs(group), compact_tasks)
        out.current_target_checked = out.accept_unchanged_omitted = vouched
        if vouched:
            values = group.target_members
            inflight.snapshot_targets = {
                mt.member_id: HandedOut(mt, values[mt.member_id]) for mt in out.current_target.members
            }

    def _abandon_assignment(self, sink: Sink, group: Group, now: int, why: str, backoff: bool = False) -> None:
        """Give up on the assignment in flight. A worker that timed out is replaced at once; after an
        assignor error or an invalid result, wait (exponential backoff) before asking again."""
        inflight = group.process.in_flight
        if inflight is None:
            return
        group.process.in_flight = None
        group.process.failures += 1
        if inflight.executor:
            group.process.failed_executors.add(inflight.executor)
        key = TimerKey(TimerKind.ASSIGNMENT, group.group_id)
        self.timer.cancel(key)
        sink.event(
            group, EventType.ASSIGNMENT_FAILED, inflight.executor, executor=inflight.executor or "service", reason=why
        )
        group.process.last_error = (inflight.executor or SERVICE_LABEL, why, now)
        if backoff:
            delay = min(
                self.config.assignment_retry_backoff_ms * 2 ** min(group.process.failures - 1, 16),
                self.config.assignment_retry_backoff_max_ms,
            )
            self.timer.schedule(key, now + delay)

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
        inflight = group.process.in_flight
        if inflight is None or inflight.executor != member_id:
            raise ApiError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member '{member_id}' is not the member chosen to compute the assignment"
            )
        return group, inflight

    def prepare_assignment(self, req: coordinator_pb2.ConnectGroupPrepareAssignmentRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        sink.requester = req.member_id  # answered directly: never nudged
        try:
            validation.check_member_request(req.group_id, req.member_id, req.member_epoch, self.config)
            group, inflight = self._chosen_member(req.group_id, req.member_id, req.member_epoch)
            name = self._selected_assignor(group)
            # The same fields as an AssignRequest (accept_task_ranges: Install reads both forms),
            # built in place.
            response = coordinator_pb2.ConnectGroupPrepareAssignmentResponse()
            self._prepare(response, group, inflight, name, now_ms, req.accept_task_ranges)
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupPrepareAssignmentResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def install_assignment(self, req: coordinator_pb2.ConnectGroupInstallAssignmentRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        sink.requester = req.member_id  # the installer heartbeats at once on its own
        try:
            # Entries handed out in Prepare (the coordinator's own, checked when built) are not
            # checked field by field again when they come back unchanged.
            chosen = self.state.groups.get(req.group_id)
            handed_out = chosen.process.in_flight if chosen is not None else None
            validation.check_install(
                req,
                self.config,
                handed_out.snapshot_targets
                if handed_out is not None and handed_out.executor == req.member_id
                else None,
            )
            group, inflight = self._chosen_member(req.group_id, req.member_id, req.member_epoch)
            if not inflight.prepared:
                raise invalid("no assignment input was prepared: call ConnectGroupPrepareAssignment first")
            if req.group_epoch != inflight.group_epoch:
                raise ApiError(
                    ErrorCode.INVALID_ASSIGNMENT,
                    f"group_epoch {req.group_epoch} is not the epoch of the prepared input ({inflight.group_epoch})",
                )
            self._install(
                sink,
                group,
                inflight,
                req.error,
                req.members,
                bytes(req.assignor_state),
                req.rebalance_delay_ms,
                now_ms,
                unchanged_omitted=req.unchanged_omitted,
            )
            response = coordinator_pb2.ConnectGroupInstallAssignmentResponse()
        except ApiError as e:
            response = coordinator_pb2.ConnectGroupInstallAssignmentResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def complete_service_assignment(
        self,
        group_id: str,
        group_epoch: int,
        response: assignor_pb2.AssignResponse | AssignAnswer,
        now_ms: int,
        service: str = "",
    ) -> Result:
        """Install the assignor service's answer (the message, or read from its bytes: `read_answer`);
        `service` (its address) is stored with the target."""
        sink = Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        inflight = group.process.in_flight if group is not None else None
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
                unchanged_omitted=response.unchanged_omitted,
            )
            return sink.result(ErrorCode.NONE)
        except ApiError as e:
            return sink.result(e.code)

    def fail_service_assignment(self, group_id: str, group_epoch: int, why: str, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        if (
            group is not None
            and group.process.in_flight is not None
            and group.process.in_flight.group_epoch == group_epoch
        ):
            self._abandon_assignment(sink, group, now_ms, why, backoff=True)
        return sink.result()

    def _install(
        self,
        sink: Sink,
        group: Group,
        inflight: InFlightAssignment,
        error: int,
        members: Iterable[common_pb2.MemberTarget],
        assignor_state: bytes,
        rebalance_delay_ms: int,
        now: int,
        error_message: str = "",
        computed_by: str = "",
        unchanged_omitted: bool = False,
    ) -> None:
        gid = group.group_id
        if error != 0:
            # An assignor error keeps the current target (seed 001); ask again after a backoff.
            self._abandon_assignment(
                sink, group, now, f"assignor error {error}: {error_message}".strip(": "), backoff=True
            )
            return
        # The snapshot's target entries that still stand (the same value, a live member): a member
        # given back exactly its entry keeps its target as it is, without decoding or checking it
        # item by item (at 10,000 members that was most of an install).
        targets = group.target_members
        kept = {
            mid: handed
            for mid, handed in (inflight.snapshot_targets or {}).items()
            if targets.get(mid) is handed.value and mid in group.members
        }
        try:
            if unchanged_omitted and inflight.snapshot_targets is None:
                raise InvalidAssignment(
                    "unchanged_omitted is set, but the prepared input did not accept it (accept_unchanged_omitted)"
                )
            by_member, unchanged = validate_result(
                members,
                inflight.snapshot_members,
                inflight.snapshot_connectors,
                rebalance_delay_ms,
                kept,
                group.target_owner.get,
                inflight.snapshot_targets if unchanged_omitted else None,
            )
            self._check_target_metadata(by_member)
        except InvalidAssignment as e:
            self._abandon_assignment(sink, group, now, f"invalid assignment: {e}", backoff=True)
            raise ApiError(ErrorCode.INVALID_ASSIGNMENT, str(e)) from None

        new_target: dict[str, TargetMemberValue] = {}
        moved = 0
        for mid, tv in by_member.items():
            if mid in unchanged:
                new_target[mid] = targets[mid]
                continue
            if mid not in group.members:
                # A static member replaced since the snapshot: its new incarnation takes the target.
                iid = inflight.snapshot_members.get(mid)
                mid = group.static_members.get(iid, mid) if iid else mid
            new_target[mid] = tv
            # Items that were in someone else's target (the current target's owner index, read
            # before any of the new entries is applied: each one changes that index).
            moved += sum(1 for key in tv.items.item_keys() if group.target_owner.get(key) not in (None, mid))
        for mid, tv in new_target.items():
            if tv is not targets.get(mid) and targets.get(mid) != tv:
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
            self.timer.schedule(TimerKey(TimerKind.SCHEDULED, gid), scheduled)
        else:
            self.timer.cancel(TimerKey(TimerKind.SCHEDULED, gid))
        group.process.in_flight = None
        # The snapshot's entries and values (the targets just replaced) go now, not after the next
        # assignment's input is built below (`_after_change`): at 10,000 members that is two
        # generations of every changed member's target held at once.
        inflight.snapshot_targets = None
        del kept, by_member, new_target
        group.process.target_checked_at = inflight.snapshot_shrinks
        group.process.failures = 0
        group.process.failed_executors.clear()
        group.process.last_executor = inflight.executor
        self.timer.cancel(TimerKey(TimerKind.ASSIGNMENT, gid))
        watch = group.load_watch
        if 0 <= watch.bumped_epoch <= inflight.group_epoch:
            # The target computed for a load_imbalance bump: if it moved nothing, the assignor knows
            # no better placement, and the watch waits for what is known to change (SPEC §13).
            watch.futile = moved == 0
            watch.bumped_epoch = -1
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
        if group.epoch == inflight.group_epoch:
            # Every member moves to the new assignment epoch. Not when the group has moved on
            # already (joins arriving faster than assignments): another target follows at once, and
            # nudging everyone for each would bring a storm of heartbeats; the last one nudges.
            self._nudge_target(sink, group)
        else:
            group.process.awaiting_work.clear()
            group.process.epoch_nudge_due = False
        self._after_change(sink, group, now)

    # ---- timers ---------------------------------------------------------------------------------

    def _check_target_metadata(self, by_member: Mapping[str, TargetMemberValue]) -> None:
        """The metadata an assignor hands each member is bounded like what members send: each
        heartbeat answer carries its member's, an Assign request all of them."""
        limit, total = self.config.max_member_metadata_bytes, 0
        for mid, mt in by_member.items():
            size = len(mt.metadata)
            if size > limit:
                raise InvalidAssignment(
                    f"members[{clip(mid)}].metadata: {size} bytes; group.connect.max.member.metadata.bytes is {limit}"
                )
            total += size
        if total > self.config.max_group_metadata_bytes:
            raise InvalidAssignment(
                f"members[].metadata: {total} bytes together; group.connect.max.group.metadata.bytes is "
                f"{self.config.max_group_metadata_bytes}"
            )

    def _on_assignment_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """The executor did not install in time -- or the backoff after a failure is over."""
        if group.process.in_flight is not None:
            self._abandon_assignment(sink, group, now, "executor did not install in time")
        return False

    def _on_scheduled_rebalance(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        due = group.target.scheduled_rebalance_ms
        if due and due <= now:
            sink.emit(TargetMetadata(group.group_id, replace(group.target, scheduled_rebalance_ms=0)))
            if group.members:
                self._bump(sink, group, "scheduled_rebalance")
        return False

    def _on_load_sample(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """The load watch's sample (SPEC §13, loads.py): the group's ratio for /metrics, and a
        `load_imbalance` bump when the assignor's goal has been missed for a cooldown (see there)."""
        watch = group.load_watch
        if not group.members or group.classic is not None or not loads.has_loads(group):
            watch.since_ms, watch.ratio, watch.logged_ratio = None, 0.0, None
            return False  # not re-armed: the next stored load report arms it
        ratio, max_moves, cooldown = load_settings(self.group_configs(group))
        members = loads.group_loads(group)
        watch.ratio = loads.load_ratio(members)
        self.timer.schedule(key, now + loads.sample_period_ms(cooldown))
        missed = loads.imbalanced(members, ratio)
        if loads.sample_logged(watch, missed, self.config.load_report_threshold):
            sink.event(
                group,
                EventType.LOAD_SAMPLED,
                load_ratio=round(watch.ratio, 4),
                goal=ratio,
                members=len(members),
                members_with_load=loads.members_with_load(members),
            )
        if not missed:
            watch.since_ms = None
            return False
        if watch.since_ms is None:
            watch.since_ms = now
        try:
            assignor = self._selected_assignor(group)
        except AssignorSelectionError:
            return False
        if (
            not loads.watched(group, assignor)
            or watch.futile
            or watch.streak >= loads.bump_limit(len(group.connectors) + sum(group.connectors.values()), max_moves)
            or now - watch.since_ms < cooldown
            or (watch.bumped_ms is not None and now - watch.bumped_ms < cooldown)
            or group.state() != STABLE
        ):
            return False
        worst = max(sorted(members), key=lambda mid: members[mid][0] / members[mid][1])
        watch.since_ms, watch.bumped_ms = None, now
        self._bump(
            sink, group, LOAD_IMBALANCE, worst, load_ratio=round(watch.ratio, 4), goal=ratio, imbalanced_ms=cooldown
        )
        watch.bumped_epoch = group.epoch
        watch.streak += 1
        return False
