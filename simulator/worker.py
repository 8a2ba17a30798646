"""A simulated worker: the real worker SDK `Member`, driven as `ConnectWorkerClient` drives it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.base import GROUP, RETRY_BACKOFF_MAX_MS, Violation

if TYPE_CHECKING:
    from simulator.engine import Simulation

import random
from typing import Any

import services.assignor
from connect.coordinator.v1 import assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from simulator.scenario import (
    MAX_START_MS,
    MAX_STOP_MS,
)
from worker_sdk import (
    DEFAULT_ASSIGNORS,
    EAGER,
    INCREMENTAL_COOPERATIVE,
    AssignmentFlow,
    AssignmentOutcome,
    AssignmentTask,
    ClientAssignor,
    Compute,
    Done,
    Effect,
    Member,
    MemberConfig,
    MemberState,
    SendInstall,
    SendPrepare,
    StateChanged,
    Wait,
    run_assignor,
)

# A load scenario's workers prefer the load-balanced assignor (SPEC §13: versions 1-2, cooperative).
LOAD_BALANCED = ClientAssignor("load-balanced", 1, 2, 2)

# ---- a worker -----------------------------------------------------------------------------------


class SimWorker:
    def __init__(self, sim: Simulation, index: int) -> None:
        self.sim = sim
        self.index = index
        self.spec = sim.scenario.workers[index]
        self.name = f"w{index}"
        self.up = False
        self.leaving = False
        self.member: Member | None = None
        self.incarnation = 0
        self.partitioned = False
        # The worker's own view: every item whose start began and whose stop is not complete.
        self.active: Items = EMPTY
        self.effect: Effect | None = None
        self.flow: AssignmentFlow | None = None
        self.flow_rpc = 0  # the id of the flow's request in flight (0: none)
        self.wake_gen = 0
        self.wake_at: int | None = None
        self.slow_stop_ms: int | None = None
        self.slow_compute_ms: int | None = None
        self.reason = 0
        self.departed = False
        self.restart_after_exit = False  # stopped or crashed and (so far) not restarted
        self.rng = random.Random(f"{sim.scenario.seed}/worker/{index}")
        self.coord = 0  # the coordinator replica its requests go to (simulation.refind follows the owner)
        self.classic_now = False  # its incarnation runs the classic protocol (ClassicMember)

    @property
    def member_id(self) -> str:
        return self.member.member_id if self.member is not None else ""

    def _assignors(self) -> tuple[ClientAssignor, ...]:
        base = (EAGER,) if self.spec.assignors == "eager" else DEFAULT_ASSIGNORS
        if self.spec.assignors == "load-balanced":
            base = (LOAD_BALANCED, INCREMENTAL_COOPERATIVE, EAGER)
        return tuple(
            ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.version, reason=self.reason) for a in base
        )

    # -- lifecycle

    def new_incarnation(self) -> bool:
        """A start: False if the process is up (still shutting down: it starts again once it has
        exited); else a new incarnation, running nothing yet."""
        if self.up:
            if self.leaving:
                self.restart_after_exit = True
            return False
        self.restart_after_exit = False
        self.departed = False
        self.incarnation += 1
        self.up, self.leaving = True, False
        self.active, self.effect, self.flow = EMPTY, None, None
        return True

    def start(self, now: int) -> None:
        if not self.new_incarnation():
            return
        config = MemberConfig(
            group_id=GROUP,
            assignors=self._assignors(),
            instance_id=f"instance-{self.index}" if self.spec.static else None,
            url=f"http://{self.name}:8083",
            client_id=self.name,
            rebalance_timeout_ms=self.spec.rebalance_timeout_ms,
            retry_backoff_ms=100,
            retry_backoff_max_ms=RETRY_BACKOFF_MAX_MS,
            default_heartbeat_interval_ms=self.sim.scenario.heartbeat_interval_ms,
            default_session_timeout_ms=self.sim.scenario.session_timeout_ms,
            session_safety_margin_ms=self.spec.safety_margin_ms,
            **self._load_config(),
        )
        self.member = Member(
            config, rng=random.Random(f"{self.sim.scenario.seed}/member/{self.index}/{self.incarnation}")
        )
        self.sim.trace(f"{self.name} starts (incarnation {self.incarnation})")
        self.member.join(now)
        self.drive(now)

    def _load_config(self) -> dict[str, Any]:
        """A load scenario's worker: its capacity, rack and report interval (SPEC §13)."""
        ld = self.sim.scenario.loads
        if ld is None:
            return {}
        return {
            "capacity": ld.capacities[self.index],
            "rack": ld.racks[self.index],
            "load_report_interval_ms": ld.report_interval_ms,
        }

    def set_loads(self, items: Items) -> None:
        """Its connectors and tasks tell it their loads now (as they start, and as loads change)."""
        m = self.member
        if m is None or self.sim.scenario.loads is None or not items:
            return
        m.loads.update({item: self.sim.load_of(item) for item in items.item_keys()})

    def crash(self, now: int) -> None:
        if not self.up:
            return
        self.sim.trace(f"{self.name} CRASH, was running {self.active}")
        self.up, self.leaving, self.member = False, False, None
        self.active, self.effect, self.flow = EMPTY, None, None
        self.wake_gen += 1
        self.wake_at = None
        self.departed = True
        self.sim.stats.worker_crashes += 1

    def stop(self, now: int, temporary: bool) -> None:
        if not self.up or self.leaving or self.member is None:
            return
        temporary = temporary and self.spec.static
        self.sim.trace(f"{self.name} shuts down ({'temporary leave -2' if temporary else 'leave -1'})")
        self.leaving = True
        self.member.leave(now, temporary=temporary)
        self.drive(now)

    def bump_reason(self, now: int) -> None:
        if self.member is None or self.leaving:
            return
        self.reason = (self.reason + 1) % 100
        self.sim.trace(f"{self.name} asks for a rebalance (assignor reason {self.reason})")
        self.member.set_assignors(now, self._assignors())
        self.drive(now)

    # -- the driver loop (as ConnectWorkerClient._step)

    def drive(self, now: int) -> None:
        m = self.member
        if m is None:
            return
        for _ in range(4):
            progressed = False
            effect = m.poll_effect(now)
            if effect is not None:
                self._begin_effect(effect, now)
                progressed = True
            out = m.poll_heartbeat(now)
            if out is not None:
                self.sim.net.request(self, "heartbeat", out.seq, out.request, now)
                progressed = True
            task = m.poll_assignment_task(now)
            if task is not None:
                self._begin_assignment(task, now)
                progressed = True
            if not progressed:
                break
        for event in m.drain_events():
            if isinstance(event, StateChanged):
                self.sim.trace(f"{self.name} {event.old} -> {event.new} ({event.reason})")
            elif event.failed and event.reason.endswith("session lost"):
                self.sim.stats.safety_stops += 1
        if m.state == MemberState.FATAL:
            raise Violation("worker-fatal", f"{self.name} failed for good: {m.fatal_error}")
        self.settle(now)

    def settle(self, now: int) -> None:
        """After driving the member: the process exits once it has left; else it sleeps until the
        member's next wake-up."""
        m = self.member
        assert m is not None
        if self.leaving and m.closed:
            self.sim.trace(f"{self.name} left and exits")
            self.up, self.leaving, self.member, self.flow = False, False, None, None
            self.wake_gen += 1
            self.wake_at = None
            self.departed = True
            if self.restart_after_exit or (self.sim.quiet and not any(w.up for w in self.sim.workers)):
                self.start(now)
            return
        wake = m.next_wakeup_ms()
        if wake is not None and (self.wake_at is None or wake < self.wake_at or self.wake_at < now):
            self.wake_gen += 1
            self.wake_at = max(wake, now)
            self.sim.schedule(self.wake_at, self._wake, self.incarnation, self.wake_gen)

    def _wake(self, incarnation: int, gen: int, now: int) -> bool:
        if incarnation != self.incarnation or gen != self.wake_gen or self.member is None:
            return False
        self.wake_at = None
        self.drive(now)
        return True

    # -- effects: the worker's running set

    def _begin_effect(self, effect: Effect, now: int) -> None:
        self.active = self.active | effect.assigned
        self.set_loads(effect.assigned)
        stopping = effect.lost | effect.revoked
        if stopping:
            if self.slow_stop_ms is not None:
                duration, self.slow_stop_ms = self.slow_stop_ms, None
                self.sim.trace(f"{self.name} stops slowly ({duration} ms)")
            else:
                duration = self.rng.randint(0, MAX_STOP_MS)
        else:
            duration = self.rng.randint(0, MAX_START_MS)
        parts = [
            f"{k} {v}" for k, v in (("lose", effect.lost), ("stop", effect.revoked), ("start", effect.assigned)) if v
        ]
        self.sim.trace(f"{self.name} {', '.join(parts)} ({effect.reason}, {duration} ms)")
        self.effect = effect
        self.sim.stats.effects += 1
        self.sim.schedule(now + duration, self._end_effect, self.incarnation, effect.seq)

    def _end_effect(self, incarnation: int, seq: int, now: int) -> bool:
        effect = self.effect
        if incarnation != self.incarnation or effect is None or effect.seq != seq or self.member is None:
            return False
        self.active = self.active - effect.lost - effect.revoked
        self.effect = None
        self.sim.trace(f"{self.name} effect {seq} done, running {self.active}")
        self.member.effect_done(seq, now)
        self.drive(now)
        return True

    # -- responses from the coordinator

    def on_response(self, kind: str, seq: int, response: Any, now: int) -> None:
        m = self.member
        assert m is not None
        if kind == "heartbeat":
            before = m.state
            if response.error_code == ErrorCode.INVALID_REQUEST and "item_loads" in response.error_message:
                self.sim.load_report_refused(self, response.error_message, now)
            m.on_heartbeat_response(seq, response, now)
            if (
                response.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)
                and before != m.state
            ):
                self.sim.stats.fenced += 1
        else:
            self._flow_response(kind, seq, response, now)
        self.drive(now)

    def on_failure(self, kind: str, seq: int, now: int, why: str) -> None:
        m = self.member
        assert m is not None
        if kind == "heartbeat":
            m.on_heartbeat_failure(seq, now, why)
        else:
            self._flow_failure(seq, now, why)
        self.drive(now)

    # -- client-side assignment: the SDK's AssignmentFlow, driven over the simulated network

    def _begin_assignment(self, task: AssignmentTask, now: int) -> None:
        assert self.member is not None
        self.sim.trace(f"{self.name} computes the assignment (member epoch {task.member_epoch})")
        self.flow = AssignmentFlow(
            task,
            deadline_ms=now + self.spec.rebalance_timeout_ms,
            rpc_timeout_ms=self.member.request_timeout_ms(),
            rng=self.rng,
        )
        self._step_flow(now)

    def _step_flow(self, now: int) -> None:
        """Do what the flow asks next (as compute_and_install does, with events instead of awaits)."""
        flow = self.flow
        assert flow is not None and self.member is not None
        action = flow.next_action(now)
        if isinstance(action, SendPrepare | SendInstall):
            self.sim.rpc_ids += 1
            self.flow_rpc = self.sim.rpc_ids
            kind = "prepare" if isinstance(action, SendPrepare) else "install"
            self.sim.net.request(self, kind, self.flow_rpc, action.request, now)
            self.sim.schedule(now + int(action.timeout_ms), self._flow_timeout, self.incarnation, self.flow_rpc)
        elif isinstance(action, Compute):
            if action.group_epoch % 2:
                # Every other assignment lists every member, as an assignor that does not leave
                # out the unchanged ones answers (decided by the epoch, not the rng: seeds keep their runs).
                action.request.accept_unchanged_omitted = False
            result = run_assignor(services.assignor.assign, action.request)
            self.sim.assigned(action.group_epoch, action.request)
            if self.slow_compute_ms is not None:
                duration, self.slow_compute_ms = self.slow_compute_ms, None
            else:
                duration = self.rng.randint(0, 30)
            self.sim.trace(f"{self.name} assigned epoch {action.group_epoch} in {duration} ms")
            self.sim.schedule(now + duration, self._flow_event, self.incarnation, flow, result)
        elif isinstance(action, Wait):
            self.sim.schedule(int(action.until_ms), self._flow_event, self.incarnation, flow, None)
        elif isinstance(action, Done):
            self.flow, self.flow_rpc = None, 0
            if action.outcome == AssignmentOutcome.INSTALLED:
                self.sim.stats.assignments_installed += 1
            self.sim.trace(f"{self.name} assignment task {action.outcome} ({action.why})")
            self.member.assignment_task_done(flow.task.seq, action.outcome, now)

    def _flow_event(
        self, incarnation: int, flow: AssignmentFlow, result: assignor_pb2.AssignResponse | None, now: int
    ) -> bool:
        """A backoff ended (result None) or the computation finished."""
        if incarnation != self.incarnation or self.flow is not flow or self.member is None:
            return False
        if result is not None:
            flow.on_computed(result, now)
        self._step_flow(now)
        if self.flow is None:
            self.drive(now)  # the deadline passed: the task is done and the member may have more to do
        return True

    def _flow_timeout(self, incarnation: int, rpc: int, now: int) -> bool:
        if incarnation != self.incarnation or self.flow is None or self.flow_rpc != rpc or self.member is None:
            return False
        self._flow_failure(rpc, now, "timeout")
        self.drive(now)
        return True

    def _flow_failure(self, rpc: int, now: int, why: str) -> None:
        flow = self.flow
        if flow is None or rpc != self.flow_rpc:
            return
        self.flow_rpc = 0
        flow.on_transport_error(now, why)
        self._step_flow(now)

    def _flow_response(self, kind: str, rpc: int, response: Any, now: int) -> None:
        flow = self.flow
        if flow is None or rpc != self.flow_rpc:
            return
        if kind == "prepare":
            accepted = flow.on_prepare_response(response, now)
        else:
            accepted = flow.on_install_response(response, now)
        if accepted:
            self.flow_rpc = 0
            self._step_flow(now)
