"""The classic protocol on the coordinator (issue 35): heartbeat capacity of classic members
against the `connect` steady heartbeat on the same server and the same client, and the wall time
and coordinator CPU of one JoinGroup + SyncGroup rebalance of 100 classic workers.

    .venv/bin/python bench/classic_bench.py [--members 1000] [--seconds 4] [--rounds 3]
        [--workers 100] [--heartbeat-ms 3000] [--quick]

Capacity: one coordinator pinned to core 0, the load generator on core 1 (as heartbeat_bench.py);
a `connect` group of --members Stable members and a classic group of as many Stable members;
heartbeats round-robin at 8 in flight, the protocols alternating in --rounds rounds; reported: each
protocol's requests/s and server CPU per request, and their ratio (classic capacity / connect
capacity, from CPU per request). Target: >= 0.9.

Rebalance: a classic group of --workers members, each played by a coroutine that behaves as Connect's
WorkerCoordinator does (heartbeat every --heartbeat-ms; on REBALANCE_IN_PROGRESS rejoin; the leader
assigns; everyone syncs). The trigger is one more worker joining; measured: from the trigger until
every member is synced at the new generation, and the coordinator's CPU in that time.
--quick: 100 members, 1 s rounds, one round, 20 workers, 500 ms heartbeats (CI runs it so it cannot rot).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._coordinator import start_server  # noqa: E402
from bench.heartbeat_bench import cpu_seconds, setup_group  # noqa: E402
from connect.coordinator.v1 import classic_pb2, classic_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from connect.coordinator.v1.common_pb2 import ErrorCode  # noqa: E402
from services.classic import join_protocols  # noqa: E402

GROUP = "classic-bench"


def join_request(member_id: str, url: str) -> classic_pb2.JoinGroupRequest:
    req = classic_pb2.JoinGroupRequest(
        group_id=GROUP,
        member_id=member_id,
        protocol_type="connect",
        session_timeout_ms=60_000,
        rebalance_timeout_ms=60_000,
    )
    for name, metadata in join_protocols("sessioned", url, 0, None):
        req.protocols.add(name=name, metadata=metadata)
    return req


class Worker:
    """A classic member as Connect's WorkerCoordinator drives it (the assignment bytes are empty:
    the coordinator stores and hands out what the leader sends; what they hold costs it nothing)."""

    def __init__(self, stub: classic_pb2_grpc.ConnectClassicGroupStub, name: str) -> None:
        self.stub, self.name = stub, name
        self.member_id, self.generation = "", -1
        self.synced = asyncio.Event()

    async def join_and_sync(self) -> None:
        while True:
            if not self.member_id:
                first = await self.stub.JoinGroup(join_request("", self.name), timeout=120)
                assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
                self.member_id = first.member_id
            joined = await self.stub.JoinGroup(join_request(self.member_id, self.name), timeout=120)
            if joined.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            assert joined.error_code == ErrorCode.NONE, joined
            sync = classic_pb2.SyncGroupRequest(
                group_id=GROUP, member_id=self.member_id, generation_id=joined.generation_id
            )
            if joined.leader == self.member_id:
                for m in joined.members:
                    sync.assignments.add(member_id=m.member_id, assignment=b"")
            synced = await self.stub.SyncGroup(sync, timeout=120)
            if synced.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            assert synced.error_code == ErrorCode.NONE, synced
            self.generation = joined.generation_id
            self.synced.set()
            return

    async def run(self, heartbeat_s: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), heartbeat_s)
            if stop.is_set():
                return
            hb = await self.stub.Heartbeat(
                classic_pb2.HeartbeatRequest(group_id=GROUP, member_id=self.member_id, generation_id=self.generation),
                timeout=30,
            )
            if hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.synced.clear()
                await self.join_and_sync()


async def classic_group(address: str, members: int) -> list[tuple[str, int]]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
        workers = [Worker(stub, f"http://w{i}:8083") for i in range(members)]
        await asyncio.gather(*(w.join_and_sync() for w in workers))
        generations = {w.generation for w in workers}
        assert len(generations) == 1, generations
        return [(w.member_id, w.generation) for w in workers]


async def load(address: str, kind: str, members: list[tuple[str, int]], in_flight: int, seconds: float) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        if kind == "classic":
            cstub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
            creqs = [classic_pb2.HeartbeatRequest(group_id=GROUP, member_id=m, generation_id=g) for m, g in members]

            async def call(i: int) -> int:
                return int((await cstub.Heartbeat(creqs[i % len(creqs)], timeout=10)).error_code)
        else:
            stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel)
            reqs = [
                coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="bench", member_id=m, member_epoch=e)
                for m, e in members
            ]

            async def call(i: int) -> int:
                return int((await stub.ConnectGroupHeartbeat(reqs[i % len(reqs)], timeout=10)).error_code)

        stop_at = time.perf_counter() + seconds
        count = 0

        async def worker(offset: int) -> None:
            nonlocal count
            i = offset
            while time.perf_counter() < stop_at:
                code = await call(i)
                assert code == 0, code
                count += 1
                i += in_flight

        await asyncio.gather(*(worker(k) for k in range(in_flight)))
        return count


def measure(pid: int, address: str, kind: str, members: list[tuple[str, int]], seconds: float) -> tuple[float, float]:
    asyncio.run(load(address, kind, members, 8, min(1.0, seconds)))  # warm-up
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    n = asyncio.run(load(address, kind, members, 8, seconds))
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return n / elapsed, cpu / n * 1e6


async def rebalance(address: str, pid: int, workers: int, heartbeat_s: float) -> tuple[float, float, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
        group = [Worker(stub, f"http://r{i}:8083") for i in range(workers)]
        await asyncio.gather(*(w.join_and_sync() for w in group))
        stop = asyncio.Event()
        beats = [asyncio.create_task(w.run(heartbeat_s, stop)) for w in group]
        await asyncio.sleep(heartbeat_s * 1.5)  # steady first
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        newcomer = Worker(stub, "http://new:8083")
        await newcomer.join_and_sync()
        await asyncio.gather(*(w.synced.wait() for w in group))
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
        generations = {w.generation for w in [*group, newcomer]}
        stop.set()
        await asyncio.gather(*beats)
        assert len(generations) == 1, generations
        return elapsed, cpu, generations.pop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=3000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.members, args.seconds, args.rounds, args.workers, args.heartbeat_ms = 100, 1.0, 1, 20, 500
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {1})  # the load generator on core 1, the server on core 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
        cmd += ["--metrics-listen", "", "--database", f"sqlite:///{tmp}/c.db", "--log-level", "WARNING"]
        for s in (
            "group.connect.session.timeout.ms=60000",
            "group.connect.heartbeat.interval.ms=5000",
            "group.classic.initial.rebalance.delay.ms=0",
            "group.coordinator.principal.request.rate=0",
        ):
            cmd += ["--set", s]
        proc, address = start_server(cmd, "connect-coordinator", core=0)
        try:
            connect_members = setup_group(address, args.members)
            classic_members = asyncio.run(classic_group(address, args.members))
            rounds: list[tuple[float, float, float, float]] = []
            for _ in range(args.rounds):
                c_rps, c_cpu = measure(proc.pid, address, "connect", connect_members, args.seconds)
                k_rps, k_cpu = measure(proc.pid, address, "classic", classic_members, args.seconds)
                rounds.append((c_rps, c_cpu, k_rps, k_cpu))
            ratios = [c_cpu / k_cpu for _, c_cpu, _, k_cpu in rounds]
            mid = rounds[ratios.index(statistics.median(ratios))]
            print(
                f"# classic_bench: {args.members} members per protocol, 8 in flight, {args.seconds} s x {args.rounds}"
            )
            print()
            print("| heartbeat | req/s | server CPU µs/req |")
            print("|---|---:|---:|")
            print(f"| connect (steady) | {mid[0]:.0f} | {mid[1]:.0f} |")
            print(f"| classic | {mid[2]:.0f} | {mid[3]:.0f} |")
            print()
            print(
                f"capacity ratio classic / connect: {statistics.median(ratios):.2f} "
                f"(each round: {', '.join(f'{r:.2f}' for r in ratios)}); target >= 0.9"
            )
            elapsed, cpu, generation = asyncio.run(rebalance(address, proc.pid, args.workers, args.heartbeat_ms / 1000))
            print()
            print(
                f"rebalance of {args.workers} classic workers (+1 joining), heartbeats every {args.heartbeat_ms} ms: "
                f"{elapsed * 1000:.0f} ms from the trigger to every member synced at generation {generation}; "
                f"coordinator CPU {cpu * 1000:.0f} ms"
            )
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
