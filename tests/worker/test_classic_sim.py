"""Classic workers (`ClassicMember`) against the real pure core (`GroupCoordinator`'s classic
handlers), in process, on virtual time: JoinGroup / SyncGroup calls the core parks are answered when
the core releases their `ClassicAnswer`s, the config comes from the core's own DescribeGroups, and
every step checks that no connector or task is owned by two live workers (owned = running or being
started). Eager and cooperative, joins, scale-out, a crash, a graceful leave, connector changes."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, all_items
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.handler import ClassicWait, Result
from tests.coordinator.harness import TEST_CONFIG
from worker_sdk._classic import ClassicConfig, ClassicMember, ClassicRequest, ClassicState, RequestKind
from worker_sdk._member import Effect

GROUP = "g"
STEP_MS = 50
CONFIG = TEST_CONFIG


@dataclass
class SimWorker:
    name: str
    member: ClassicMember
    effect: Effect | None = None
    effect_done_at: int = 0
    starts: int = 0
    stops: int = 0
    revoked_log: list[Items] = field(default_factory=list)


class Sim:
    def __init__(self, mode: str, *, max_delay_ms: int = 5_000, effect_ms: int = 0, seed: int = 1) -> None:
        ids = itertools.count(1)
        self.core = GroupCoordinator(CONFIG, None, new_member_id=lambda: f"m{next(ids)}")
        self.mode = mode
        self.max_delay_ms = max_delay_ms
        self.effect_ms = effect_ms
        self.rng = random.Random(seed)
        self.now = 0
        self.workers: dict[str, SimWorker] = {}
        self.parked: dict[int, tuple[str, int]] = {}  # token -> (worker, request seq)
        self.connectors: dict[str, int] = {}

    # -- the world
    def put(self, name: str, tasks: int) -> None:
        self.apply(
            self.core.put_connector(
                admin_pb2.PutConnectorRequest(group_id=GROUP, connector=name, task_count=tasks), self.now
            )
        )
        self.connectors[name] = tasks

    def delete(self, name: str) -> None:
        self.apply(
            self.core.delete_connector(admin_pb2.DeleteConnectorRequest(group_id=GROUP, connector=name), self.now)
        )
        del self.connectors[name]

    def add(self, name: str) -> SimWorker:
        config = ClassicConfig(
            GROUP,
            mode=self.mode,
            url=f"http://{name}:8083",
            client_id=name,
            scheduled_rebalance_max_delay_ms=self.max_delay_ms,
        )
        w = SimWorker(name, ClassicMember(config, rng=random.Random(self.rng.random())))
        self.workers[name] = w
        w.member.join(self.now)
        return w

    def crash(self, name: str) -> None:
        """The process dies: it runs nothing any more, its calls are gone."""
        del self.workers[name]
        self.parked = {t: v for t, v in self.parked.items() if v[0] != name}

    # -- plumbing
    def apply(self, result: Result) -> Any:
        for a in result.answers:
            target = self.parked.pop(a.token, None)
            if target is not None and target[0] in self.workers:
                self.workers[target[0]].member.on_response(target[1], a.response, self.now)
        return result.response

    def send(self, w: SimWorker, req: ClassicRequest) -> None:
        m = w.member
        if req.kind == RequestKind.CONFIG:
            m.on_response(req.seq, self.core.describe_groups(req.request), self.now)
            return
        handler: dict[RequestKind, Callable[[Any, int], Result]] = {
            RequestKind.JOIN: self.core.join_group,
            RequestKind.SYNC: self.core.sync_group,
            RequestKind.HEARTBEAT: self.core.classic_heartbeat,
            RequestKind.LEAVE: self.core.leave_group,
        }
        response = self.apply(handler[req.kind](req.request, self.now))
        if isinstance(response, ClassicWait):
            self.parked[response.token] = (w.name, req.seq)
        else:
            m.on_response(req.seq, response, self.now)

    def step(self) -> None:
        self.apply(self.core.poll(self.now))
        for w in list(self.workers.values()):
            m = w.member
            if w.effect is not None and self.now >= w.effect_done_at:
                eff, w.effect = w.effect, None
                w.stops += len(eff.lost) + len(eff.revoked)
                w.starts += len(eff.assigned)
                if eff.revoked:
                    w.revoked_log.append(eff.revoked)
                m.effect_done(eff.seq, self.now)
            while (req := m.poll_request(self.now)) is not None:
                self.send(w, req)
            if w.effect is None:
                w.effect = m.poll_effect(self.now)
                if w.effect is not None:
                    w.effect_done_at = self.now + self.effect_ms
        self.check()

    def check(self) -> None:
        seen: dict[Any, str] = {}
        for w in self.workers.values():
            for key in w.member.owned.item_keys():
                assert key not in seen, f"t={self.now}: {key} owned by {seen[key]} and {w.name}"
                seen[key] = w.name

    def run(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += STEP_MS
            self.step()

    def converged(self) -> bool:
        members = [w.member for w in self.workers.values()]
        if not all(m.state == ClassicState.STABLE and m.effect_outstanding is None for m in members):
            return False
        union = EMPTY
        for m in members:
            union = union | m.running
        return union == all_items(self.connectors) and sum(len(m.running) for m in members) == len(union)

    def run_until_converged(self, limit_ms: int = 60_000) -> int:
        start = self.now
        while not self.converged():
            assert self.now - start < limit_ms, f"not converged after {limit_ms} ms: {self.summary()}"
            self.now += STEP_MS
            self.step()
        return self.now - start

    def summary(self) -> dict[str, Any]:
        return {n: (str(w.member.state), str(w.member.running)) for n, w in self.workers.items()}

    def balanced(self) -> bool:
        for kind in ("connectors", "tasks"):
            counts = [len(getattr(w.member.running, kind)) for w in self.workers.values()]
            if max(counts) - min(counts) > 1:
                return False
        return True

    def generation(self) -> int:
        classic = self.core.state.groups[GROUP].classic
        assert classic is not None
        return classic.generation


@pytest.mark.parametrize("mode", ["eager", "compatible", "sessioned"])
def test_three_workers_converge_and_follow_connector_changes(mode: str) -> None:
    sim = Sim(mode, effect_ms=100)
    sim.put("a", 2)
    sim.put("b", 3)
    for i in range(3):
        sim.add(f"w{i}")
    sim.run_until_converged()
    assert sim.balanced(), sim.summary()
    leaders = [w for w in sim.workers.values() if w.member.is_leader]
    assert len(leaders) == 1
    protocol = {"eager": "default"}.get(mode, mode)
    assert {w.member.protocol for w in sim.workers.values()} == {protocol}

    sim.put("c", 4)  # the leader sees the config move and rebalances
    sim.run(200)
    sim.run_until_converged()
    assert sim.balanced(), sim.summary()
    sim.delete("a")
    sim.run(200)
    sim.run_until_converged()
    assert sim.balanced(), sim.summary()


def test_eager_revokes_everything_on_every_rebalance() -> None:
    sim = Sim("eager")
    sim.put("a", 4)
    w0 = sim.add("w0")
    sim.run_until_converged()
    assert w0.member.running == all_items({"a": 4})
    stops_before = w0.stops
    sim.add("w1")
    sim.run(500)
    sim.run_until_converged()
    # w0 stopped all 5 of its items at the join (onJoinPrepare), then started its new share.
    assert w0.revoked_log[-1] == all_items({"a": 4})
    assert w0.stops - stops_before == 5
    assert sim.balanced()


def test_cooperative_scale_out_moves_only_what_must_move_with_a_follow_up_rebalance() -> None:
    sim = Sim("sessioned")
    sim.put("a", 6)
    w0 = sim.add("w0")
    sim.run_until_converged()
    generation = sim.generation()
    sim.add("w1")
    sim.run(500)
    sim.run_until_converged()
    # w0 kept running what it keeps and stopped only what moved (1 connector + 6 tasks: 3 move).
    assert w0.stops == 3 and len(w0.revoked_log) == 1
    # The revocation, then the follow-up rebalance that hands the freed items out.
    assert sim.generation() >= generation + 2
    assert sim.balanced(), sim.summary()


def test_cooperative_crash_holds_the_work_for_the_delay_then_reassigns_it() -> None:
    sim = Sim("sessioned", max_delay_ms=8_000)
    sim.put("a", 5)
    for i in range(3):
        sim.add(f"w{i}")
    sim.run_until_converged()
    victim = next(w for w in sim.workers.values() if not w.member.is_leader)
    lost = victim.member.running
    assert lost
    sim.crash(victim.name)
    survivors = list(sim.workers.values())
    before = {w.name: w.member.running for w in survivors}
    # Session expiry (10 s) then the delay (8 s): the lost work is held meanwhile, nobody gives anything up.
    sim.run(12_000)
    for w in survivors:
        assert before[w.name].issubset(w.member.running), f"{w.name} gave up work during a cooperative rebalance"
        assert not (w.member.running & lost)
    sim.run_until_converged(30_000)
    assert all(w.stops == 0 for w in survivors)
    assert sim.balanced(), sim.summary()


def test_graceful_leave_stops_the_work_then_connect_holds_it_for_the_delay() -> None:
    """A worker that leaves stops its work first; Connect's cooperative leader cannot tell a leave
    from a crash (the member is simply gone), so the work is held for the delay as well."""
    sim = Sim("compatible", max_delay_ms=5_000)
    sim.put("a", 3)
    w0, w1 = sim.add("w0"), sim.add("w1")
    sim.run_until_converged()
    kept = w0.member.running
    w1.member.leave(sim.now, timeout_ms=1000)
    sim.run(200)
    assert w1.member.closed and w1.member.state == ClassicState.UNSUBSCRIBED and not w1.member.running
    sim.crash("w1")  # the process exits
    sim.run(4_000)
    assert w0.member.running == kept  # held, not yet reassigned
    waited = sim.run_until_converged(10_000)
    assert w0.member.running == all_items({"a": 3}) and waited > 0


def test_a_worker_behind_the_config_refreshes_before_running() -> None:
    """Every worker reads the config before it joins, so the leader and the members agree; the
    group's config offset grows with PutConnector."""
    sim = Sim("sessioned")
    sim.put("a", 2)
    w0 = sim.add("w0")
    sim.run_until_converged()
    offset = sim.core.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP])).groups[0].config_offset
    assert w0.member.config_offset == offset
    assert w0.member.connectors == {"a": 2}


def test_describe_of_a_missing_group_is_no_connectors() -> None:
    m = ClassicMember(ClassicConfig(GROUP))
    m.join(0)
    req = m.poll_request(0)
    assert req is not None and req.kind == RequestKind.CONFIG
    r = admin_pb2.DescribeGroupsResponse()
    r.groups.add(group_id=GROUP, error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    m.on_response(req.seq, r, 1)
    assert m.connectors == {} and m.config_offset == 0
    join = m.poll_request(1)
    assert join is not None and join.kind == RequestKind.JOIN


def test_the_same_seed_gives_the_same_run() -> None:
    def trace() -> list[tuple[int, str, str]]:
        sim = Sim("sessioned", effect_ms=100, seed=7)
        sim.put("a", 3)
        out = []
        for i in range(3):
            sim.add(f"w{i}")
            sim.run(1_500)
        sim.run_until_converged()
        sim.crash("w1")
        sim.run(20_000)
        for n, w in sorted(sim.workers.items()):
            out.append((w.member.generation, n, str(w.member.running)))
        return out

    assert trace() == trace()
