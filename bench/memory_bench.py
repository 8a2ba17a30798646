"""How much memory the coordinator's state takes: one group of 10,000 members running 100,000 tasks,
and 1,000 groups of 10 members (10 tasks each), every member Stable with its target -- built through
the real core, the real incremental cooperative assignor (service mode) and replay, in one process.
Reports the growth of the process's resident set size (RSS, from /proc) over each build after a full
collection, then after a heap trim (glibc malloc_trim, which the server runs a second after its last
commit: services.common.memory).

    .venv/bin/python bench/memory_bench.py [--members 10000 --tasks 100000] [--groups 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2  # noqa: E402
from services import assignor  # noqa: E402
from services.common.memory import trim_heap  # noqa: E402
from services.coordinator.core.config import ServerConfig  # noqa: E402
from services.coordinator.core.coordinator import GroupCoordinator, ServiceAssignment  # noqa: E402

ASSIGNORS = common_pb2.ClientAssignors(
    assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fill_group(core: GroupCoordinator, gid: str, members: int, connectors: int, tasks_each: int) -> None:
    """Connectors, members joined, one assignment from the assignor, every member reconciled."""
    for c in range(connectors):
        core.put_connector(admin_pb2.PutConnectorRequest(group_id=gid, connector=f"c{c:03d}", task_count=tasks_each), 0)
    jobs: list[ServiceAssignment] = []
    ids = []
    for _ in range(members):
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=gid, member_id="", member_epoch=0)
        req.rebalance_timeout_ms = 60_000
        req.client_assignors.CopyFrom(ASSIGNORS)
        req.owned.SetInParent()
        result = core.heartbeat(req, 1)
        ids.append(result.response.member_id)
        jobs += [e for e in result.effects if isinstance(e, ServiceAssignment)]
    while jobs:  # the first assignment ran at the first join; the last one sees every member
        job = jobs.pop(0)
        done = core.complete_service_assignment(job.group_id, job.group_epoch, assignor.assign(job.request), 2)
        jobs += [e for e in done.effects if isinstance(e, ServiceAssignment)]
    for _ in range(3):  # reconcile: revoke nothing (all start empty), then take the targets
        for mid in ids:
            m = core.state.groups[gid].members[mid]
            req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=gid, member_id=mid, member_epoch=m.member_epoch)
            m.current.assigned.to_proto(req.owned)
            core.heartbeat(req, 3)
    assert core.state.groups[gid].state() == "Stable", core.state.groups[gid].state()


def measure(case: str, args: argparse.Namespace) -> tuple[str, float, float, float, float]:
    """One state, built in this (fresh) process: (what, RSS growth MB, seconds, RSS at the end MB)."""
    config = dataclasses.replace(
        ServerConfig(), max_members_per_group=max(args.members, 10_000), max_tasks_per_group=max(args.tasks, 100_000)
    )
    core = GroupCoordinator(config, {"incremental-cooperative": (0, 5)})
    gc.collect()
    base, started = rss_mb(), time.perf_counter()
    if case == "big":
        what = f"1 group, {args.members:,} members, {args.tasks:,} tasks"
        fill_group(core, "big", args.members, 100, args.tasks // 100)
    else:
        what = f"{args.groups:,} groups x 10 members, 10 tasks each"
        for g in range(args.groups):
            fill_group(core, f"g{g:04d}", 10, 1, 10)
    gc.collect()
    grown, secs = rss_mb() - base, time.perf_counter() - started
    trim_heap()  # what the server does a second after its last commit (services.common.memory)
    return what, grown, rss_mb() - base, secs, rss_mb()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--groups", type=int, default=1_000)
    p.add_argument("--case", choices=["big", "many"], help=argparse.SUPPRESS)  # one case, in a fresh process
    args = p.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args)))
        return 0
    print("| state | RSS growth (MB) | after a heap trim (MB) | built in (s) | process RSS, trimmed (MB) |")
    print("|---|---:|---:|---:|---:|")
    for case in ("big", "many"):
        cmd = [sys.executable, __file__, "--case", case, "--members", str(args.members), "--tasks", str(args.tasks)]
        out = subprocess.run([*cmd, "--groups", str(args.groups)], capture_output=True, text=True, check=True)
        what, mb, trimmed, secs, total = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {what} | {mb:.1f} | {trimmed:.1f} | {secs:.1f} | {total:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
