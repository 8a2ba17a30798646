"""In-process workers (ConnectWorkerClient + ReferenceWorker) against the real coordinator process:
the failure paths that need a real coordinator's timers -- fencing on the rebalance timeout, the
session-safety stop while the coordinator is frozen, a coordinator crash and restart -- with the
no-double-run check on every tick of the event loop (the workers live in this process, so one
look at their running sets is an exact snapshot)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from services.common.items import Items
from tests.fixtures.net import free_port
from tests.fixtures.processes import ManagedProcess, Processes
from tests.worker.observe import Admin
from worker_sdk import MemberState, ReferenceWorker

pytestmark = pytest.mark.timeout(60)

GROUP = "g"
SESSION_MS = 3_000
INTERVAL_MS = 300


class Watch:
    """Checks, every few milliseconds, that no item runs on two workers."""

    def __init__(self, workers: list[ReferenceWorker]) -> None:
        self.workers = workers
        self.checks = 0

    def check(self) -> None:
        seen: dict[object, str] = {}
        for w in self.workers:
            for key in w.running.item_keys():
                assert key not in seen, f"{key} runs on {seen[key]} and {w.name}"
                seen[key] = w.name
        self.checks += 1

    async def until(self, cond: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            if cond():
                return
            if time.monotonic() > deadline:
                state = {w.name: (str(w.client.state), str(w.running), str(w.client.pending)) for w in self.workers}
                raise AssertionError(f"timed out waiting for {what}: {state}")
            await asyncio.sleep(0.005)

    async def hold(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check()
            await asyncio.sleep(0.005)


def settled(workers: list[ReferenceWorker], admin: Admin) -> Callable[[], bool]:
    """Every worker stable, running what it is assigned, nothing pending, together everything;
    and the coordinator agrees (group Stable, each member's assignment is what its worker runs)."""

    def cond() -> bool:
        union = Items()
        for w in workers:
            c = w.client
            if c.state != MemberState.STABLE or c.pending or w.running != c.assigned:
                return False
            union = union | w.running
        if union != admin.expected():
            return False
        group = admin.describe()  # a short blocking call: fine in a test
        by_member = {m.member_id: Items.from_proto(m.assignment) for m in group.members}
        return group.group_state == "Stable" and by_member == {w.client.member_id: w.running for w in workers}

    return cond


def run(body: Callable[[], Awaitable[None]], timeout_s: float = 50.0) -> None:
    asyncio.run(asyncio.wait_for(body(), timeout_s))


async def start(*workers: ReferenceWorker) -> list[asyncio.Task[None]]:
    return [asyncio.create_task(w.run()) for w in workers]


async def close(workers: list[ReferenceWorker], tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*(w.close(timeout_s=10) for w in workers))
    await asyncio.gather(*tasks, return_exceptions=True)


def test_fenced_on_the_rebalance_timeout_loses_its_work_then_rejoins_with_the_same_member_id(
    worker_coordinator: ManagedProcess,
) -> None:
    admin = Admin(worker_coordinator.address, GROUP)
    admin.set_config("scheduled.rebalance.max.delay.ms", "0")
    admin.put("a", 5)

    async def body() -> None:
        # A stops slowly (600 ms) but gives the coordinator only 200 ms to see a revocation done.
        a = ReferenceWorker(
            worker_coordinator.address,
            GROUP,
            name="A",
            stop_delay_ms=600,
            rebalance_timeout_ms=200,
            rng=random.Random(1),
        )
        lost: list[Items] = []
        original = a.on_lost

        async def on_lost(items: Items) -> None:
            lost.append(items)
            await original(items)

        a.on_lost = on_lost  # type: ignore[method-assign]
        watch = Watch([a])
        tasks = await start(a)
        await watch.until(settled([a], admin), "A running everything")
        first_id = a.client.member_id

        b = ReferenceWorker(worker_coordinator.address, GROUP, name="B", rng=random.Random(2))
        watch.workers.append(b)
        tasks += await start(b)
        await watch.until(lambda: bool(lost), "A fenced and its work lost", timeout_s=15)
        await watch.until(settled([a, b], admin), "both settled after A rejoined", timeout_s=20)
        assert a.client.member_id == first_id, "rejoined with the same member id"
        assert a.client.metrics is not None
        assert (a.client.metrics.registry.get_sample_value("connect_worker_failed_rebalances_total") or 0) >= 1
        assert watch.checks > 100
        await close([a, b], tasks)

    try:
        run(body)
    finally:
        admin.close()


def test_session_safety_stops_the_work_while_the_coordinator_is_frozen(
    processes: Processes, worker_coordinator: ManagedProcess
) -> None:
    admin = Admin(worker_coordinator.address, GROUP)
    admin.put("a", 2)

    async def body() -> None:
        w = ReferenceWorker(worker_coordinator.address, GROUP, name="W", rng=random.Random(3))
        watch = Watch([w])
        tasks = await start(w)
        await watch.until(settled([w], admin), "W running everything")
        worker_coordinator.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            deadline_ms = w.client.member.safety_deadline_ms()
            assert deadline_ms is not None
            await watch.until(lambda: not w.running, "W to stop its work", timeout_s=10)
            stopped_ms = int(time.monotonic() * 1000)
            # Stopped at the safety deadline: the session minus max(interval, 20%) after the last
            # successful send -- well before the coordinator could expire the session.
            margin = max(INTERVAL_MS, SESSION_MS // 5)
            assert deadline_ms <= stopped_ms <= deadline_ms + 400
            assert stopped_ms - (deadline_ms - (SESSION_MS - margin)) < SESSION_MS
            assert time.monotonic() - frozen_at < SESSION_MS / 1000
        finally:
            worker_coordinator.send_signal(signal.SIGCONT)
        # Back: either the session survived (a full heartbeat gets the assignment back) or it expired
        # (fenced, rejoin): the work runs again.
        await watch.until(settled([w], admin), "W running everything again", timeout_s=20)
        await close([w], tasks)

    try:
        run(body)
    finally:
        admin.close()


def test_coordinator_crash_and_restart_on_the_same_database(processes: Processes) -> None:
    port = free_port()
    first = processes.start_coordinator(port=port, name="coordinator-1")
    address = first.address
    a = Admin(address, GROUP)
    a.put("a", 3)
    a.put("b", 3)

    async def body() -> None:
        workers = [ReferenceWorker(address, GROUP, name=f"w{i}", rng=random.Random(i)) for i in range(3)]
        watch = Watch(workers)
        tasks = await start(*workers)
        await watch.until(settled(workers, a), "three settled")
        first.kill()
        await watch.hold(0.5)
        await asyncio.to_thread(processes.start_coordinator, port=port, name="coordinator-2")
        await watch.until(settled(workers, a), "three settled after the restart", timeout_s=25)
        # The coordinator agrees with what the workers run.
        group = await asyncio.to_thread(a.describe)
        assert group.group_state == "Stable"
        by_member = {m.member_id: Items.from_proto(m.assignment) for m in group.members}
        assert {w.client.member_id: w.running for w in workers} == by_member
        await close(workers, tasks)

    try:
        run(body)
    finally:
        a.close()


def test_metrics_describe_the_rebalances(worker_coordinator: ManagedProcess) -> None:
    admin = Admin(worker_coordinator.address, GROUP)
    admin.put("a", 4)

    async def body() -> None:
        workers = [ReferenceWorker(worker_coordinator.address, GROUP, name=f"w{i}") for i in range(2)]
        watch = Watch(workers)
        tasks = await start(workers[0])
        await watch.until(settled(workers[:1], admin), "w0 alone")
        tasks += await start(workers[1])
        await watch.until(settled(workers, admin), "both")
        assert workers[0].client.metrics is not None
        reg = workers[0].client.metrics.registry

        def value(name: str, labels: dict[str, str] | None = None) -> float:
            v = reg.get_sample_value(name, labels)
            assert v is not None, f"{name}{labels or ''} is not exported"
            return v

        assert value("connect_worker_rebalances_total") >= 2  # the join, then sharing with w1
        assert value("connect_worker_rebalance_latency_seconds_count") >= 2
        assert value("connect_worker_rebalance_latency_max_seconds") > 0
        assert value("connect_worker_rebalance_latency_avg_seconds") > 0
        assert value("connect_worker_callback_latency_seconds_count", {"callback": "assigned"}) >= 1
        assert value("connect_worker_callback_latency_seconds_count", {"callback": "revoked"}) >= 1
        assert value("connect_worker_failed_rebalances_total") == 0
        assert 0 <= value("connect_worker_last_rebalance_age_seconds") < 10
        assert value("connect_worker_heartbeats_total", {"result": "NONE"}) >= 1
        assert value("connect_worker_assignments_total", {"outcome": "installed"}) >= 1
        fresh = ReferenceWorker(worker_coordinator.address, GROUP, name="fresh")
        assert fresh.client.metrics.registry.get_sample_value("connect_worker_last_rebalance_age_seconds") == -1  # type: ignore[union-attr]
        await close(workers, tasks)

    try:
        run(body)
    finally:
        admin.close()
