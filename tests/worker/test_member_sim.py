"""A small deterministic simulation: real `Member`s and the real coordinator core (pure handlers),
a virtual clock, a network that delays and drops messages, a partitioned worker, a crashed worker,
connector changes, and client-side assignment computed by the workers. After every event the
safety property is checked on what the members may be running (`Member.owned`); at the end the
group must have converged. Each seed is a different schedule; a failure names its seed."""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import services.assignor
from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, all_items
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from worker_sdk import AssignmentOutcome, AssignmentTask, Member, MemberConfig, MemberState, OutgoingHeartbeat
from worker_sdk._assign import assign_request, install_request, run_assignor

GROUP = "g"
CONFIG = ServerConfig(
    session_timeout_ms=3_000,
    min_session_timeout_ms=1_000,
    heartbeat_interval_ms=300,
    min_heartbeat_interval_ms=100,
)


@dataclass
class SimWorker:
    name: str
    member: Member
    alive: bool = True
    partitioned_until: int = 0
    wake_at: int | None = None


@dataclass
class Sim:
    seed: int
    loss: float = 0.05
    effect_ms_max: int = 250  # well under the session-safety margin (600 ms here)
    now: int = 0
    events: list[tuple[int, int, Callable[[], None]]] = field(default_factory=list)
    checks: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        ids = itertools.count(1)
        self.core = GroupCoordinator(CONFIG, None, new_member_id=lambda: f"m{next(ids)}")
        self.workers: list[SimWorker] = []
        self._seq = itertools.count()
        self._coord_poll_at: int | None = None

    # ---- scheduling ----------------------------------------------------------------------------

    def at(self, t: int, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (t, next(self._seq), action))

    def run_until(self, end: int) -> None:
        while self.events and self.events[0][0] <= end:
            t, _, action = heapq.heappop(self.events)
            self.now = max(self.now, t)
            action()
            self.check()
        self.now = end

    def lossy(self) -> float:
        return self.loss if self.now < self.faults_until else 0.0

    faults_until: int = 20_000

    def deliver(self, w: SimWorker, action: Callable[[], None]) -> None:
        """One network hop to or from `w`: delayed, maybe dropped, always dropped while partitioned."""
        if self.now < w.partitioned_until or self.rng.random() < self.lossy():
            return
        self.at(self.now + self.rng.randint(1, 40), action)

    # ---- the coordinator -------------------------------------------------------------------------

    def coordinator_changed(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None and (self._coord_poll_at is None or deadline < self._coord_poll_at):
            self._coord_poll_at = deadline
            self.at(deadline, self.poll_coordinator)

    def poll_coordinator(self) -> None:
        self._coord_poll_at = None
        self.core.poll(self.now)
        self.coordinator_changed()

    def admin(self, fn: Callable[[Any, int], Any], request: Any) -> None:
        fn(request, self.now)
        self.coordinator_changed()

    # ---- workers ---------------------------------------------------------------------------------

    def add_worker(self, name: str) -> None:
        config = MemberConfig(group_id=GROUP, rebalance_timeout_ms=2_000, request_timeout_ms=1_000)
        w = SimWorker(name, Member(config, rng=random.Random(self.rng.random())))
        self.workers.append(w)
        w.member.join(self.now)
        self.drive(w)

    def drive(self, w: SimWorker) -> None:
        if not w.alive:
            return
        m = w.member
        effect = m.poll_effect(self.now)
        if effect is not None:
            # Starting or stopping takes a while; well under the session-safety margin.
            self.at(self.now + self.rng.randint(0, self.effect_ms_max), lambda: self.effect_done(w, effect.seq))
        out = m.poll_heartbeat(self.now)
        if out is not None:
            self.deliver(w, lambda: self.heartbeat_arrives(w, out))
        task = m.poll_assignment_task(self.now)
        if task is not None:
            self.prepare(w, task)
        wake = m.next_wakeup_ms()
        if wake is not None and (w.wake_at is None or wake < w.wake_at or w.wake_at <= self.now):
            w.wake_at = wake
            self.at(wake, lambda: self.wake(w))

    def wake(self, w: SimWorker) -> None:
        if w.wake_at is not None and w.wake_at <= self.now:
            w.wake_at = None
        self.drive(w)

    def effect_done(self, w: SimWorker, seq: int) -> None:
        if w.alive:
            w.member.effect_done(seq, self.now)
            self.drive(w)

    def heartbeat_arrives(self, w: SimWorker, out: OutgoingHeartbeat) -> None:
        response = self.core.heartbeat(out.request, self.now).response
        self.coordinator_changed()
        self.deliver(w, lambda: self.heartbeat_answered(w, out.seq, response))

    def heartbeat_answered(
        self, w: SimWorker, seq: int, response: coordinator_pb2.ConnectGroupHeartbeatResponse
    ) -> None:
        if w.alive:
            w.member.on_heartbeat_response(seq, response, self.now)
            self.drive(w)

    # ---- client-side assignment: Prepare, assign, Install, each hop over the network -----------

    def prepare(self, w: SimWorker, task: AssignmentTask) -> None:
        req = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id=GROUP, member_id=task.member_id, member_epoch=task.member_epoch
        )

        def arrives() -> None:
            resp = self.core.prepare_assignment(req, self.now).response
            self.coordinator_changed()
            self.deliver(w, lambda: self.prepared(w, task, resp))

        self.deliver(w, arrives)
        # A lost message: the driver's deadline gives up on the attempt.
        self.at(self.now + 1_500, lambda: self.task_timeout(w, task))

    def prepared(self, w: SimWorker, task: AssignmentTask, resp: Any) -> None:
        if resp.error_code != ErrorCode.NONE:
            self.task_done(w, task, self.outcome(resp.error_code))
            return
        result = run_assignor(services.assignor.assign, assign_request(GROUP, resp))
        install = install_request(task, resp.group_epoch, result)

        def arrives() -> None:
            r = self.core.install_assignment(install, self.now).response
            self.coordinator_changed()
            self.deliver(w, lambda: self.task_done(w, task, self.outcome(r.error_code)))

        self.deliver(w, arrives)

    @staticmethod
    def outcome(code: int) -> AssignmentOutcome:
        if code == ErrorCode.NONE:
            return AssignmentOutcome.INSTALLED
        if code in (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH):
            return AssignmentOutcome.RETRY
        return AssignmentOutcome.ABANDONED

    def task_done(self, w: SimWorker, task: AssignmentTask, outcome: AssignmentOutcome) -> None:
        m = w.member
        if w.alive and m._task is not None and m._task.seq == task.seq:
            m.assignment_task_done(task.seq, outcome, self.now)
            self.drive(w)

    def task_timeout(self, w: SimWorker, task: AssignmentTask) -> None:
        self.task_done(w, task, AssignmentOutcome.ABANDONED)

    # ---- the properties ------------------------------------------------------------------------

    def check(self) -> None:
        owner: dict[Any, str] = {}
        for w in self.workers:
            if not w.alive:
                continue  # a crashed process runs nothing
            for key in w.member.owned.item_keys():
                assert key not in owner, f"seed {self.seed} t={self.now}: {key} owned by {owner[key]} and {w.name}"
                owner[key] = w.name
        self.checks += 1


