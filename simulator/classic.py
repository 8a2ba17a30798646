"""A simulated classic worker (SPEC §12): the real worker SDK `ClassicMember`, driven as
`ClassicWorkerClient` drives it, over the simulated network.

Its requests (DescribeGroups for the config, JoinGroup, SyncGroup, Heartbeat, LeaveGroup) are lost,
duplicated and delayed like any other; the coordinator node runs the core's classic handlers through
the runtime machine, parks a JoinGroup / SyncGroup that must wait (`ClassicWait`) and answers it when
the machine releases its `ClassicAnswer` (once durable); a coordinator crash fails the parked calls
(the connection dies with the process; the core forgets who waited when it loads). The worker's
running set is modelled from the effects the member emits, as for a `connect` worker.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from simulator.base import CLASSIC_JOIN_MARGIN_MS, GROUP, RETRY_BACKOFF_MAX_MS, Violation
from simulator.worker import SimWorker
from worker_sdk import ClassicConfig, ClassicMember, ClassicRequest, ClassicState, ClassicStateChanged

if TYPE_CHECKING:
    from simulator.engine import Simulation

# The network's names of a classic worker's requests (ClassicRequest.kind, prefixed).
PREFIX = "classic-"
CONFIG = PREFIX + "config"
JOIN = PREFIX + "join"
SYNC = PREFIX + "sync"
HEARTBEAT = PREFIX + "heartbeat"
LEAVE = PREFIX + "leave"
# The core's handler for each (CONFIG is the admin API's DescribeGroups, a read).
HANDLERS = {JOIN: "join_group", SYNC: "sync_group", HEARTBEAT: "classic_heartbeat", LEAVE: "leave_group"}
# A leave is bounded, as ClassicWorkerClient's graceful shutdown bounds it.
LEAVE_TIMEOUT_MS = 2_000


def is_classic(kind: str) -> bool:
    return kind.startswith(PREFIX)


class ClassicWorker(SimWorker):
    """A `SimWorker` whose member is a `ClassicMember` (the effects and the lifecycle are the same)."""

    member: ClassicMember | None  # type: ignore[assignment]

    def __init__(self, sim: Simulation, index: int) -> None:
        super().__init__(sim, index)
        self.mode = sim.scenario.classic
        self.classic_now = True

    # -- lifecycle

    def start(self, now: int) -> None:
        if not self.new_incarnation():
            return
        s = self.sim.scenario
        config = ClassicConfig(
            GROUP,
            mode=self.mode,
            url=f"http://{self.name}:8083",
            client_id=self.name,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            rebalance_timeout_ms=self.spec.rebalance_timeout_ms,
            scheduled_rebalance_max_delay_ms=s.scheduled_delay_ms,
            join_margin_ms=CLASSIC_JOIN_MARGIN_MS,
            retry_backoff_ms=100,
            retry_backoff_max_ms=RETRY_BACKOFF_MAX_MS,
            session_safety_margin_ms=self.spec.safety_margin_ms,
        )
        self.member = ClassicMember(config, rng=random.Random(f"{s.seed}/member/{self.index}/{self.incarnation}"))
        self.sim.trace(f"{self.name} starts (incarnation {self.incarnation}, classic {self.mode})")
        self.member.join(now)
        self.drive(now)

    def stop(self, now: int, temporary: bool) -> None:
        if not self.up or self.leaving or self.member is None:
            return
        self.sim.trace(f"{self.name} shuts down (LeaveGroup)")
        self.leaving = True
        self.member.leave(now, timeout_ms=LEAVE_TIMEOUT_MS)
        self.drive(now)

    def bump_reason(self, now: int) -> None:
        """The worker asks for a rebalance (AbstractCoordinator.requestRejoin)."""
        if self.member is None or self.leaving:
            return
        self.sim.trace(f"{self.name} asks for a rebalance")
        self.member.request_rejoin(now, "asked by the simulation")
        self.drive(now)

    # -- the driver loop (as ClassicWorkerClient's)

    def drive(self, now: int) -> None:
        m = self.member
        if m is None:
            return
        for _ in range(8):
            progressed = False
            effect = m.poll_effect(now)
            if effect is not None:
                self._begin_effect(effect, now)
                progressed = True
            while (req := m.poll_request(now)) is not None:
                self._send(req, now)
                progressed = True
            if not progressed:
                break
        for event in m.drain_events():
            if isinstance(event, ClassicStateChanged):
                self.sim.trace(f"{self.name} {event.old} -> {event.new} ({event.reason})")
                if event.reason == "session lost":
                    self.sim.stats.safety_stops += 1
        if m.state == ClassicState.FATAL:
            raise Violation("worker-fatal", f"{self.name} failed for good: {m.fatal_error}")
        self.settle(now)

    def _send(self, req: ClassicRequest, now: int) -> None:
        self.sim.net.request(self, PREFIX + str(req.kind), req.seq, req.request, now)

    # -- outcomes

    def on_response(self, kind: str, seq: int, response: Any, now: int) -> None:
        m = self.member
        assert m is not None
        m.on_response(seq, response, now)
        self.drive(now)

    def on_failure(self, kind: str, seq: int, now: int, why: str) -> None:
        m = self.member
        assert m is not None
        m.on_failure(seq, now, why)
        self.drive(now)
