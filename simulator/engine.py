"""The discrete-event simulation: real coordinator core, real worker SDK, real assignors, virtual time.

One run = one `Scenario`. A heap of timed events drives everything; popping one event and handling
it is one *step*, and the invariants are checked after every step:

* the coordinator node (`CoordinatorNode`) runs `services.coordinator.core.GroupCoordinator` the way
  `services/coordinator/runtime.py` does: handle -> `Storage.write` (a real SQLite file) -> respond,
  with crash points between any two; recovery is a fresh core + `load(Storage.load(), now)`; in
  service mode it calls `services.assignor.assign` for the assignments the core asks for;
* every worker (`SimWorker`) is a `worker_sdk.Member` driven exactly like `ConnectWorkerClient`
  drives it (poll effect / heartbeat / assignment task, report outcomes, sleep until
  `next_wakeup_ms`), over a simulated transport; its *running set* is modelled from the effects the
  member emits (an item runs from the moment its start begins until its stop is complete);
  client-side assignments go Prepare -> `services.assignor.assign` -> Install through the same
  transport, with the same helpers (`worker_sdk._assign`) and retry rules as the real client;
* the network loses, duplicates and delays (reorders) requests and responses, partitions workers,
  and refuses connections while the coordinator is down.

Nothing of the protocol is re-implemented here: the simulator only moves messages, keeps time,
injects faults and checks invariants.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import services.assignor
from connect.coordinator.v1 import admin_pb2, assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, all_items
from services.coordinator.config import ServerConfig
from services.coordinator.core import GroupCoordinator, Result, ServiceAssignment
from services.coordinator.records import MemberMetadata, RebalanceEvent, Record
from services.coordinator.records import MemberState as CoordMemberState
from services.coordinator.state import STABLE, CoordinatorState, Group, InvariantViolation
from services.storage import Storage
from simulator import adversarial
from simulator.scenario import (
    ALTER_CONFIG,
    ASSIGNOR_FAULT,
    BAD_REQUEST,
    COORD_CRASH,
    COORD_START,
    DELETE_CONNECTOR,
    HEAL,
    MAX_HEARTBEAT_MS,
    MAX_SCHEDULED_DELAY_MS,
    MAX_SESSION_MS,
    MAX_START_MS,
    MAX_STOP_MS,
    MIN_HEARTBEAT_MS,
    MIN_SESSION_MS,
    PARTITION,
    PUT_CONNECTOR,
    REASON,
    SLOW_COMPUTE,
    SLOW_REVOKE,
    WORKER_CRASH,
    WORKER_START,
    WORKER_STOP,
    Event,
    Scenario,
)
from simulator.storage import fresh_storage
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

GROUP = "g"
ASSIGNOR_TIMEOUT_MS = 2_000
RETRY_BACKOFF_MAX_MS = 1_000
LOAD_MS = 100  # the longest a restarted coordinator answers COORDINATOR_LOAD_IN_PROGRESS
CRASH_PHASES = ("now", "after_handle", "after_write")
# Once converged, the group must stay converged this many heartbeat intervals.
HOLD_INTERVALS = 3
# Guard against a run that never ends (a livelock in virtual time).
MAX_STEPS_PER_RUN = 200_000
# ... and against one that never lets virtual time advance (something asks to be woken "now" forever).
MAX_STEPS_AT_ONE_TIME = 5_000


def server_config(s: Scenario) -> ServerConfig:
    """The coordinator's bounds for simulation: Kafka's shapes, seconds instead of minutes."""
    return ServerConfig(
        session_timeout_ms=s.session_timeout_ms,
        min_session_timeout_ms=MIN_SESSION_MS,
        max_session_timeout_ms=MAX_SESSION_MS,
        heartbeat_interval_ms=s.heartbeat_interval_ms,
        min_heartbeat_interval_ms=MIN_HEARTBEAT_MS,
        max_heartbeat_interval_ms=MAX_HEARTBEAT_MS,
        scheduled_rebalance_max_delay_ms=s.scheduled_delay_ms,
        empty_retention_ms=10**12,
        assignment_retry_backoff_ms=200,
        assignment_retry_backoff_max_ms=RETRY_BACKOFF_MAX_MS,
        assignor_timeout_ms=ASSIGNOR_TIMEOUT_MS,
    )


def convergence_bound_ms(s: Scenario) -> int:
    """How long after the faults stop the group must be Stable with every item running once:
    a session (members that will never heartbeat again expire; restarted static members wait for
    their old incarnation's session), the longest message delay (messages still in flight), the
    delayed-rebalance window (the incremental cooperative assignor keeps lost work back for that
    long), one assignment (an executor's rebalance timeout or the assignor service's deadline,
    plus the retry backoff) and ten heartbeat intervals (revoke, acknowledge, assign, start)."""
    max_delay = s.net.max_delay_ms if s.net.delay > 0 else 10
    longest_rt = max((w.rebalance_timeout_ms for w in s.workers), default=0)
    assignment = max(longest_rt + 1_000, ASSIGNOR_TIMEOUT_MS) + RETRY_BACKOFF_MAX_MS
    return MAX_SESSION_MS + max_delay + MAX_SCHEDULED_DELAY_MS + assignment + LOAD_MS + 10 * MAX_HEARTBEAT_MS


class Violation(Exception):
    """An invariant does not hold. `invariant` names which (see docs/simulation.md)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant
        self.message = message


@dataclass
class Stats:
    messages: int = 0
    lost: int = 0
    duplicated: int = 0
    delayed: int = 0
    refused: int = 0
    partition_drops: int = 0
    worker_crashes: int = 0
    coordinator_crashes: int = 0
    recoveries: int = 0
    fenced: int = 0  # workers that learned they were fenced
    coordinator_fenced: int = 0  # members the coordinator fenced (epoch mismatch or rebalance timeout)
    rebalance_timeouts: int = 0  # ... of which for not revoking within the rebalance timeout
    held: int = 0  # fenced with work held until their session would have expired
    expired: int = 0  # members whose session expired
    revocations: int = 0
    safety_stops: int = 0
    bad_requests: int = 0
    assignments_installed: int = 0
    effects: int = 0
    converged_ms: int | None = None
    # Bad requests answered as expected, by kind (simulator.adversarial.KINDS).
    bad_checked: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    scenario: Scenario
    steps: int
    virtual_ms: int
    violation: Violation | None
    trace_hash: str
    trace: list[str]
    stats: Stats = field(default_factory=Stats)

    @property
    def ok(self) -> bool:
        return self.violation is None


def durable_view(state: CoordinatorState) -> dict[str, Any]:
    """The durable state of every group -- what the stored records describe (volatile state excluded)."""
    out: dict[str, Any] = {}
    for gid, g in sorted(state.groups.items()):
        out[gid] = (
            g.meta,
            {mid: (m.meta, m.current) for mid, m in sorted(g.members.items())},
            dict(sorted(g.connectors.items())),
            dict(sorted(g.configs.items())),
            dict(sorted(g.target_members.items())),
            g.target,
            dict(sorted(g.held.items())),
        )
    return out


# ---- the coordinator node ------------------------------------------------------------------------


class CoordinatorNode:
    """The coordinator process: the real core, its SQLite file, and the runtime's order of things."""

    # Planted bug switch (simulator.planted): answer before the records are stored.
    respond_before_write = False

    def __init__(self, sim: Simulation, storage: Storage) -> None:
        self.sim = sim
        self.storage = storage
        # The committed state: every record Storage.write accepted, replayed in order.
        self.shadow = CoordinatorState()
        self.committed_members: set[str] = set()  # every member id ever stored
        self.core: GroupCoordinator | None = None
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
        # A restarted process: a new core, loaded from the SQLite file.
        core = GroupCoordinator(self.sim.config, self.service_assignors, new_member_id=self.sim.new_member_id)
        records = self.storage.load()
        try:
            result = core.load(records, now)
        except Exception as e:
            raise Violation("d-recovery", f"load() failed: {e!r}\n{traceback.format_exc()}") from None
        self.core = core
        self._commit(result.records)
        self.loaded = True
        recovered, committed = durable_view(core.state), durable_view(self.shadow)
        if recovered != committed:
            raise Violation(
                "d-recovery",
                "the state recovered from storage differs from the committed state:\n" + _diff(committed, recovered),
            )
        self.sim.stats.recoveries += 1
        self.sim.trace(f"coordinator loaded {len(records)} records; recovered state == committed state")
        self._after(now)
        return True

    def crash(self, now: int, why: str) -> None:
        if not self.up:
            return
        self.up = self.loaded = False
        self.core = None
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

    # -- the request path: handle -> store -> respond

    def _commit(self, records: list[Record]) -> None:
        if not records:
            return
        self.storage.write(records)
        stats = self.sim.stats
        for r in records:
            self.shadow.replay(r)
            if isinstance(r, MemberMetadata) and r.value is not None:
                self.committed_members.add(r.member_id)
            elif isinstance(r, RebalanceEvent):
                if r.event == "member_fenced":
                    stats.coordinator_fenced += 1
                    if r.details.get("cause") == "rebalance_timeout":
                        stats.rebalance_timeouts += 1
                    if r.details.get("held"):
                        stats.held += 1
                elif r.event == "member_expired":
                    stats.expired += 1
                elif r.event == "revocation_requested":
                    stats.revocations += 1

    def execute(
        self, handler: Callable[[GroupCoordinator, int], Result], now: int, reply: Callable[[Any], None] | None
    ) -> Result | None:
        """Run one handler as the runtime does. Returns None if the coordinator crashed on the way."""
        core = self.core
        assert core is not None
        is_request = reply is not None
        if self.crash_phase == "now":
            self.crash(now, "before handling")
            return None
        try:
            result = handler(core, now)
        except InvariantViolation as e:
            raise Violation("a-coordinator", f"the core's replay refused a record: {e}") from None
        except Violation:
            raise
        except Exception as e:
            raise Violation("core-error", f"handler raised {e!r}\n{traceback.format_exc()}") from None
        if reply is not None and self.respond_before_write:
            reply(result.response)
            reply = None
        # An armed crash point fires on the first handler that changes state (elsewhere it is the
        # same as crashing between two requests).
        writes = (
            self.crash_phase is not None
            and (is_request or not self.crash_on_requests_only)
            and any(not isinstance(r, RebalanceEvent) for r in result.records)
        )
        if writes and self.crash_phase == "after_handle":
            self.crash(now, f"after handling, {len(result.records)} records not stored")
            return None
        self._commit(result.records)
        if writes and self.crash_phase == "after_write":
            self.crash(now, f"after storing {len(result.records)} records, before responding")
            return None
        if reply is not None:
            reply(result.response)
        self._after(now)
        return result

    def _after(self, now: int) -> None:
        core = self.core
        assert core is not None
        if core.has_service_assignments():
            for job in core.take_service_assignments():
                self._call_assignor(job, now)
        deadline = core.next_deadline()
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
        result = self.execute(
            lambda core, t: core.complete_service_assignment(job.group_id, job.group_epoch, resp, t), now, None
        )
        if result is not None and any(
            isinstance(r, RebalanceEvent) and r.event == "assignment_installed" for r in result.records
        ):
            self.sim.stats.assignments_installed += 1
        return True

    def _assignor_failed(self, incarnation: int, job: ServiceAssignment, why: str, now: int) -> bool:
        if incarnation != self.incarnation or not self.serving:
            return False
        self.sim.trace(f"assignor call for epoch {job.group_epoch} failed: {why}")
        self.execute(lambda core, t: core.fail_service_assignment(job.group_id, job.group_epoch, why, t), now, None)
        return True


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    lines = []
    for gid in sorted(set(a) | set(b)):
        if a.get(gid) != b.get(gid):
            ga, gb = a.get(gid), b.get(gid)
            if ga is None or gb is None:
                lines.append(f"  group {gid}: {ga!r} != {gb!r}")
                continue
            for i, name in enumerate(("meta", "members", "connectors", "configs", "target_members", "target", "held")):
                if ga[i] != gb[i]:
                    lines.append(f"  group {gid} {name}:\n    committed {ga[i]!r}\n    recovered {gb[i]!r}")
    return "\n".join(lines)


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


# ---- the network ----------------------------------------------------------------------------------


class Network:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.spec = sim.scenario.net
        self.rng = random.Random(f"{sim.scenario.seed}/network")
        # When the last message sent while faults were on arrives (stale messages can disturb the group until then).
        self.last_chaos_delivery = 0
        # Per (worker, incarnation) connection: when its last request arrives (FIFO delivery).
        self._connection_clock: dict[tuple[int, int], int] = {}

    def _chaos(self, now: int) -> bool:
        return now < self.sim.scenario.fault_window_ms

    def _delays(self, now: int, loss: float, what: str, may_duplicate: bool = True) -> list[int]:
        """Delivery delays of one message: [] if it is lost, two if it is duplicated."""
        stats = self.sim.stats
        stats.messages += 1
        rng = self.rng
        if not self._chaos(now):
            return [rng.randint(1, 10)]
        if rng.random() < loss:
            stats.lost += 1
            self.sim.trace(f"{what}: LOST")
            return []
        copies = 1
        if rng.random() < self.spec.duplicate and may_duplicate:
            stats.duplicated += 1
            copies = 2
        out = []
        for _ in range(copies):
            delay = rng.randint(1, 10)
            if rng.random() < self.spec.delay:
                stats.delayed += 1
                delay += rng.randint(0, self.spec.max_delay_ms)
            out.append(delay)
            self.last_chaos_delivery = max(self.last_chaos_delivery, now + delay)
        return out

    def request(self, w: SimWorker, kind: str, seq: int, body: Any, now: int) -> None:
        if w.partitioned:
            self.sim.stats.partition_drops += 1
            self.sim.trace(f"{w.name} -> C {kind}: dropped (partitioned)")
            return
        key = (w.index, w.incarnation)
        # A join under a server-generated id is not idempotent: a duplicate creates a second member
        # (see NetSpec.duplicate_joins).
        join = kind == "heartbeat" and not body.member_id
        may_duplicate = self.spec.duplicate_joins or not join
        for delay in self._delays(now, self.spec.loss_request, f"{w.name} -> C {kind}", may_duplicate):
            at = now + delay
            if not self.spec.unordered_requests:
                # One connection per worker process (gRPC over HTTP/2, over TCP): its requests arrive in
                # the order they were sent; a delayed one holds back those behind it (a duplicate
                # arrives right after its original).
                at = max(at, self._connection_clock.get(key, 0))
                self._connection_clock[key] = at
            self.sim.schedule(at, self._at_coordinator, w, w.incarnation, kind, seq, body)

    def _at_coordinator(self, w: SimWorker, incarnation: int, kind: str, seq: int, body: Any, now: int) -> bool:
        sim = self.sim
        node = sim.node
        desc = _describe_request(kind, body)
        if w.partitioned:
            sim.stats.partition_drops += 1
            sim.trace(f"{w.name} -> C {desc}: dropped (partitioned)")
            return True
        if not node.up:
            if self.rng.random() < self.spec.refuse:
                sim.stats.refused += 1
                sim.trace(f"{w.name} -> C {desc}: connection refused")
                sim.schedule(now + 1, self._refused, w, incarnation, kind, seq)
            else:
                sim.trace(f"{w.name} -> C {desc}: coordinator down, no answer")
            return True
        if not node.loaded:
            sim.trace(f"{w.name} -> C {desc}: loading")
            self.respond(w, incarnation, kind, seq, _load_in_progress(kind), now)
            return True
        sim.trace(f"{w.name} -> C {desc}")
        method = {"heartbeat": "heartbeat", "prepare": "prepare_assignment", "install": "install_assignment"}[kind]
        node.execute(
            lambda core, t: getattr(core, method)(body, t),
            now,
            lambda response: self.respond(w, incarnation, kind, seq, response, now),
        )
        return True

    def _refused(self, w: SimWorker, incarnation: int, kind: str, seq: int, now: int) -> bool:
        if not w.up or w.incarnation != incarnation or w.member is None:
            return False
        w.on_failure(kind, seq, now, "connection refused")
        return True

    def respond(self, w: SimWorker, incarnation: int, kind: str, seq: int, response: Any, now: int) -> None:
        for delay in self._delays(now, self.spec.loss_response, f"C -> {w.name} {kind} response"):
            self.sim.schedule(now + delay, self._at_worker, w, incarnation, kind, seq, response)

    def _at_worker(self, w: SimWorker, incarnation: int, kind: str, seq: int, response: Any, now: int) -> bool:
        if not w.up or w.incarnation != incarnation or w.member is None:
            return False
        if w.partitioned:
            self.sim.stats.partition_drops += 1
            self.sim.trace(f"C -> {w.name} {kind} response: dropped (partitioned)")
            return True
        self.sim.trace(f"C -> {w.name} {_describe_response(kind, response)}")
        w.on_response(kind, seq, response, now)
        return True


def _load_in_progress(kind: str) -> Any:
    code, msg = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loading"
    if kind == "heartbeat":
        return coordinator_pb2.ConnectGroupHeartbeatResponse(error_code=code, error_message=msg)
    if kind == "prepare":
        return coordinator_pb2.ConnectGroupPrepareAssignmentResponse(error_code=code, error_message=msg)
    return coordinator_pb2.ConnectGroupInstallAssignmentResponse(error_code=code, error_message=msg)


def _items(msg: Any) -> str:
    return str(Items.from_proto(msg))


def _describe_request(kind: str, body: Any) -> str:
    if kind == "heartbeat":
        owned = f" owned {_items(body.owned)}" if body.HasField("owned") else ""
        return f"heartbeat {body.member_id or '(new)'}@{body.member_epoch}{owned}"
    if kind == "prepare":
        return f"prepare {body.member_id}@{body.member_epoch}"
    return f"install {body.member_id}@{body.member_epoch} for group epoch {body.group_epoch}"


def _describe_response(kind: str, r: Any) -> str:
    code = ErrorCode.Name(r.error_code) if r.error_code in ErrorCode.values() else str(r.error_code)
    if kind == "heartbeat":
        a = (
            f" assigned {_items(r.assignment.assigned)} pending {_items(r.assignment.pending)}"
            if r.HasField("assignment")
            else ""
        )
        return f"heartbeat response {code} {r.member_id}@{r.member_epoch}{a}"
    return f"{kind} response {code}"


# ---- the simulation -------------------------------------------------------------------------------


class Simulation:
    def __init__(self, scenario: Scenario, *, keep_trace: bool = True) -> None:
        self.scenario = scenario
        self.config = server_config(scenario)
        self.rng = random.Random(f"{scenario.seed}/coordinator")
        self.now = 0
        self.steps = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Callable[..., bool], tuple[Any, ...]]] = []
        self._trace: list[str] = []
        self._keep_trace = keep_trace
        self._hash = hashlib.sha256()
        self.stats = Stats()
        self.rpc_ids = 0
        self._member_ids = 0
        self.quiet = False
        self.bound_ms = convergence_bound_ms(scenario)
        self.converged_since: int | None = None
        self.done = False
        self.node = CoordinatorNode(self, fresh_storage())
        self.net = Network(self)
        self.workers = [SimWorker(self, i) for i in range(len(scenario.workers))]

    # -- plumbing

    def new_member_id(self) -> str:
        self._member_ids += 1
        return f"m{self._member_ids}"

    def schedule(self, at: int, fn: Callable[..., bool], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, fn, args))

    def trace(self, text: str) -> None:
        line = f"{self.now:>7} {text}"
        self._hash.update(line.encode())
        if self._keep_trace:
            self._trace.append(line)

    # -- running

    def run(self, max_steps: int | None = None) -> RunResult:
        s = self.scenario
        for event in s.events:
            self.schedule(event.at_ms, self._scheduled, event)
        self.schedule(s.fault_window_ms, self._faults_stop)
        violation: Violation | None = None
        limit = max_steps if max_steps is not None else MAX_STEPS_PER_RUN
        same_time = 0
        try:
            self.node.start(0, instant=True)
            while self._heap and not self.done:
                at, _, fn, args = heapq.heappop(self._heap)
                if at == self.now:
                    same_time += 1
                    if same_time > MAX_STEPS_AT_ONE_TIME:
                        raise Violation("livelock", f"more than {MAX_STEPS_AT_ONE_TIME} events at virtual time {at}")
                else:
                    same_time = 0
                self.now = at
                if not fn(*args, at):
                    continue
                self.steps += 1
                self.check()
                if self.steps >= limit:
                    if max_steps is None:
                        raise Violation("runaway", f"more than {MAX_STEPS_PER_RUN} steps")
                    break
            if not self.done and max_steps is None:
                raise Violation("c-convergence", "the simulation ran out of events before converging")
            if self.done:
                self.check_storage()
        except Violation as v:
            violation = v
            self.trace(f"VIOLATION {v}")
        return RunResult(
            scenario=s,
            steps=self.steps,
            virtual_ms=self.now,
            violation=violation,
            trace_hash=self._hash.hexdigest(),
            trace=self._trace,
            stats=self.stats,
        )

    # -- scheduled events and faults

    def _scheduled(self, e: Event, now: int) -> bool:
        if self.quiet:
            return False  # the faults have stopped (restarts due then happen at once, see _faults_stop)
        self.trace(f"EVENT {e}")
        kind = e.kind
        w = self.workers[e.w] if e.w >= 0 else None
        if kind == WORKER_START:
            assert w is not None
            w.start(now)
        elif kind == WORKER_CRASH:
            assert w is not None
            w.crash(now)
        elif kind == WORKER_STOP:
            assert w is not None
            w.stop(now, bool(e.args[0]))
        elif kind == PARTITION:
            assert w is not None
            w.partitioned = True
        elif kind == HEAL:
            assert w is not None
            w.partitioned = False
        elif kind == COORD_CRASH:
            phase, downtime, target = str(e.args[0]), int(e.args[1]), str(e.args[2])
            self.node.downtime_ms = downtime
            self.node.crash_on_requests_only = target == "request"
            if phase == "now":
                self.node.crash(now, "killed")
            elif self.node.up:
                self.node.crash_phase = phase
        elif kind == COORD_START:
            self.node.start(now)
        elif kind == SLOW_REVOKE:
            assert w is not None
            w.slow_stop_ms = int(e.args[0])
        elif kind == SLOW_COMPUTE:
            assert w is not None
            w.slow_compute_ms = int(e.args[0])
        elif kind == REASON:
            assert w is not None
            w.bump_reason(now)
        elif kind == ASSIGNOR_FAULT:
            self.node.assignor_faults.append(str(e.args[0]))
        elif kind in (PUT_CONNECTOR, DELETE_CONNECTOR, ALTER_CONFIG):
            self._admin(e, now)
        elif kind == BAD_REQUEST:
            self._bad_request(str(e.args[0]), int(e.args[1]), now)
        return True

    def _admin(self, e: Event, now: int) -> None:
        if not self.node.serving:
            self.trace("  (coordinator unavailable: the operator's request fails)")
            return
        request: Any
        if e.kind == PUT_CONNECTOR:
            request = admin_pb2.PutConnectorRequest(group_id=GROUP, connector=str(e.args[0]), task_count=int(e.args[1]))
            method = "put_connector"
        elif e.kind == DELETE_CONNECTOR:
            request = admin_pb2.DeleteConnectorRequest(group_id=GROUP, connector=str(e.args[0]))
            method = "delete_connector"
        else:
            request = admin_pb2.AlterConfigsRequest(group_id=GROUP)
            name, value = e.args
            if value is None:
                request.delete.append(str(name))
            else:
                request.set.add(name=str(name), value=str(value))
            method = "alter_configs"
        responses: list[Any] = []
        self.node.execute(lambda core, t: getattr(core, method)(request, t), now, responses.append)
        if responses:
            code = responses[0].error_code
            self.trace(f"  -> {ErrorCode.Name(code)} {responses[0].error_message}")

    def _bad_request(self, kind: str, subseed: int, now: int) -> None:
        node = self.node
        if not node.serving:
            return
        assert node.core is not None
        bad = adversarial.make(kind, subseed, adversarial.View.of(node.core.state, self.scenario.service))
        self.stats.bad_requests += 1
        self.trace(f"  bad request: {bad.what} (expect {ErrorCode.Name(bad.expected)})")
        before = durable_view(node.core.state)
        responses: list[Any] = []
        result = node.execute(lambda core, t: getattr(core, bad.method)(bad.request, t), now, responses.append)
        if result is None or not responses:
            return  # the coordinator crashed on the way (a crash point was armed)
        code = adversarial.error_code(responses[0])
        if not bad.accepts(code):
            name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
            raise Violation(
                "bad-input",
                f"{bad.what}: expected {ErrorCode.Name(bad.expected)}, got {name} "
                f"({getattr(responses[0], 'error_message', '')})",
            )
        if not bad.may_change_state:
            written = [r for r in result.records if not isinstance(r, RebalanceEvent)]
            if written:
                raise Violation("bad-input", f"{bad.what}: rejected, yet wrote {written!r}")
            assert node.core is not None
            if durable_view(node.core.state) != before:
                raise Violation("bad-input", f"{bad.what}: rejected, yet the state changed")
        self.stats.bad_checked[kind] = self.stats.bad_checked.get(kind, 0) + 1

    def _faults_stop(self, now: int) -> bool:
        """The end of the fault window: partitions heal, the coordinator comes back, crashed workers
        restart (those that left for good stay gone unless none would be left), slow stops end."""
        self.quiet = True
        self.trace(f"FAULTS STOP; convergence due within {self.bound_ms} ms")
        self.node.crash_phase = None
        self.node.assignor_faults.clear()
        self.node.start(now)
        for w in self.workers:
            w.partitioned = False
            w.slow_stop_ms = w.slow_compute_ms = None
        for w in self.workers:
            if w.departed and self._restarts_later(w):
                w.start(now)
            elif w.leaving:
                w.restart_after_exit = self._restarts_later(w)
        if not any(w.up for w in self.workers):
            self.workers[0].start(now)
        self.schedule(now + self.bound_ms, self._deadline)
        return True

    def _restarts_later(self, w: SimWorker) -> bool:
        """A worker that is down when the faults stop restarts then, unless the last thing scheduled
        for it was a graceful shutdown (it left for good)."""
        last = [
            e for e in self.scenario.events if e.w == w.index and e.kind in (WORKER_CRASH, WORKER_STOP, WORKER_START)
        ]
        return bool(last) and last[-1].kind != WORKER_STOP

    def _deadline(self, now: int) -> bool:
        if self.done:
            return False
        raise Violation(
            "c-convergence",
            f"not converged {self.bound_ms} ms after the faults stopped: {self.convergence_problem()}",
        )

    # -- invariants

    def check(self) -> None:
        """(a) and (b) after every step; (c) once the faults stopped."""
        running: dict[Any, SimWorker] = {}
        for w in self.workers:
            for key in w.active.item_keys():
                other = running.get(key)
                if other is not None:
                    raise Violation("a-workers", f"{key} runs on both {other.name} and {w.name}")
                running[key] = w
        node = self.node
        if node.serving:
            assert node.core is not None
            group = node.core.state.groups.get(GROUP)
            if group is not None:
                self._check_coordinator(group, running)
        if self.quiet:
            self._check_convergence()

    def _check_coordinator(self, group: Group, running: dict[Any, SimWorker]) -> None:
        owner: dict[Any, str] = {}
        for mid, m in group.members.items():
            for key in m.owned.item_keys():
                if key in owner:
                    raise Violation("a-coordinator", f"{key} is in the assignments of both {owner[key]} and {mid}")
                owner[key] = mid
            if not m.member_epoch <= group.assignment_epoch <= group.epoch:
                raise Violation(
                    "b-epochs",
                    f"{mid}: member epoch {m.member_epoch}, assignment epoch {group.assignment_epoch}, "
                    f"group epoch {group.epoch}",
                )
        if not group.assignment_epoch <= group.epoch:
            raise Violation("b-epochs", f"assignment epoch {group.assignment_epoch} > group epoch {group.epoch}")
        for mid, items in group.held.items():
            for key in items.item_keys():
                if owner.get(key, mid) != mid:
                    raise Violation("a-coordinator", f"{key} is held for fenced {mid} and assigned to {owner[key]}")
        # Cross-view: a worker runs only what the coordinator has given to (or holds for) its member
        # id. A partitioned worker keeps running while the coordinator still counts it as a member;
        # it must stop before its session would expire -- else this fails when the coordinator drops
        # it (and hands its work to someone else).
        for key, w in running.items():
            mid = w.member_id
            holder = owner.get(key) or group.held_owner.get(key)
            if holder != mid:
                raise Violation(
                    "a-cross",
                    f"{w.name} (member {mid or '-'}) runs {key}, which the coordinator "
                    + (f"gave to {holder}" if holder else "does not count as anyone's"),
                )
        # A worker never knows an epoch the coordinator has not stored: not beyond the assignment
        # epoch, nor beyond its own member's epoch (while the coordinator still has that member).
        for w in self.workers:
            wm = w.member
            if wm is None or not wm.is_member:
                continue
            if wm.member_id not in self.node.committed_members:
                raise Violation(
                    "d-durability", f"{w.name} was told it is member {wm.member_id}, which was never stored"
                )
            cm = group.members.get(wm.member_id)
            if wm.member_epoch > group.assignment_epoch or (
                cm is not None
                and cm.member_epoch >= 0
                and wm.state != MemberState.LEAVING
                and wm.member_epoch > cm.member_epoch
            ):
                raise Violation(
                    "d-durability",
                    f"{w.name} ({wm.member_id}) is at member epoch {wm.member_epoch}, but the coordinator has its member "
                    f"at {cm.member_epoch if cm else '-'} and the assignment epoch at {group.assignment_epoch} "
                    "(it was told something that was never stored)",
                )

    def convergence_problem(self) -> str | None:
        """Why the group is not converged (None if it is): Stable, and every item runs on exactly one
        live worker, which the coordinator agrees owns it."""
        node = self.node
        if not node.serving:
            return "the coordinator is not serving"
        assert node.core is not None
        group = node.core.state.groups.get(GROUP)
        if group is None:
            return "no group"
        if group.state() != STABLE:
            return f"group state {group.state()} (epoch {group.epoch}, assignment epoch {group.assignment_epoch})"
        if group.target.scheduled_rebalance_ms and group.target.scheduled_rebalance_ms > self.now:
            return "a delayed rebalance is scheduled"
        if group.held:
            return f"work held for fenced members {sorted(group.held)}"
        union = EMPTY
        total = 0
        for w in self.workers:
            if not w.up:
                continue
            m = w.member
            assert m is not None
            if w.leaving or m.state != MemberState.STABLE:
                return f"{w.name} is {'leaving' if w.leaving else m.state}"
            if m.effect_outstanding is not None:
                return f"{w.name} is still starting or stopping work"
            deadline = m.safety_deadline_ms()
            if (
                deadline is None
                or deadline - m.session_timeout_ms + m.safety_margin_ms() < self.scenario.fault_window_ms
            ):
                return f"{w.name} has had no successful heartbeat since the faults stopped"
            if m.running != m.assigned or m.pending or w.active != m.running:
                return f"{w.name} runs {w.active}, assigned {m.assigned}, pending {m.pending}"
            cm = group.members.get(m.member_id)
            if cm is None or cm.current.assigned != m.running or cm.member_epoch != m.member_epoch:
                return f"{w.name} ({m.member_id}@{m.member_epoch}) disagrees with the coordinator"
            if cm.current.state != CoordMemberState.STABLE:
                return f"{w.name} is {cm.current.state} at the coordinator"
            union = union | w.active
            total += len(w.active)
        expected = all_items(group.connectors)
        if union != expected or total != len(expected):
            return f"running {union} ({total}) but the group has {expected}"
        # No membership change is still to come: every member is a live worker (a member left by
        # a dead incarnation, or revived by its late requests, expires later and moves work around).
        live = {w.member_id for w in self.workers if w.up}
        ghosts = sorted(set(group.members) - live)
        if ghosts:
            return f"members {ghosts} are no live worker's (they will expire)"
        return None

    def _check_convergence(self) -> None:
        if self.now < self.net.last_chaos_delivery:
            return  # messages from the fault window are still in flight
        problem = self.convergence_problem()
        if problem is None:
            if self.converged_since is None:
                self.converged_since = self.now
                self.stats.converged_ms = self.now - self.scenario.fault_window_ms
                self.trace("CONVERGED")
                self.schedule(self.now + HOLD_INTERVALS * MAX_HEARTBEAT_MS, self._hold_done)
        elif self.converged_since is not None:
            raise Violation("c-stability", f"converged at {self.converged_since}, then: {problem}")

    def _hold_done(self, now: int) -> bool:
        self.done = True
        return True

    def check_storage(self) -> None:
        """At the end: memory == committed state == what a fresh load of the SQLite file replays to."""
        node = self.node
        if not node.serving:
            return
        assert node.core is not None
        fresh = CoordinatorState()
        for r in node.storage.load():
            fresh.replay(r)
        stored, committed, memory = durable_view(fresh), durable_view(node.shadow), durable_view(node.core.state)
        if stored != committed:
            raise Violation(
                "d-recovery", "storage replays to a different state than committed:\n" + _diff(committed, stored)
            )
        if memory != committed:
            raise Violation("d-recovery", "memory differs from the committed state:\n" + _diff(committed, memory))


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """The SDK and the core log every fault they handle (to stderr): silence them during a run."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def run_scenario(scenario: Scenario, *, keep_trace: bool = False) -> RunResult:
    with quiet_logs():
        return Simulation(scenario, keep_trace=keep_trace).run()
