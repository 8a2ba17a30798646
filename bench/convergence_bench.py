"""Worker convergence: how fast a group of real SDK clients settles, end to end over gRPC.

1. One worker joins a settled group of 100 workers running 1,000 tasks (10 connectors x 100 tasks):
   time from its start until every worker runs exactly its target, nothing is pending anywhere and
   the coordinator reports the group Stable -- in seconds and in heartbeat intervals. Repeated
   (the 101st, 102nd, ... worker joins the settled group each time).
2. 1,000 workers (in-process clients, as `connect-worker --simulate` runs them) join an empty group
   with 1,000 tasks at once: time until all are stable and every connector and task runs exactly
   once.

The coordinator is a real `connect-coordinator serve` subprocess (SQLite, client-side mode: the
workers compute the assignments with the local assignor); the clients run in this process. Not a
test: it prints a table and writes JSON under bench/out/.

    .venv/bin/python bench/convergence_bench.py [--joins 10] [--big-workers 1000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from services.common.items import Items, all_items  # noqa: E402
from worker_sdk import ConnectWorkerClient, MemberState  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from _coordinator import Coordinator  # noqa: E402

GROUP = "bench"


@dataclass
class BenchWorker:
    """A listener that keeps what runs, and counts what it was asked to stop."""

    name: str
    running: Items = field(default_factory=Items)
    revoked: int = 0
    client: ConnectWorkerClient | None = None
    assigned_at: float = 0.0  # monotonic time of the last on_assigned

    async def on_assigned(self, items: Items) -> None:
        self.running |= items
        self.assigned_at = time.monotonic()

    async def on_revoked(self, items: Items) -> None:
        self.running -= items
        self.revoked += len(items)

    async def on_lost(self, items: Items) -> None:
        self.running -= items


def start_coordinator(workdir: Path, interval_ms: int, session_ms: int) -> Coordinator:
    return Coordinator(
        workdir,
        (
            "group.connect.min.session.timeout.ms=1000",
            f"group.connect.session.timeout.ms={session_ms}",
            "group.connect.min.heartbeat.interval.ms=100",
            f"group.connect.heartbeat.interval.ms={interval_ms}",
        ),
    )


class Fleet:
    def __init__(self, address: str, channels: int) -> None:
        self.channels = [grpc.aio.insecure_channel(address) for _ in range(channels)]
        self.admin = admin_pb2_grpc.ConnectGroupAdminStub(self.channels[0])
        self.workers: list[BenchWorker] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.connectors: dict[str, int] = {}

    async def put(self, connector: str, tasks: int) -> None:
        r = await self.admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=GROUP, connector=connector, task_count=tasks), timeout=30
        )
        assert r.error_code == 0, r.error_message
        self.connectors[connector] = tasks

    def add(self, n: int, push: bool = True) -> list[BenchWorker]:
        new = []
        for _ in range(n):
            i = len(self.workers)
            w = BenchWorker(f"w{i}")
            w.client = ConnectWorkerClient(
                self.channels[i % len(self.channels)],
                GROUP,
                w,
                metrics=False,
                rng=random.Random(i),
                rebalance_timeout_ms=60_000,
                request_timeout_ms=10_000,
                push=push,
            )
            self.workers.append(w)
            new.append(w)
        return new

    def start(self, workers: list[BenchWorker]) -> None:
        for w in workers:
            assert w.client is not None
            self.tasks.append(asyncio.create_task(w.client.run()))

    def settled_locally(self) -> bool:
        """Every worker stable, running exactly its assignment, nothing pending; every item once."""
        counts: collections.Counter[Any] = collections.Counter()
        for w in self.workers:
            c = w.client
            assert c is not None
            if c.state != MemberState.STABLE or c.pending or w.running != c.assigned:
                return False
            counts.update(w.running.item_keys())
        expected = all_items(self.connectors)
        return (
            len(counts) == len(expected)
            and all(n == 1 for n in counts.values())
            and set(counts) == set(expected.item_keys())
        )

    async def coordinator_settled(self) -> tuple[bool, int]:
        r = await self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=30)
        g = r.groups[0]
        if g.group_state != "Stable" or len(g.members) != len(self.workers):
            return False, g.group_epoch
        running = {w.client.member_id: w.running for w in self.workers if w.client is not None}
        ok = all(
            Items.from_proto(m.assignment) == Items.from_proto(m.target_assignment) == running.get(m.member_id)
            and not (m.pending.connectors or m.pending.tasks)
            for m in g.members
        )
        return ok, g.group_epoch

    async def wait_settled(self, timeout_s: float) -> tuple[float, int]:
        """Seconds until settled (the local check passes, then the coordinator confirms)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.settled_locally():
                seen = time.monotonic()
                ok, epoch = await self.coordinator_settled()
                if ok and self.settled_locally():
                    return seen - t0, epoch
            await asyncio.sleep(0.01)
        raise TimeoutError(f"not settled after {timeout_s} s")

    async def close(self) -> None:
        await asyncio.gather(*(w.client.close(timeout_s=30) for w in self.workers if w.client is not None))
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for ch in self.channels:
            await ch.close(None)


