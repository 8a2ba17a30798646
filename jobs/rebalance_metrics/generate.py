"""Realistic event logs at scale, from the real coordinator: many groups driven through the real core
(`GroupCoordinator`, service mode with the real incremental-cooperative assignor) and written by the
real storage (`Storage.write`, batched like group commit) into one database.

Each group gets connectors and workers (some static), then a seeded mix of what happens to Connect
clusters: a worker killed (its session expires; its work is held for the delayed rebalance, then
reassigned), a worker leaving, a static worker bouncing (-2 and back), workers added, task counts
changed, connectors added and deleted, and now and then the whole group torn down and deleted.
Workers behave like the SDK: they run what they are told, acknowledge revocations at once, rejoin
when fenced. Time is simulated (heartbeats every 3 s; a stable group's members every 40 s, within the 45 s session).

    python -m jobs.rebalance_metrics.generate --database sqlite:///events.db --events 1000000 [--groups 200] [--seed 1]
                                              [--processes 2]

Groups are independent (each one's behaviour comes from its own seeded random generator), so with
--processes P the groups are split over P processes (group i to process i mod P), each driving its
own real core into its own SQLite shard through the real storage; the shards' `rebalance_events`
are then merged into the target in time order (ties: shard, then the shard's commit order) with new
ids, the only table the metrics job reads. Each group's events are the same as in a one-process run
(same names, same seeds; only the member ids, which the core draws at random, differ); only how
groups interleave at equal times differs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services import assignor
from services.common.items import EMPTY, Items
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator, Result, ServiceAssignment
from services.coordinator.core.records import RebalanceEvent, Record
from services.storage import Storage

START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z
TICK_MS = 3_000
STABLE_HEARTBEAT_MS = 40_000
CONFIG = ServerConfig(
    session_timeout_ms=45_000,
    heartbeat_interval_ms=3_000,
    min_heartbeat_interval_ms=1_000,
    scheduled_rebalance_max_delay_ms=30_000,
    empty_retention_ms=600_000,
)
ASSIGNORS = [("incremental-cooperative", 1, 2)]


@dataclass
class Worker:
    name: str
    instance_id: str | None
    member_id: str = ""
    epoch: int = 0
    owned: Items = EMPTY
    alive: bool = True
    last_hb: int = -(10**12)
    away_until: int = 0  # a static member's bounce: back at this time


@dataclass
class SimGroup:
    gid: str
    rng: random.Random
    workers: list[Worker] = field(default_factory=list)
    connectors: dict[str, int] = field(default_factory=dict)
    next_action: int = 0
    serial: int = 0
    torn_down_until: int = 0


class Generator:
    def __init__(
        self, storage: Storage, groups: int, seed: int, batch: int = 20_000, shard: tuple[int, int] = (0, 1)
    ) -> None:
        self.storage = storage
        services = {a.name: (a.minimum_version, a.maximum_version) for a in assignor.list_assignors()}
        self.core = GroupCoordinator(CONFIG, services)
        self.now = START_MS
        self.rng = random.Random(seed)
        index, count = shard  # this process drives the groups i with i % count == index
        self.groups = [
            SimGroup(f"connect-{i:04d}", random.Random(seed * 100_003 + i)) for i in range(index, groups, count)
        ]
        self.pending: list[Record] = []
        self.batch = batch
        self.events = 0
        self.jobs: list[ServiceAssignment] = []

    # -- plumbing
    def _apply(self, result: Result) -> object:
        self._keep(result.records)
        # Service mode: the assignor service answers at once (its latency is not what is studied here).
        jobs = self.jobs + [e for e in result.effects if isinstance(e, ServiceAssignment)]
        self.jobs = []
        for job in jobs:
            resp = assignor.assign(job.request)
            done = self.core.complete_service_assignment(job.group_id, job.group_epoch, resp, self.now)
            self._keep(done.records)
            self.jobs.extend(e for e in done.effects if isinstance(e, ServiceAssignment))
        if len(self.pending) >= self.batch:
            self.flush()
        return result.response

    def _keep(self, records: list[Record]) -> None:
        self.pending.extend(records)
        self.events += sum(1 for r in records if isinstance(r, RebalanceEvent))

    def flush(self) -> None:
        if self.pending:
            self.storage.write(self.pending)
            self.pending = []

    # -- worker side
    def heartbeat(self, g: SimGroup, w: Worker, epoch: int | None = None) -> None:
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=g.gid, member_id=w.member_id, member_epoch=w.epoch if epoch is None else epoch
        )
        if req.member_epoch == 0:
            req.rebalance_timeout_ms = 20_000
            for n, lo, hi in ASSIGNORS:
                req.client_assignors.assignors.add(name=n, minimum_version=lo, maximum_version=hi, version=hi)
            if w.instance_id:
                req.instance_id = w.instance_id
        if req.member_epoch >= 0:
            w.owned.to_proto(req.owned)
        resp = self._apply(self.core.heartbeat(req, self.now))
        assert isinstance(resp, coordinator_pb2.ConnectGroupHeartbeatResponse)
        w.last_hb = self.now
        if req.member_epoch < 0:
            return
        if resp.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT):
            w.member_id, w.epoch = resp.member_id, resp.member_epoch
            if resp.HasField("assignment"):
                w.owned = Items.from_proto(resp.assignment.assigned)
        elif resp.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            w.member_id, w.epoch, w.owned = "", 0, EMPTY  # abandon all work, rejoin next tick

    def admin(self, method: str, request: object) -> None:
        self._apply(getattr(self.core, method)(request, self.now))

    # -- what happens to a group
    def setup(self, g: SimGroup) -> None:
        for _ in range(g.rng.randint(2, 6)):
            self.add_connector(g)
        for _ in range(g.rng.randint(2, 6)):
            self.add_worker(g)
        g.next_action = self.now + g.rng.randint(20_000, 120_000)

    def add_connector(self, g: SimGroup) -> None:
        g.serial += 1
        name = f"conn{g.serial}"
        g.connectors[name] = g.rng.randint(1, 8)
        self.admin(
            "put_connector",
            admin_pb2.PutConnectorRequest(group_id=g.gid, connector=name, task_count=g.connectors[name]),
        )

    def add_worker(self, g: SimGroup) -> None:
        g.serial += 1
        static = g.rng.random() < 0.3
        w = Worker(f"w{g.serial}", f"{g.gid}-w{g.serial}" if static else None)
        g.workers.append(w)
        self.heartbeat(g, w)

    def act(self, g: SimGroup) -> None:
        rng = g.rng
        live = [w for w in g.workers if w.alive and not w.away_until and w.member_id]
        roll = rng.random()
        if roll < 0.02 and self.now >= g.torn_down_until:
            self.tear_down(g)
            return
        if roll < 0.25 and len(live) > 1:
            victim = rng.choice(live)
            victim.alive = False  # killed: stops heartbeating; a replacement starts later
            g.workers.remove(victim)
            self.add_worker_later(g)
        elif roll < 0.40 and len(live) > 1:
            w = rng.choice(live)
            self.heartbeat(g, w, epoch=-1)
            g.workers.remove(w)
        elif roll < 0.55:
            statics = [w for w in live if w.instance_id]
            if statics:
                w = rng.choice(statics)
                self.heartbeat(g, w, epoch=-2)
                w.owned, w.away_until = EMPTY, self.now + rng.randint(3_000, 12_000)
        elif roll < 0.70 and len(g.workers) < 10:
            self.add_worker(g)
        elif roll < 0.82 and g.connectors:
            name = rng.choice(sorted(g.connectors))
            g.connectors[name] = rng.randint(1, 10)
            self.admin(
                "put_connector",
                admin_pb2.PutConnectorRequest(group_id=g.gid, connector=name, task_count=g.connectors[name]),
            )
        elif roll < 0.92 or len(g.connectors) < 2:
            self.add_connector(g)
        else:
            name = rng.choice(sorted(g.connectors))
            del g.connectors[name]
            self.admin("delete_connector", admin_pb2.DeleteConnectorRequest(group_id=g.gid, connector=name))

    def add_worker_later(self, g: SimGroup) -> None:
        g.serial += 1
        g.workers.append(Worker(f"w{g.serial}", None, away_until=self.now + g.rng.randint(5_000, 60_000)))

    def tear_down(self, g: SimGroup) -> None:
        for w in list(g.workers):
            if w.alive and w.member_id and not w.away_until:
                self.heartbeat(g, w, epoch=-1)
        g.workers = []
        for name in sorted(g.connectors):
            self.admin("delete_connector", admin_pb2.DeleteConnectorRequest(group_id=g.gid, connector=name))
        g.connectors = {}
        group = self.core.state.groups.get(g.gid)
        if group is not None and not group.members:
            self.admin("delete_groups", admin_pb2.DeleteGroupsRequest(group_ids=[g.gid]))
        g.torn_down_until = self.now + g.rng.randint(60_000, 600_000)

    # -- the clock
    def step(self) -> None:
        self.now += TICK_MS
        self._apply(self.core.poll(self.now))
        for g in self.groups:
            if g.torn_down_until and self.now < g.torn_down_until:
                continue
            if g.torn_down_until or (not g.workers and not g.connectors):
                g.torn_down_until = 0
                self.setup(g)
                continue
            if self.now >= g.next_action:
                self.act(g)
                g.next_action = self.now + g.rng.randint(10_000, 180_000)
            group = self.core.state.groups.get(g.gid)
            settled = group is not None and group.state() == "Stable"
            for w in list(g.workers):
                if not w.alive:
                    continue
                if w.away_until:
                    if self.now < w.away_until:
                        continue
                    w.away_until = 0
                    w.member_id, w.epoch = ("", 0) if not w.instance_id else (w.member_id, 0)
                    self.heartbeat(g, w, epoch=0)
                    continue
                if not settled or self.now - w.last_hb >= STABLE_HEARTBEAT_MS:
                    self.heartbeat(g, w)

    def run(self, events: int) -> None:
        while self.events < events:
            self.step()
        self.flush()


EVENT_COLUMNS = "group_id, time_ms, event, member_id, group_epoch, assignment_epoch, member_epoch, details"


def _shard(database: str, groups: int, seed: int, events: int, index: int, count: int) -> int:
    with Storage(database) as storage:
        gen = Generator(storage, groups, seed, shard=(index, count))
        gen.run(events)
    return gen.events


def generate_parallel(database: str, events: int, groups: int, seed: int, processes: int) -> int:
    """P processes, one SQLite shard each, merged into `database` (SQLite) in time order."""
    target = make_url(database)
    if target.get_backend_name() != "sqlite" or not target.database:
        raise SystemExit("--processes above 1 needs a SQLite --database (sqlite:///path)")
    with tempfile.TemporaryDirectory(prefix="generate-", dir=Path(target.database).resolve().parent) as work:
        shards = [f"sqlite:///{Path(work) / f'shard{i}.db'}" for i in range(processes)]
        per_shard = -(-events // processes)
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            counts = pool.starmap(
                _shard, [(url, groups, seed, per_shard, i, processes) for i, url in enumerate(shards)]
            )
        with Storage(database):
            pass  # the target, migrated
        with sqlite3.connect(target.database) as conn:
            for i, url in enumerate(shards):
                conn.execute(f"ATTACH DATABASE ? AS s{i}", (make_url(url).database,))
            union = " UNION ALL ".join(
                f"SELECT {i} AS shard, id AS shard_id, {EVENT_COLUMNS} FROM s{i}.rebalance_events"
                for i in range(processes)
            )
            conn.execute(
                f"INSERT INTO rebalance_events ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS} FROM ({union}) "
                "ORDER BY time_ms, shard, shard_id"
            )
    return sum(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.rebalance_metrics.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--database", required=True, help="SQLAlchemy URL (sqlite:///file.db or postgresql+psycopg2://...)")
    ap.add_argument("--events", type=int, default=100_000, help="stop once at least this many events are written")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--processes", type=int, default=1, help="split the groups over this many processes (SQLite)")
    args = ap.parse_args(argv)
    if args.processes < 1 or args.groups < args.processes:
        ap.error("--processes: between 1 and --groups")
    started = time.monotonic()
    if args.processes > 1:
        n = generate_parallel(args.database, args.events, args.groups, args.seed, args.processes)
    else:
        with Storage(args.database) as storage:
            gen = Generator(storage, args.groups, args.seed)
            gen.run(args.events)
        n = gen.events
    took = time.monotonic() - started
    print(
        f"generated {n} events for {args.groups} groups in {args.processes} process(es) "
        f"in {took:.1f} s ({n / took:.0f} events/s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