def scenario(seed: int, **overrides: Any) -> Sim:
    # 2% to 18% of messages lost until t=20 s, unless told otherwise.
    sim = Sim(seed, **{"loss": 0.02 + (seed % 5) * 0.04, **overrides})
    core = sim.core
    connectors = {"a": 3, "b": 4, "c": 2}
    sim.admin(
        core.alter_configs,
        admin_pb2.AlterConfigsRequest(
            group_id=GROUP, set=[admin_pb2.ConfigEntry(name="scheduled.rebalance.max.delay.ms", value="1000")]
        ),
    )
    for name, n in connectors.items():
        sim.admin(core.put_connector, admin_pb2.PutConnectorRequest(group_id=GROUP, connector=name, task_count=n))
    for i in range(5):
        sim.at(sim.rng.randint(0, 500), functools.partial(sim.add_worker, f"w{i}"))

    def put(name: str, n: int) -> None:
        connectors[name] = n
        sim.admin(core.put_connector, admin_pb2.PutConnectorRequest(group_id=GROUP, connector=name, task_count=n))

    def delete(name: str) -> None:
        del connectors[name]
        sim.admin(core.delete_connector, admin_pb2.DeleteConnectorRequest(group_id=GROUP, connector=name))

    def partition() -> None:
        victim = sim.workers[sim.rng.randrange(len(sim.workers))]
        victim.partitioned_until = sim.now + 4_500  # longer than the session

    def crash() -> None:
        alive = [w for w in sim.workers if w.alive]
        alive[sim.rng.randrange(len(alive))].alive = False

    sim.at(4_000, lambda: put("d", 5))
    sim.at(6_000, partition)
    sim.at(8_000, lambda: delete("b"))
    sim.at(10_000, lambda: put("a", 6))
    sim.at(12_000, crash)
    sim.at(14_000, functools.partial(sim.add_worker, "w5"))
    sim.run_until(40_000)
    sim.expected = all_items(connectors)  # type: ignore[attr-defined]
    return sim


@pytest.mark.parametrize("seed", range(40))
def test_simulated_group_is_safe_under_loss_partition_and_crash_then_converges(seed: int) -> None:
    sim = scenario(seed)
    live = [w for w in sim.workers if w.alive]
    union = Items()
    for w in live:
        m = w.member
        assert m.state == MemberState.STABLE, f"seed {seed}: {w.name} is {m.state}"
        assert m.running == m.assigned and not m.pending, f"seed {seed}: {w.name} not reconciled"
        union = union | m.running
    assert union == sim.expected  # type: ignore[attr-defined]
    group = sim.core.state.groups[GROUP]
    assert group.state() == "Stable"
    assert {mid for mid in group.members} == {w.member.member_id for w in live}
    assert sim.checks > 1_000
