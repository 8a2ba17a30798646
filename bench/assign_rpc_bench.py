"""The Assign RPC as the coordinator makes it (issue 39): the request its core builds for one join into
a Stable group of 10,000 members running 100,000 tasks, sent the way its runtime sends it, over
loopback gRPC to a `connect-assignor serve` subprocess.

The group is built in this process through the coordinator's core in service mode (the real
incremental cooperative assignor, every member Stable with its target: `memory_bench.fill_group`).
One more member joins; the `ServiceAssignment` the core hands its runtime carries the request, in
the coordinator's shape: the vouched target (``current_target_checked``), task ranges, the answer
allowed to leave out the members whose entry stands (``accept_unchanged_omitted``); the runtime then
sends each member's items once (``send_items_once``, for a service whose ListAssignors says
``reads_items_once``, as `connect-assignor` does). The RPC is made with the runtime's own client
(`AssignorClient`: its channel options and deadline), ``--runs`` times, and timed end to end: the
request serialised, the service's work, the answer read as the runtime reads it (`read_answer`:
split member by member; each member is parsed when the install checks it, not here). Next to it, in this process, where the
time goes: serialising, parsing, ``assign()`` and the answer's bytes.

    .venv/bin/python bench/assign_rpc_bench.py [--members 10000] [--tasks 100000] [--runs 15]
    .venv/bin/python bench/assign_rpc_bench.py --quick      # the CI smoke form (tests/bench/)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))
sys.path.insert(0, str(REPO / "bench"))

from _coordinator import AssignorService  # noqa: E402
from memory_bench import ASSIGNORS, fill_group  # noqa: E402

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2  # noqa: E402
from services import assignor  # noqa: E402
from services.coordinator.core.assignment import send_items_once  # noqa: E402
from services.coordinator.core.config import ServerConfig  # noqa: E402
from services.coordinator.core.coordinator import GroupCoordinator, ServiceAssignment  # noqa: E402
from services.coordinator.runtime.asyncio_runtime import AssignorClient  # noqa: E402

TARGET_MS = 100.0  # issue 13 / 39: the Assign RPC at 10,000 members / 100,000 tasks


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def coordinators_request(members: int, tasks: int) -> tuple[assignor_pb2.AssignRequest, float]:
    """The request the coordinator's runtime sends for one join into a Stable group of ``members``."""
    config = dataclasses.replace(
        ServerConfig(), max_members_per_group=max(members + 1, 10_000), max_tasks_per_group=max(tasks, 100_000)
    )
    core = GroupCoordinator(config, {"incremental-cooperative": (0, 5)})
    t = time.perf_counter()
    fill_group(core, "big", members, 100, tasks // 100)
    built_s = time.perf_counter() - t
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="big", member_id="", member_epoch=0)
    req.rebalance_timeout_ms = 60_000
    req.client_assignors.CopyFrom(ASSIGNORS)
    req.owned.SetInParent()
    jobs = [e for e in core.heartbeat(req, 10).effects if isinstance(e, ServiceAssignment)]
    assert len(jobs) == 1, jobs
    return send_items_once(jobs[0].request), built_s  # as the runtime sends it to connect-assignor


def timings_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def rpc_ms(service: AssignorService, request: assignor_pb2.AssignRequest, runs: int) -> dict[str, Any]:
    """Wall time of each RPC (ms), and the CPU time per RPC of the service and of this caller: what a
    shared machine changes least."""
    client = AssignorClient(service.address)
    assert client.reads_items_once is False
    await client.list_assignors()
    # warm-up: the connection, the first allocation
    response = await client.assign_answer(request.SerializeToString(), 60)
    assert response.error == 0, response.error_message
    out = []
    service_cpu, caller_cpu = service.cpu_s(), time.process_time()
    for _ in range(runs):
        t = time.perf_counter()
        response = await client.assign_answer(request.SerializeToString(), 60)
        out.append((time.perf_counter() - t) * 1000)
        assert response.error == 0
    return {
        "wall_ms": out,
        "service_cpu_ms": (service.cpu_s() - service_cpu) * 1000 / runs,
        "caller_cpu_ms": (time.process_time() - caller_cpu) * 1000 / runs,
    }


