"""The group coordinator's logic: deterministic handlers over in-memory state (the core's facade).

Every handler takes the state, a request and the time (`now_ms`) and returns a `Result`: the
records to write, the response, and the effects for the runtime (handler.py). Records are applied
to memory as they are emitted, through `CoordinatorState.replay` -- the function recovery uses --
so later steps of the same handler and later requests see them; the runtime (machine.py) writes
them to SQL before it sends the response or carries out the effects. Volatile state -- session
deadlines, timers, the assignment being computed -- is not stored; `load()` re-arms it after a
restart, as Kafka's coordinator does.

The core is split by concept: membership and sessions (membership.py), the assignment process
(assignment_process.py), reconciliation (reconciliation.py), admin (admin.py); this facade adds
timers, what follows every change, and loading.

No clock, no I/O, no randomness except the injected member-id factory: every scenario of the
seeds is a fast deterministic test, and the simulator can drive millions of steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from services.coordinator.core.admin import Admin
from services.coordinator.core.assignment_process import AssignmentProcess
from services.coordinator.core.classic import ClassicGroups
from services.coordinator.core.handler import GROUP_TYPE, Effect, Nudge, Result, ServiceAssignment, Sink
from services.coordinator.core.membership import Membership
from services.coordinator.core.records import EventType, MemberState, Record
from services.coordinator.core.state import STABLE, CoordinatorState, Group
from services.coordinator.core.timers import TimerKey, TimerKind

__all__ = ["GROUP_TYPE", "Effect", "GroupCoordinator", "Nudge", "Result", "ServiceAssignment"]


@dataclass
class GroupCoordinator(Membership, AssignmentProcess, Admin, ClassicGroups):
    """The core: every handler of the wire and admin APIs (the classic protocol's too), the timers,
    and recovery."""

    def poll(self, now_ms: int) -> Result:
        """Fire every timer due at `now_ms`: session expiry, revocation timeout, release of held work,
        executor timeout / retry, delayed rebalance, empty-group retention."""
        sink = Sink(self.state, now_ms)
        for key in self.timer.pop_expired(now_ms):
            group = self.state.groups.get(key.group_id)
            if group is None:
                continue
            if self._ON_TIMER[key.kind](self, sink, group, key, now_ms):
                continue  # the group is gone
            self._after_change(sink, group, now_ms)
        return sink.result()

    # What each timer does when it fires; True: the group was deleted.
    _ON_TIMER: ClassVar[dict[TimerKind, Callable[[GroupCoordinator, Sink, Group, TimerKey, int], bool]]] = {
        TimerKind.SESSION: Membership._on_session_deadline,
        TimerKind.REVOCATION: Membership._on_revocation_deadline,
        TimerKind.HELD: Membership._on_held_deadline,
        TimerKind.ASSIGNMENT: AssignmentProcess._on_assignment_deadline,
        TimerKind.SCHEDULED: AssignmentProcess._on_scheduled_rebalance,
        TimerKind.RETENTION: Admin._on_retention_deadline,
        TimerKind.CLASSIC_SESSION: ClassicGroups._on_classic_session_deadline,
        TimerKind.CLASSIC_JOIN: ClassicGroups._on_classic_join_deadline,
        TimerKind.CLASSIC_SYNC: ClassicGroups._on_classic_sync_deadline,
        TimerKind.LOAD: AssignmentProcess._on_load_sample,
    }

    def next_deadline(self) -> int | None:
        return self.timer.next_deadline()

    def _after_change(self, sink: Sink, group: Group, now: int) -> None:
        if self.state.groups.get(group.group_id) is not group:
            return
        if group.classic_members:
            self._maybe_downgrade(sink, group, now)  # SPEC §12 rule 4 (then a classic group, rebalancing)
        if group.classic is None:
            self._maybe_start_assignment(sink, group, now)
            self._nudge_epoch_laggards(sink, group)
            if (
                group.group_id in sink.touched
                and group.stable_logged_epoch != group.assignment_epoch
                and group.state() == STABLE
            ):
                group.stable_logged_epoch = group.assignment_epoch
                sink.event(group, EventType.GROUP_STABLE)
        key = TimerKey(TimerKind.RETENTION, group.group_id)
        if not group.members and not group.connectors and self._classic_is_empty(group):
            short = group.created_by_join
            if self.timer.deadline(key) is None or (group.short_retention and not short):
                # (an operator configured it since its short wait began: the full retention, from now)
                group.short_retention = short
                self.timer.schedule(key, now + self._empty_retention_ms(group))
        else:
            self.timer.cancel(key)

    def _empty_retention_ms(self, group: Group) -> int:
        """How long an Empty group without connectors is kept: group.connect.empty.retention.ms --
        unless only joins ever made it (no operator's PutConnector or AlterConfigs), then one session
        timeout, enough for its workers to restart and find their epochs: a flood of joins under
        fresh group ids leaves nothing behind for days."""
        if group.created_by_join:
            return min(self.config.empty_retention_ms, self.session_timeout_ms(group))
        return self.config.empty_retention_ms

    def load(self, records: Iterable[Record], now_ms: int) -> Result:
        """Rebuild memory from stored records (the same replay as live handling), then re-arm what is
        not stored: every member gets a fresh (maximal) session, revocations a fresh rebalance timeout,
        held work a fresh (maximal) session's wait, and groups that need an assignment start one."""
        self.state = CoordinatorState()
        self.timer.clear()
        for record in records:
            self.state.replay(record)
        sink = Sink(self.state, now_ms)
        for group in list(self.state.groups.values()):
            self._rearm(sink, group, now_ms)
        return sink.result()

    def reload_group(self, group_id: str, records: Iterable[Record], now_ms: int) -> Result:
        """Replace one group by its stored records (after a commit touching it failed): the same
        replay and re-arming as `load`, for that group only; every other group is untouched."""
        self.state.groups.pop(group_id, None)
        self.timer.cancel_group(group_id)
        for record in records:
            if record.group_id != group_id:
                raise ValueError(f"record of group '{record.group_id}' in the reload of '{group_id}'")
            self.state.replay(record)
        sink = Sink(self.state, now_ms)
        group = self.state.groups.get(group_id)
        if group is not None:
            self._rearm(sink, group, now_ms)
        return sink.result()

    def _rearm(self, sink: Sink, group: Group, now_ms: int) -> None:
        if group.classic is not None:  # a classic group's members keep their own session timeouts
            self._classic_rearm(group, now_ms)
            self._after_change(sink, group, now_ms)
            return
        # When each member last heartbeat, and which session timeout it was told then, is not
        # stored; the timeout may have been lowered since (group config, server default). A member
        # must not be expired (its work freed) before it stops that work on its own, so the first
        # deadline after a restart uses the largest timeout it can have been told.
        session = max(self.session_timeout_ms(group), self.config.max_session_timeout_ms)
        for mid, m in group.members.items():
            # (a classic member's session is its JoinGroup's, SPEC §12)
            m.session_deadline_ms = now_ms + max(session, m.meta.session_timeout_ms)
            self.timer.schedule(m.session_timer(group.group_id), m.session_deadline_ms)
            if m.current.state == MemberState.UNREVOKED_ITEMS:
                self.timer.schedule(
                    TimerKey(TimerKind.REVOCATION, group.group_id, mid), now_ms + m.meta.rebalance_timeout_ms
                )
                m.revoking_since_ms = now_ms
        for mid in group.held:
            self.timer.schedule(TimerKey(TimerKind.HELD, group.group_id, mid), now_ms + session)
        if group.target.scheduled_rebalance_ms:
            self.timer.schedule(TimerKey(TimerKind.SCHEDULED, group.group_id), group.target.scheduled_rebalance_ms)
        if group.item_loads:  # (SPEC §13: the load watch starts over, a cooldown from now)
            self.timer.schedule(TimerKey(TimerKind.LOAD, group.group_id), now_ms + self._load_cooldown_ms(group) // 4)
        self._after_change(sink, group, now_ms)
