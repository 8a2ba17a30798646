"""Push-driven reconciliation end to end (SPEC §11): in-process workers (ConnectWorkerClient +
ReferenceWorker) against the real coordinator process over real gRPC, with the production-like
heartbeat interval of 5 s. With the push stream, a worker joining a settled group converges before
any heartbeat-paced exchange could have done it; without it, the group still converges, at
heartbeat pace; a coordinator killed while streams are open comes back, the streams reconnect and
push works again -- and no item ever runs on two workers (checked every few milliseconds)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.net import free_port
from tests.fixtures.processes import Processes
from tests.worker.observe import Admin
from tests.worker.test_client_coordinator import Watch, close, run, settled, start
from worker_sdk import ConnectWorkerClient, ReferenceWorker

pytestmark = pytest.mark.timeout(120)

GROUP = "g"
INTERVAL_MS = 5_000
SETTINGS = (
    "group.connect.min.session.timeout.ms=500",
    "group.connect.session.timeout.ms=20000",
    "group.connect.min.heartbeat.interval.ms=50",
    f"group.connect.heartbeat.interval.ms={INTERVAL_MS}",
    "group.connect.assignment.retry.backoff.ms=100",
    "group.connect.scheduled.rebalance.max.delay.ms=0",
)


def nudges(w: ReferenceWorker) -> float:
    assert w.client.metrics is not None
    return w.client.metrics.registry.get_sample_value("connect_worker_nudges_total") or 0.0


def worker(address: str, name: str, seed: int, push: bool = True) -> ReferenceWorker:
    return ReferenceWorker(address, GROUP, name=name, rng=random.Random(seed), push=push)


async def join_one(address: str, watch: PushWatch, admin: Admin, name: str, seed: int, push: bool) -> float:
    """Start one more worker into the settled group; seconds until everything is settled again."""
    joined = time.monotonic()
    new = worker(address, name, seed, push)
    watch.workers.append(new)
    watch.tasks += await start(new)
    await watch.until(settled(watch.workers, admin), f"{name} joined and the group settled", timeout_s=40)
    return time.monotonic() - joined


class PushWatch(Watch):
    tasks: list[asyncio.Task[None]]


def test_a_join_converges_well_within_one_heartbeat_interval_with_push(processes: Processes) -> None:
    coordinator = processes.start_coordinator(settings=SETTINGS)
    admin = Admin(coordinator.address, GROUP)
    admin.put("a", 6)
    admin.put("b", 6)

    async def body() -> None:
        workers = [worker(coordinator.address, f"w{i}", i) for i in range(3)]
        watch = PushWatch(workers)
        watch.tasks = await start(*workers)
        await watch.until(settled(workers, admin), "three settled", timeout_s=40)
        old = list(workers)
        before = {w.name: nudges(w) for w in old}
        took = await join_one(coordinator.address, watch, admin, "w3", 3, push=True)
        # Heartbeat-paced, the old workers would learn of the new target (and revoke what moves) only
        # at their next heartbeat, up to a whole interval later; then a second round trip follows.
        assert took < INTERVAL_MS / 1000, f"converged in {took:.2f} s: not faster than heartbeat pacing"
        moved_from = [w for w in old if nudges(w) > before[w.name]]
        assert moved_from, "no worker was nudged"
        await close(watch.workers, watch.tasks)

    try:
        run(body, timeout_s=100)
    finally:
        admin.close()


def test_every_status_file_shows_the_new_epoch_without_a_refresh_timer(
    processes: Processes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose work does not change only moves to the new epoch: no callback, no rebalance
    event. Its status file must still say so at once (the SDK tells `on_change` whenever what its
    status shows moved), not at the reference worker's next refresh -- turned off here."""
    monkeypatch.setattr("worker_sdk._reference._STATUS_REFRESH_S", 3600.0)
    coordinator = processes.start_coordinator(settings=SETTINGS)
    admin = Admin(coordinator.address, GROUP)
    admin.put("a", 2)

    def with_file(name: str, seed: int) -> ReferenceWorker:
        return ReferenceWorker(
            coordinator.address, GROUP, name=name, rng=random.Random(seed), status_file=tmp_path / f"{name}.json"
        )

    def epoch_of(w: ReferenceWorker) -> int:
        assert isinstance(w.client, ConnectWorkerClient)
        return w.client.member_epoch

    def files_current(workers: list[ReferenceWorker]) -> Callable[[], bool]:
        def cond() -> bool:
            for w in workers:
                assert w.status_file is not None
                doc = json.loads(w.status_file.read_text())
                if (doc["member_epoch"], doc["state"]) != (epoch_of(w), "stable"):
                    return False
            return True

        return cond

    async def body() -> None:
        workers = [with_file(f"w{i}", i) for i in range(2)]
        watch = PushWatch(workers)
        watch.tasks = await start(*workers)
        await watch.until(settled(workers, admin), "two settled", timeout_s=40)
        await watch.until(files_current(workers), "two status files current", timeout_s=10)
        epoch = epoch_of(workers[0])
        # Two tasks, three workers: the third gets nothing, and whoever keeps its task only moves epoch.
        new = with_file("w2", 2)
        watch.workers.append(new)
        watch.tasks += await start(new)
        await watch.until(settled(watch.workers, admin), "three settled", timeout_s=40)
        # (The coordinator can say Stable just before the last response reaches its worker.)
        await watch.until(lambda: all(epoch_of(w) > epoch for w in watch.workers), "every worker at the new epoch")
        await watch.until(files_current(watch.workers), "every status file at the new epoch", timeout_s=10)
        await close(watch.workers, watch.tasks)

    try:
        run(body, timeout_s=100)
    finally:
        admin.close()