async def one_joins(
    address: str, n: int, connectors: int, tasks_each: int, joins: int, interval_ms: int, push: bool = True
) -> dict[str, Any]:
    fleet = Fleet(address, channels=4)
    for c in range(connectors):
        await fleet.put(f"conn{c:02d}", tasks_each)
    fleet.start(fleet.add(n, push))
    formed_s, epoch = await fleet.wait_settled(300)
    runs = []
    rng = random.Random(7)
    for _ in range(joins):
        # A quiet group, joined at a random phase of the members' heartbeats.
        await asyncio.sleep(min(2 * interval_ms, 3_000) / 1000 + rng.random() * interval_ms / 1000)
        for w in fleet.workers:
            w.revoked = 0
        new = fleet.add(1, push)
        t0 = time.monotonic()
        fleet.start(new)
        took_s, epoch = await fleet.wait_settled(120)
        runs.append(
            {
                "seconds": took_s,
                # The moved items run at the newcomer (the downtime of what moved), before the
                # unchanged members have heartbeated their way to the new epoch.
                "work_moved_s": new[0].assigned_at - t0,
                "intervals": took_s * 1000 / interval_ms,
                "revoked_items": sum(w.revoked for w in fleet.workers),
                "workers_disturbed": sum(1 for w in fleet.workers if w.revoked),
                "newcomer_items": len(new[0].running),
                "group_epoch": epoch,
            }
        )
    await fleet.close()
    secs = [r["seconds"] for r in runs]
    return {
        "workers": n,
        "push": push,
        "tasks": connectors * tasks_each,
        "connectors": connectors,
        "heartbeat_interval_ms": interval_ms,
        "initial_formation_s": formed_s,
        "runs": runs,
        "median_s": statistics.median(secs),
        "max_s": max(secs),
        "median_intervals": statistics.median(secs) * 1000 / interval_ms,
    }