def split(request: assignor_pb2.AssignRequest, runs: int) -> dict[str, Any]:
    """Where the time goes, in this process (medians, ms)."""
    wire = request.SerializeToString()
    parsed = assignor_pb2.AssignRequest.FromString(wire)
    response = assignor.assign(parsed)
    answer = response.SerializeToString()
    return {
        "request_mb": len(wire) / 1e6,
        "response_mb": len(answer) / 1e6,
        "members_answered": len(response.members),
        "serialise": statistics.median(timings_ms(request.SerializeToString, runs)),
        "parse": statistics.median(timings_ms(lambda: assignor_pb2.AssignRequest.FromString(wire), runs)),
        "assign": statistics.median(timings_ms(lambda: assignor.assign(parsed), runs)),
        "response_serialise": statistics.median(timings_ms(response.SerializeToString, runs)),
        "response_parse": statistics.median(timings_ms(lambda: assignor_pb2.AssignResponse.FromString(answer), runs)),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="a smoke run: 1,000 members, 10,000 tasks, 3 runs")
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "assign_rpc.json"))
    args = p.parse_args()
    if args.quick:
        args.members, args.tasks, args.runs = 1_000, 10_000, 3
    gc.set_threshold(20_000, 50, 100)  # as `connect-coordinator serve`
    request, built_s = coordinators_request(args.members, args.tasks)
    gc.collect()
    gc.freeze()  # the group's state, as the server keeps what it loaded out of full collections
    shape = {
        "current_target_checked": request.current_target_checked,
        "accept_task_ranges": request.accept_task_ranges,
        "accept_unchanged_omitted": request.accept_unchanged_omitted,
        "items_once": request.items_once,
    }
    assert all(shape.values()), f"not the coordinator's shape: {shape}"
    service = AssignorService()
    try:
        measured = asyncio.run(rpc_ms(service, request, args.runs))
    finally:
        service.stop()
    parts = split(request, max(3, args.runs // 3))
    rpc = measured["wall_ms"]
    result = {"members": args.members + 1, "tasks": args.tasks, "built_s": built_s, "rpc_ms": rpc, **parts}
    result.update(service_cpu_ms=measured["service_cpu_ms"], caller_cpu_ms=measured["caller_cpu_ms"])
    median = statistics.median(rpc)
    met = ("yes" if median <= TARGET_MS else "no") if args.members >= 10_000 else "- (not the target's size)"
    print(
        f"Assign RPC, the coordinator's request for one join into {args.members:,} members / {args.tasks:,} tasks "
        f"(built in {built_s:.0f} s): {', '.join(k for k, v in shape.items() if v)}"
    )
    print("| figure | measured | target | met? |")
    print("|---|---:|---|---|")
    print(
        f"| Assign RPC over loopback gRPC, median / p95 of {len(rpc)} | **{median:.1f}** / {p95(rpc):.1f} ms "
        f"| <= {TARGET_MS:.0f} ms at 10,000 / 100,000 | {met} |"
    )
    print(
        f"| CPU per RPC: the service + the caller (a shared machine changes it least) | "
        f"{measured['service_cpu_ms']:.1f} + {measured['caller_cpu_ms']:.1f} ms | - | - |"
    )
    print(
        f"in process (medians, ms): request {parts['request_mb']:.2f} MB serialised {parts['serialise']:.1f}, "
        f"parsed {parts['parse']:.1f}; assign() {parts['assign']:.1f}; answer ({parts['members_answered']} members, "
        f"{parts['response_mb']:.3f} MB) serialised {parts['response_serialise']:.1f}, parsed {parts['response_parse']:.1f}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