def test_without_the_stream_a_worker_still_converges_at_heartbeat_pace(processes: Processes) -> None:
    coordinator = processes.start_coordinator(settings=SETTINGS)
    admin = Admin(coordinator.address, GROUP)
    admin.put("a", 4)

    async def body() -> None:
        workers = [worker(coordinator.address, f"w{i}", i, push=False) for i in range(2)]
        watch = PushWatch(workers)
        watch.tasks = await start(*workers)
        await watch.until(settled(workers, admin), "two settled", timeout_s=40)
        await join_one(coordinator.address, watch, admin, "w2", 2, push=False)
        assert all(nudges(w) == 0 for w in watch.workers)  # no stream: nothing pushed
        await close(watch.workers, watch.tasks)

    try:
        run(body, timeout_s=100)
    finally:
        admin.close()


def test_streams_reconnect_after_the_coordinator_is_killed_and_nothing_runs_twice(processes: Processes) -> None:
    port = free_port()
    first = processes.start_coordinator(settings=SETTINGS, port=port, name="coordinator-1")
    address = first.address
    admin = Admin(address, GROUP)
    admin.put("a", 6)

    async def body() -> None:
        workers = [worker(address, f"w{i}", i) for i in range(3)]
        watch = PushWatch(workers)
        watch.tasks = await start(*workers)
        await watch.until(settled(workers, admin), "three settled", timeout_s=40)
        first.kill()  # SIGKILL with every stream open
        await watch.hold(0.5)
        await asyncio.to_thread(processes.start_coordinator, settings=SETTINGS, port=port, name="coordinator-2")
        await watch.until(settled(workers, admin), "settled after the restart", timeout_s=40)
        # The streams are back (reconnect backoff is at most 5 s): a join is pushed again.
        await watch.hold(6)
        old = list(workers)
        before = {w.name: nudges(w) for w in old}
        took = await join_one(address, watch, admin, "w3", 3, push=True)
        assert took < INTERVAL_MS / 1000, f"converged in {took:.2f} s after the restart: streams not back"
        assert any(nudges(w) > before[w.name] for w in old)
        await close(watch.workers, watch.tasks)

    try:
        run(body, timeout_s=110)
    finally:
        admin.close()
