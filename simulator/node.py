"""The coordinator node: the real CoordinatorMachine over the real core and a real SQLite file, with crash points."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.coordinator.machine import CoordinatorMachine, HandlerFailed, Ticket
from services.coordinator.records import EventType
from services.coordinator.state import durable_diff, durable_view
from simulator.base import ASSIGNOR_TIMEOUT_MS, LOAD_MS, Violation

if TYPE_CHECKING:
    from simulator.engine import Simulation

import traceback
from collections.abc import Callable
from typing import Any

import services.assignor
from connect.coordinator.v1 import assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core import GroupCoordinator, Result, ServiceAssignment
from services.coordinator.records import MemberMetadata, RebalanceEvent, Record
from services.coordinator.state import CoordinatorState, InvariantViolation
from services.storage import Storage

# ---- the coordinator node ------------------------------------------------------------------------


class CoordinatorNode:
    """The coordinator process: the runtime machine (services.coordinator.machine) over the real core
    and its SQLite file -- the shell's I/O done synchronously, with crash points between the steps."""

    def __init__(self, sim: Simulation, storage: Storage) -> None:
        self.sim = sim
        self.storage = storage
        # The committed state: every record Storage.write accepted, replayed in order.
        self.shadow = CoordinatorState()
        self.committed_members: set[str] = set()  # every member id ever stored
        self.core: GroupCoordinator | None = None
        self.machine: CoordinatorMachine | None = None
        self.up = False
        self.loaded = False
        self.incarnation = 0
        self.crash_phase: str | None = None
        self.downtime_ms = 0
        self.crash_on_requests_only = False
        self.timer_gen = 0
        self.timer_at: int | None = None
        self.assignor_faults: list[str] = []
        self.service_assignors = (
            {a.name: (a.minimum_version, a.maximum_version) for a in services.assignor.list_assignors()}
            if sim.scenario.service
            else None
        )

    @property
    def serving(self) -> bool:
        return self.up and self.loaded and self.core is not None

    # -- lifecycle

    def start(self, now: int, *, instant: bool = False) -> None:
        if self.up:
            return
        self.up, self.loaded = True, False
        self.incarnation += 1
        self.sim.trace(f"coordinator starts (incarnation {self.incarnation})")
        if instant:
            self._load(self.incarnation, now)
        else:
            self.sim.schedule(now + self.sim.rng.randint(0, LOAD_MS), self._load, self.incarnation)

    def _load(self, incarnation: int, now: int) -> bool:
        if incarnation != self.incarnation or not self.up:
            return False
        # A restarted process: a new core in a new runtime machine, loaded from the SQLite file.
        core = GroupCoordinator(self.sim.config, self.service_assignors, new_member_id=self.sim.new_member_id)
        machine = CoordinatorMachine(core)
        records = self.storage.load()
        try:
            machine.load(records, now)
        except Exception as e:
            raise Violation("d-recovery", f"load() failed: {e!r}\n{traceback.format_exc()}") from None
        self.core, self.machine = core, machine
        self._store_all()
        self.loaded = True
        recovered, committed = durable_view(core.state), durable_view(self.shadow)
        if recovered != committed:
            raise Violation(
                "d-recovery",
                "the state recovered from storage differs from the committed state:\n"
                + durable_diff(committed, recovered),
            )
        self.sim.stats.recoveries += 1
        self.sim.trace(f"coordinator loaded {len(records)} records; recovered state == committed state")
        if self.sim.push:
            self.sim.net.reconnect_streams(now)
        self._after(now)
        return True

    def crash(self, now: int, why: str) -> None:
        if not self.up:
            return
        self.up = self.loaded = False
        self.core, self.machine = None, None
        self.crash_phase = None
        self.incarnation += 1  # in-flight assignor calls and timers die with the process
        self.timer_at = None
        self.sim.stats.coordinator_crashes += 1
        self.sim.trace(f"coordinator CRASH ({why}); restarts in {self.downtime_ms} ms")
        self.sim.schedule(now + self.downtime_ms, self._restart, self.incarnation)

    def _restart(self, incarnation: int, now: int) -> bool:
        if incarnation != self.incarnation or self.up:
            return False
        self.start(now)
        return True

    # -- the request path: the machine's handle -> store -> respond, with crash points in between

    def _stored(self, records: list[Record]) -> None:
        """Storage.write accepted these records: they are the committed state from now on."""
        stats = self.sim.stats
        for r in records:
            self.shadow.replay(r)
            if isinstance(r, MemberMetadata) and r.value is not None:
                self.committed_members.add(r.member_id)
            elif isinstance(r, RebalanceEvent):
                if r.event == EventType.MEMBER_FENCED:
                    stats.coordinator_fenced += 1
                    if r.details.get("cause") == "rebalance_timeout":
                        stats.rebalance_timeouts += 1
                    if r.details.get("held"):
                        stats.held += 1
                elif r.event == EventType.MEMBER_EXPIRED:
                    stats.expired += 1
                elif r.event == EventType.REVOCATION_REQUESTED:
                    stats.revocations += 1

    def _store_all(self) -> None:
        """The runtime's writer, synchronously: store every batch the machine hands out."""
        machine = self.machine
        assert machine is not None
        while (batch := machine.next_batch()) is not None:
            self.storage.write(batch.records)
            self._stored(batch.records)
            machine.committed(batch)

    def execute(
        self, handler: Callable[[GroupCoordinator, int], Result], now: int, reply: Callable[[Any], None] | None
    ) -> Ticket | None:
        """Run one handler through the runtime machine. Returns None if the coordinator crashed on the way."""
        core, machine = self.core, self.machine
        assert core is not None and machine is not None
        is_request = reply is not None
        if self.crash_phase == "now":
            self.crash(now, "before handling")
            return None
        try:
            ticket = machine.submit(lambda _request, t: handler(core, t), None, now)
        except HandlerFailed as failed:
            e = failed.__cause__
            if isinstance(e, InvariantViolation):
                raise Violation("a-coordinator", f"the core's replay refused a record: {e}") from None
            if isinstance(e, Violation):
                raise e from None
            trace = "".join(traceback.format_exception(e)) if e is not None else ""
            raise Violation("core-error", f"handler raised {e!r}\n{trace}") from None
        if reply is not None and ticket.answered:
            # Released before its records are stored: only a planted ordering bug does that.
            reply(ticket.response)
            reply = None
        # An armed crash point fires on the first handler that changes state (elsewhere it is the
        # same as crashing between two requests).
        writes = (
            self.crash_phase is not None
            and (is_request or not self.crash_on_requests_only)
            and any(not isinstance(r, RebalanceEvent) for r in ticket.records)
        )
        if writes and self.crash_phase == "after_handle":
            self.crash(now, f"after handling, {len(ticket.records)} records not stored")
            return None
        # Every request is stored before the next one arrives here: each batch is this one request.
        while (batch := machine.next_batch()) is not None:
            self.storage.write(batch.records)
            self._stored(batch.records)
            if writes and self.crash_phase == "after_write":
                self.crash(now, f"after storing {len(batch.records)} records, before responding")
                return None
            machine.committed(batch)
        if not ticket.answered:
            raise Violation("core-error", "the runtime machine did not answer a stored request")
        if reply is not None:
            reply(ticket.response)
        self._after(now)
        return ticket

    def _after(self, now: int) -> None:
        machine = self.machine
        assert machine is not None
        machine.take_resolved()
        for nudge in machine.take_nudges():
            if self.sim.push:
                self.sim.net.nudge(nudge.member_ids, nudge.reason, now)
        for job in machine.take_jobs():
            self._call_assignor(job, now)
        deadline = machine.next_deadline()
        if deadline is not None and (self.timer_at is None or deadline < self.timer_at):
            self.timer_gen += 1
            self.timer_at = deadline
            self.sim.schedule(max(deadline, now), self._on_timer, self.incarnation, self.timer_gen)

    def _on_timer(self, incarnation: int, gen: int, now: int) -> bool:
        if incarnation != self.incarnation or gen != self.timer_gen or not self.serving:
            return False
        self.timer_at = None
        self.sim.trace("coordinator timers")
        self.execute(lambda core, t: core.poll(t), now, None)
        return True

    # -- service mode: the assignor service

    def _call_assignor(self, job: ServiceAssignment, now: int) -> None:
        fault = self.assignor_faults.pop(0) if self.assignor_faults else None
        latency = self.sim.rng.randint(1, 60)
        inc = self.incarnation
        self.sim.trace(f"assignor call for epoch {job.group_epoch}" + (f" (fault: {fault})" if fault else ""))
        if fault == "lost":
            return  # never answers: the core's own assignment deadline abandons it
        if fault == "slow":
            self.sim.schedule(now + ASSIGNOR_TIMEOUT_MS, self._assignor_failed, inc, job, "DEADLINE_EXCEEDED")
        elif fault == "fail":
            self.sim.schedule(now + latency, self._assignor_failed, inc, job, "UNAVAILABLE")
        elif fault == "error":
            response = assignor_pb2.AssignResponse(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message="injected")
            self.sim.schedule(now + latency, self._assignor_answered, inc, job, response)
        else:
            self.sim.schedule(now + latency, self._assignor_answered, inc, job, None)

    def _assignor_answered(
        self, incarnation: int, job: ServiceAssignment, response: assignor_pb2.AssignResponse | None, now: int
    ) -> bool:
        if incarnation != self.incarnation or not self.serving:
            return False
        resp = response if response is not None else services.assignor.assign(job.request)
        self.sim.trace(f"assignor answers epoch {job.group_epoch} (error {resp.error})")
        ticket = self.execute(
            lambda core, t: core.complete_service_assignment(job.group_id, job.group_epoch, resp, t), now, None
        )
        if ticket is not None and any(
            isinstance(r, RebalanceEvent) and r.event == EventType.ASSIGNMENT_INSTALLED for r in ticket.records
        ):
            self.sim.stats.assignments_installed += 1
        return True

    def _assignor_failed(self, incarnation: int, job: ServiceAssignment, why: str, now: int) -> bool:
        if incarnation != self.incarnation or not self.serving:
            return False
        self.sim.trace(f"assignor call for epoch {job.group_epoch} failed: {why}")
        self.execute(lambda core, t: core.fail_service_assignment(job.group_id, job.group_epoch, why, t), now, None)
        return True
