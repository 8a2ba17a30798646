"""A simulated worker: the real worker SDK `Member`, driven as `ConnectWorkerClient` drives it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.base import GROUP, RETRY_BACKOFF_MAX_MS, Violation

if TYPE_CHECKING:
    from simulator.engine import Simulation

import random
from dataclasses import dataclass
from typing import Any

import services.assignor
from connect.coordinator.v1 import assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from simulator.scenario import (
    MAX_START_MS,
    MAX_STOP_MS,
)
from worker_sdk._assign import RETRIABLE_CODES, RETRY_LATER_CODES, assign_request, install_request, run_assignor
from worker_sdk._member import (
    DEFAULT_ASSIGNORS,
    EAGER,
    AssignmentOutcome,
    AssignmentTask,
    ClientAssignor,
    Effect,
    Member,
    MemberConfig,
    MemberState,
    StateChanged,
)

# ---- a worker -----------------------------------------------------------------------------------


@dataclass
class _AssignFlow:
    """One client-side assignment: Prepare -> assign -> Install, as worker_sdk._assign does it."""

    task: AssignmentTask
    deadline_ms: int
    phase: str = "prepare"
    rpc: int = 0
    attempt: int = 0
    prepared: coordinator_pb2.ConnectGroupPrepareAssignmentResponse | None = None
    result: assignor_pb2.AssignResponse | None = None
    install: coordinator_pb2.ConnectGroupInstallAssignmentRequest | None = None


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
        self.flow: _AssignFlow | None = None
        self.wake_gen = 0
        self.wake_at: int | None = None
        self.slow_stop_ms: int | None = None
        self.slow_compute_ms: int | None = None
        self.reason = 0
        self.departed = False
        self.restart_after_exit = False  # stopped or crashed and (so far) not restarted
        self.rng = random.Random(f"{sim.scenario.seed}/worker/{index}")

    @property
    def member_id(self) -> str:
        return self.member.member_id if self.member is not None else ""

    def _assignors(self) -> tuple[ClientAssignor, ...]:
        base = (EAGER,) if self.spec.assignors == "eager" else DEFAULT_ASSIGNORS
        return tuple(
            ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.version, reason=self.reason) for a in base
        )

    # -- lifecycle

    def start(self, now: int) -> None:
        if self.up:
            if self.leaving:
                self.restart_after_exit = True  # still shutting down: start again once it has exited
            return
        self.restart_after_exit = False
        self.departed = False
        self.incarnation += 1
        self.up, self.leaving = True, False
        self.active, self.effect, self.flow = EMPTY, None, None
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
        )
        self.member = Member(
            config, rng=random.Random(f"{self.sim.scenario.seed}/member/{self.index}/{self.incarnation}")
        )
        self.sim.trace(f"{self.name} starts (incarnation {self.incarnation})")
        self.member.join(now)
        self.drive(now)

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
            self._flow_failure(seq, now)
        self.drive(now)

    # -- client-side assignment (worker_sdk._assign.compute_and_install, step by step)

    def _begin_assignment(self, task: AssignmentTask, now: int) -> None:
        self.sim.trace(f"{self.name} computes the assignment (member epoch {task.member_epoch})")
        self.flow = _AssignFlow(task, now + self.spec.rebalance_timeout_ms)
        self._send_flow(now)

    def _send_flow(self, now: int) -> None:
        flow = self.flow
        assert flow is not None and self.member is not None
        self.sim.rpc_ids += 1
        flow.rpc = self.sim.rpc_ids
        task = flow.task
        request: Any
        if flow.phase == "prepare":
            request = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
                group_id=task.group_id, member_id=task.member_id, member_epoch=task.member_epoch
            )
        else:
            request = flow.install
        self.sim.net.request(self, flow.phase, flow.rpc, request, now)
        timeout = self.member.request_timeout_ms()
        self.sim.schedule(now + timeout, self._flow_timeout, self.incarnation, flow.rpc)

    def _flow_timeout(self, incarnation: int, rpc: int, now: int) -> bool:
        if incarnation != self.incarnation or self.flow is None or self.flow.rpc != rpc or self.member is None:
            return False
        self._flow_failure(rpc, now)
        self.drive(now)
        return True

    def _flow_failure(self, rpc: int, now: int) -> None:
        flow = self.flow
        if flow is None or flow.rpc != rpc:
            return
        flow.rpc = 0
        flow.attempt += 1
        delay = min(100 * 2 ** min(flow.attempt - 1, 30), RETRY_BACKOFF_MAX_MS)
        delay = round(delay * self.rng.uniform(0.8, 1.2))
        if now + delay >= flow.deadline_ms:
            self._finish_flow(AssignmentOutcome.ABANDONED, now, "deadline passed")
            return
        self.sim.schedule(now + delay, self._flow_retry, self.incarnation, flow)

    def _flow_retry(self, incarnation: int, flow: _AssignFlow, now: int) -> bool:
        if incarnation != self.incarnation or self.flow is not flow or self.member is None:
            return False
        self._send_flow(now)
        return True

    def _flow_response(self, kind: str, rpc: int, response: Any, now: int) -> None:
        flow = self.flow
        if flow is None or flow.rpc != rpc or kind != flow.phase:
            return
        code = response.error_code
        if code in RETRIABLE_CODES:
            self._flow_failure(rpc, now)
            return
        if code != ErrorCode.NONE:
            outcome = AssignmentOutcome.RETRY if code in RETRY_LATER_CODES else AssignmentOutcome.ABANDONED
            self._finish_flow(outcome, now, f"{kind}: {ErrorCode.Name(code)}")
            return
        if kind == "prepare":
            flow.prepared = response
            flow.rpc = 0
            request = assign_request(flow.task.group_id, response)
            flow.result = run_assignor(services.assignor.assign, request)
            flow.install = install_request(flow.task, response.group_epoch, flow.result)
            if self.slow_compute_ms is not None:
                duration, self.slow_compute_ms = self.slow_compute_ms, None
            else:
                duration = self.rng.randint(0, 30)
            self.sim.trace(f"{self.name} assigned epoch {response.group_epoch} in {duration} ms")
            flow.phase = "install"
            self.sim.schedule(now + duration, self._flow_retry, self.incarnation, flow)
        else:
            assert flow.result is not None
            ok = flow.result.error == 0
            self.sim.stats.assignments_installed += 1 if ok else 0
            self._finish_flow(AssignmentOutcome.INSTALLED if ok else AssignmentOutcome.ABANDONED, now, "installed")

    def _finish_flow(self, outcome: AssignmentOutcome, now: int, why: str) -> None:
        flow = self.flow
        assert flow is not None and self.member is not None
        self.flow = None
        self.sim.trace(f"{self.name} assignment task {outcome} ({why})")
        self.member.assignment_task_done(flow.task.seq, outcome, now)