async def all_join(
    address: str,
    n: int,
    connectors: int,
    tasks_each: int,
    interval_ms: int,
    coordinator: Coordinator,
    push: bool = True,
) -> dict[str, Any]:
    fleet = Fleet(address, channels=8)
    for c in range(connectors):
        await fleet.put(f"conn{c:02d}", tasks_each)
    workers = fleet.add(n, push)
    cpu0 = coordinator.cpu_s()
    fleet.start(workers)
    took_s, epoch = await fleet.wait_settled(600)
    cpu = coordinator.cpu_s() - cpu0
    await fleet.close()
    return {
        "workers": n,
        "push": push,
        "tasks": connectors * tasks_each,
        "connectors": connectors,
        "heartbeat_interval_ms": interval_ms,
        "seconds": took_s,
        "intervals": took_s * 1000 / interval_ms,
        "group_epoch": epoch,
        "coordinator_cpu_s": cpu,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=100)
    p.add_argument("--joins", type=int, default=10)
    p.add_argument("--interval-ms", type=int, default=300, help="heartbeat interval for the join case")
    p.add_argument("--big-workers", type=int, default=1000)
    p.add_argument("--big-interval-ms", type=int, default=1000, help="heartbeat interval for the all-join case")
    p.add_argument("--quick", action="store_true", help="10 and 100 workers, 2 joins (a smoke run)")
    p.add_argument(
        "--push-compare",
        action="store_true",
        help="push vs heartbeat-paced side by side at --interval-ms (e.g. 5000): one join, and all join at once",
    )
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "convergence.json"))
    args = p.parse_args()
    if args.quick:
        args.workers, args.joins, args.big_workers = 10, 2, 100
    logging.basicConfig(level=logging.ERROR)
    connectors, tasks_each = 10, 100

    results: dict[str, Any] = {}
    if args.push_compare:
        return push_compare(args, connectors, tasks_each)
    with tempfile.TemporaryDirectory(prefix="convergence-") as tmp:
        d1 = Path(tmp) / "join"
        d1.mkdir()
        coord = start_coordinator(d1, args.interval_ms, session_ms=10_000)
        try:
            results["one_joins"] = asyncio.run(
                one_joins(coord.address, args.workers, connectors, tasks_each, args.joins, args.interval_ms)
            )
        finally:
            coord.stop()
        d2 = Path(tmp) / "all"
        d2.mkdir()
        coord = start_coordinator(d2, args.big_interval_ms, session_ms=15_000)
        try:
            results["all_join"] = asyncio.run(
                all_join(coord.address, args.big_workers, connectors, tasks_each, args.big_interval_ms, coord)
            )
        finally:
            coord.stop()

    j, a = results["one_joins"], results["all_join"]
    print(f"\n1 worker joins {j['workers']} workers / {j['tasks']} tasks (interval {j['heartbeat_interval_ms']} ms):")
    print("| run | seconds | heartbeat intervals | items revoked | workers disturbed | newcomer items |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(j["runs"], 1):
        print(
            f"| {i} | {r['seconds']:.3f} | {r['intervals']:.2f} | {r['revoked_items']} | "
            f"{r['workers_disturbed']} | {r['newcomer_items']} |"
        )
    print(f"median {j['median_s']:.3f} s = {j['median_intervals']:.2f} intervals; max {j['max_s']:.3f} s")
    print(f"(the first {j['workers']} formed the group in {j['initial_formation_s']:.2f} s)")
    print(
        f"\n{a['workers']} workers join at once, {a['tasks']} tasks (interval {a['heartbeat_interval_ms']} ms): "
        f"{a['seconds']:.2f} s = {a['intervals']:.1f} intervals, final group epoch {a['group_epoch']}, "
        f"coordinator CPU {a['coordinator_cpu_s']:.1f} s"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten to {out}")
    return 0


def push_compare(args: argparse.Namespace, connectors: int, tasks_each: int) -> int:
    """One join into the settled group and all joining at once, with push and heartbeat-paced, at the
    same heartbeat interval, each on a fresh coordinator, in one run."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="convergence-push-") as tmp:
        for push in (True, False):
            name = "push" if push else "paced"
            d = Path(tmp) / f"join-{name}"
            d.mkdir()
            coord = start_coordinator(d, args.interval_ms, session_ms=max(20_000, 3 * args.interval_ms))
            try:
                results[f"one_joins_{name}"] = asyncio.run(
                    one_joins(coord.address, args.workers, connectors, tasks_each, args.joins, args.interval_ms, push)
                )
            finally:
                coord.stop()
            d = Path(tmp) / f"all-{name}"
            d.mkdir()
            coord = start_coordinator(d, args.interval_ms, session_ms=max(20_000, 3 * args.interval_ms))
            try:
                results[f"all_join_{name}"] = asyncio.run(
                    all_join(coord.address, args.big_workers, connectors, tasks_each, args.interval_ms, coord, push)
                )
            finally:
                coord.stop()
    print(f"\nheartbeat interval {args.interval_ms} ms; {connectors * tasks_each} tasks")
    print("| case | push | median s | max s | runs |")
    print("|---|---|---:|---:|---:|")
    for name in ("push", "paced"):
        j = results[f"one_joins_{name}"]
        print(f"| 1 joins {j['workers']} | {name} | {j['median_s']:.3f} | {j['max_s']:.3f} | {len(j['runs'])} |")
    for name in ("push", "paced"):
        a = results[f"all_join_{name}"]
        print(f"| {a['workers']} join at once | {name} | {a['seconds']:.2f} | {a['seconds']:.2f} | 1 |")
    ratio = results["one_joins_paced"]["median_s"] / results["one_joins_push"]["median_s"]
    print(f"one join: push is {ratio:.0f}x faster than heartbeat pacing (medians)")
    out = Path(args.out).with_name("convergence-push.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
