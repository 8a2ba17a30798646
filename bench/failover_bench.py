"""Failover time of coordinator replicas (SPEC §10): SIGKILL the replica owning 100 groups of 10
workers each, and measure until every group is served again -- Stable at its new owner with every
worker heartbeating there -- against the lease time. Also counts the tasks and connectors the
workers stopped meanwhile (none moved, so the target is zero).

Two replicas over a throwaway PostgreSQL, default timings unless given (lease 10 s, renew 1 s,
session 45 s, heartbeat 5 s); the 1,000 workers are the real SDK (`ConnectWorkerClient`, push on)
in this process, given both replicas as bootstrap addresses. Target: recovered within lease + 5 s.

    .venv/bin/python bench/failover_bench.py [--groups 100] [--workers 10] [--lease-ms 10000] [--renew-ms 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from bench._coordinator import start_server  # noqa: E402
from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from services.common.items import Items  # noqa: E402
from services.coordinator.runtime.partitions import partition_for  # noqa: E402
from worker_sdk import ChannelPool, ConnectWorkerClient  # noqa: E402

PARTITIONS = 24


class Counting:
    """A listener that counts what it starts and stops."""

    def __init__(self) -> None:
        self.starts = 0
        self.stops = 0

    async def on_assigned(self, items: Items) -> None:
        self.starts += len(items)

    async def on_revoked(self, items: Items) -> None:
        self.stops += len(items)

    async def on_lost(self, items: Items) -> None:
        self.stops += len(items)


def replica(url: str, lease_ms: int, renew_ms: int, core: int) -> tuple[object, str]:
    cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--metrics-listen", "", "--database", url, "--log-level", "WARNING"]
    for s in (
        f"group.coordinator.partitions={PARTITIONS}",
        f"group.coordinator.lease.ms={lease_ms}",
        f"group.coordinator.lease.renew.interval.ms={renew_ms}",
    ):
        cmd += ["--set", s]
    return start_server(cmd, "a replica", core=core)


def admin(address: str) -> admin_pb2_grpc.ConnectGroupAdminStub:
    return admin_pb2_grpc.ConnectGroupAdminStub(grpc.insecure_channel(address))


def owners(address: str) -> dict[int, str]:
    r = admin(address).DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=10)
    live = {x.replica_id for x in r.replicas if x.live}
    return {
        p.partition: p.owner_address for p in r.partitions if p.owner_replica_id in live and p.expires_ms > r.now_ms
    }


def wait_spread(address: str, addresses: set[str]) -> dict[int, str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        o = owners(address)
        if len(o) == PARTITIONS and set(o.values()) == addresses:
            time.sleep(2.0)
            if owners(address) == o:
                return o
        time.sleep(0.2)
    raise RuntimeError("partitions not spread")


def stable_at_owner(gid: str, addresses: list[str], workers: int) -> bool:
    for address in addresses:
        try:
            found = admin(address).FindCoordinator(admin_pb2.FindCoordinatorRequest(group_id=gid), timeout=2)
            if found.error_code:
                continue
            g = (
                admin(found.address)
                .DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[gid]), timeout=2)
                .groups[0]
            )
            return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == workers
        except grpc.RpcError:
            continue
    return False


async def run(args: argparse.Namespace, addresses: list[str], victim: str, gids: list[str]) -> dict[str, float]:
    pool = ChannelPool()
    clients: list[tuple[str, ConnectWorkerClient, Counting]] = []
    for gid in gids:
        for _ in range(args.workers):
            listener = Counting()
            c = ConnectWorkerClient(addresses, gid, listener, pool=pool, metrics=False)
            clients.append((gid, c, listener))
            await c.start()
    # Converged: every worker stable and running what it was assigned, every group Stable.
    deadline = time.monotonic() + 300
    while True:
        ready = all(str(c.state) == "stable" and c.running == c.assigned and not c.pending for _, c, _ in clients)
        if ready and all(stable_at_owner(g, addresses, args.workers) for g in gids):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the groups did not converge")
        await asyncio.sleep(0.5)
    starts_before = sum(listener.starts for *_, listener in clients)
    stops_before = sum(listener.stops for *_, listener in clients)
    running = sum(len(c.running) for _, c, _ in clients)
    print(f"converged: {len(gids)} groups x {args.workers} workers, {running} items running", flush=True)
    await asyncio.sleep(2)

    def last_success_s(c: ConnectWorkerClient) -> float:
        """When the worker sent its last heartbeat that succeeded (monotonic seconds)."""
        sent = c.member._last_success_sent_ms
        return -1.0 if sent is None else sent / 1000

    successes_before = {id(c): last_success_s(c) for _, c, _ in clients}
    # SIGKILL the owner of every group.
    t0 = time.monotonic()
    os.kill(args.victim_pid, signal.SIGKILL)
    survivors = [a for a in addresses if a != victim]
    served_at: float | None = None
    workers_back_at: float | None = None
    while served_at is None or workers_back_at is None:
        now = time.monotonic()
        if now - t0 > 120:
            raise RuntimeError("no recovery within 120 s")
        if workers_back_at is None and all(last_success_s(c) > max(successes_before[id(c)], t0) for _, c, _ in clients):
            workers_back_at = now
        if served_at is None and all(stable_at_owner(g, survivors, args.workers) for g in gids):
            served_at = now
        await asyncio.sleep(0.1)
    stops = sum(listener.stops for *_, listener in clients) - stops_before
    starts = sum(listener.starts for *_, listener in clients) - starts_before
    for _, c, _ in clients:
        await c.close(timeout_s=5)
    await pool.close()
    return {
        "groups_stable_s": served_at - t0,
        "workers_back_s": workers_back_at - t0,
        "recovered_s": max(served_at, workers_back_at) - t0,
        "stops": stops,
        "starts": starts,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--workers", type=int, default=10, help="workers per group")
    ap.add_argument("--lease-ms", type=int, default=10_000)
    ap.add_argument("--renew-ms", type=int, default=1_000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    from tests.fixtures.postgres import PostgresServer, create_test_database, ensure_installed

    server = PostgresServer(ensure_installed())
    server.start()
    procs: list[object] = []
    try:
        url = create_test_database(server.url())
        (pa, a), (pb, b) = replica(url, args.lease_ms, args.renew_ms, 0), replica(url, args.lease_ms, args.renew_ms, 0)
        procs = [pa, pb]
        spread = wait_spread(a, {a, b})
        victim, args.victim_pid = a, pa.pid  # type: ignore[attr-defined]
        gids: list[str] = []
        i = 0
        while len(gids) < args.groups:
            gid = f"failover-{i}"
            if spread[partition_for(gid, PARTITIONS)] == victim:
                gids.append(gid)
            i += 1
        for gid in gids:
            r = admin(victim).PutConnector(
                admin_pb2.PutConnectorRequest(group_id=gid, connector="c", task_count=2 * args.workers - 1), timeout=10
            )
            assert r.error_code == 0, r
        result = asyncio.run(run(args, [a, b], victim, gids))
    finally:
        for p in procs:
            p.kill()  # type: ignore[attr-defined]
        server.stop()
    lease = args.lease_ms / 1000
    print(f"lease {lease:.1f} s, renew {args.renew_ms / 1000:.1f} s; killed the owner of {args.groups} groups")
    print(f"  every group Stable at its new owner after {result['groups_stable_s']:.2f} s")
    print(f"  every worker heartbeating at the new owner after {result['workers_back_s']:.2f} s")
    print(
        f"  recovered after {result['recovered_s']:.2f} s = lease + {result['recovered_s'] - lease:.2f} s "
        f"(target <= lease + 5 s)"
    )
    print(
        f"  items stopped meanwhile: {result['stops']:.0f}, started: {result['starts']:.0f} (target 0: no work moved)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
