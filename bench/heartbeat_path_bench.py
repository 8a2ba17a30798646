"""Where a steady-state heartbeat's server time goes: the core's handler warm, cold and served.

`bench/heartbeat_bench.py` compares the coordinator's CPU per heartbeat with a bare gRPC echo
server. This bench looks inside the difference. It builds the same group (1,000 members of one
group, all Stable, SQLite) in this process, through the servicers, and measures the time of
`GroupCoordinator.steady_heartbeat` (the core's handler for a steady member, which the servicer's
hot path calls: the checks that prove nothing else is due, the session, the response) per call:

* warm: heartbeats round-robin in a tight loop (the caches hold the path and the group);
* cold: the same, with a 32 MB sweep of memory before each call (nothing of the path cached);
* served: the same runtime served over gRPC (this process pinned to core 0), heartbeats sent by a
  load-generator subprocess on core 1 as `heartbeat_bench.py` sends them (8 in flight); the
  handler's own time is measured inside the server, between grpc's work.

It also gives the whole servicer path warm (routing, metrics, the runtime's machine, the handler).

    .venv/bin/python bench/heartbeat_path_bench.py [--members 1000] [--seconds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))
sys.path.insert(0, str(REPO / "bench"))

import heartbeat_bench  # noqa: E402

from connect.coordinator.v1 import admin_pb2, coordinator_pb2  # noqa: E402
from services.coordinator.cli.coordinator import load_server_config  # noqa: E402
from services.coordinator.core.coordinator import GroupCoordinator  # noqa: E402
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime  # noqa: E402
from services.coordinator.runtime.server import AdminServicer, CoordinatorServicer, start_server  # noqa: E402
from services.storage.repository import Storage  # noqa: E402

GROUP = "bench"  # the group heartbeat_bench.join_request and round_robin_install name
SWEEP_BYTES = 32 * 1024 * 1024

LOAD = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1] + "/bench")
import heartbeat_bench as hb
address, seconds = sys.argv[2], float(sys.argv[3])
members = [tuple(m) for m in json.load(sys.stdin)]
asyncio.run(hb.load(address, members, 8, 1.0))  # warm-up
n, _ = asyncio.run(hb.load(address, members, 8, seconds))
print(n)
"""


async def build_group(cs: CoordinatorServicer, ad: AdminServicer, members: int) -> list[Any]:
    """`members` workers joined, a target installed (tasks round-robin), every member Stable; the
    steady-state request of each member."""
    for i in range(max(1, members // 10)):
        put = admin_pb2.PutConnectorRequest(group_id=GROUP, connector=f"c{i}", task_count=10)
        assert (await ad.PutConnector(put, None)).error_code == 0
    ids: list[str] = []
    epochs: dict[str, int] = {}
    for i in range(members):
        r = await cs.ConnectGroupHeartbeat(heartbeat_bench.join_request(f"w{i}"), None)
        ids.append(r.member_id)
        epochs[r.member_id] = r.member_epoch
    chooser = ids[0]
    hb = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=chooser, member_epoch=epochs[chooser])
    epoch = (await cs.ConnectGroupHeartbeat(hb, None)).member_epoch
    prep = await cs.ConnectGroupPrepareAssignment(
        coordinator_pb2.ConnectGroupPrepareAssignmentRequest(group_id=GROUP, member_id=chooser, member_epoch=epoch),
        None,
    )
    install = heartbeat_bench.round_robin_install(prep, ids, epoch)
    assert (await cs.ConnectGroupInstallAssignment(install, None)).error_code == 0
    steady = []
    for m in ids:
        hb = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=m, member_epoch=epochs[m])
        r = await cs.ConnectGroupHeartbeat(hb, None)
        assert r.error_code == 0, r
        steady.append(
            coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=m, member_epoch=r.member_epoch)
        )
    return steady


async def in_process_runtime(tmp: str) -> tuple[CoordinatorRuntime, CoordinatorServicer, AdminServicer]:
    """A coordinator runtime on SQLite under ``tmp``, started in this process (sessions of 60 s,
    heartbeats every 5 s), with its two servicers called directly."""
    storage = Storage(f"sqlite:///{tmp}/bench.db")
    storage.open()
    config = load_server_config(
        None, ["group.connect.session.timeout.ms=60000", "group.connect.heartbeat.interval.ms=5000"]
    )
    runtime = CoordinatorRuntime(GroupCoordinator(config), storage)
    await runtime.start("127.0.0.1:1")
    return runtime, CoordinatorServicer(runtime), AdminServicer(runtime)


def per_call_us(
    call: Callable[[Any], Any], requests: list[Any], calls: int, between: Callable[[], None] | None
) -> float:
    total = 0
    for i in range(calls):
        if between is not None:
            between()
        started = time.perf_counter_ns()
        call(requests[i % len(requests)])
        total += time.perf_counter_ns() - started
    return total / calls / 1000


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    gc.set_threshold(20_000, 50, 100)  # as `connect-coordinator serve`
    with tempfile.TemporaryDirectory() as tmp:
        runtime, cs, ad = await in_process_runtime(tmp)
        requests = await build_group(cs, ad, args.members)
        await runtime.barrier()
        gc.collect()
        gc.freeze()
        core = runtime.coordinator

        def handler(request: Any) -> Any:
            return core.steady_heartbeat(request, runtime.clock())

        memory = bytearray(SWEEP_BYTES)
        stride = b"x" * (SWEEP_BYTES // 64)

        def sweep() -> None:
            memory[::64] = stride

        warm = per_call_us(handler, requests, 20_000, None)
        cold = per_call_us(handler, requests, 2_000, sweep)
        started = time.perf_counter()
        for i in range(20_000):
            await cs.ConnectGroupHeartbeat(requests[i % len(requests)], None)
        servicer = (time.perf_counter() - started) / 20_000 * 1e6

        # Served: the handler timed inside the server while a subprocess sends the heartbeats.
        timed = [0, 0]
        original = core.steady_heartbeat

        def timed_heartbeat(request: Any, now_ms: int) -> Any:
            started_ns = time.perf_counter_ns()
            try:
                return original(request, now_ms)
            finally:
                timed[0] += time.perf_counter_ns() - started_ns
                timed[1] += 1

        core.steady_heartbeat = timed_heartbeat  # type: ignore[method-assign,assignment]
        running = await start_server(runtime, "127.0.0.1:0", None)
        load = await asyncio.create_subprocess_exec(
            "taskset",
            "-c",
            "1",
            sys.executable,
            "-c",
            LOAD,
            str(REPO),
            f"127.0.0.1:{running.port}",
            str(args.seconds),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'proto'}"},
        )
        members = json.dumps([(r.member_id, r.member_epoch) for r in requests]).encode()
        out, _ = await load.communicate(members)
        sent = int(out.decode().split()[-1])
        served = timed[0] / timed[1] / 1000
        await running.stop()
        await runtime.stop()

    print(f"Steady-state heartbeat, {args.members} members of one group (SQLite), per call:\n")
    print("| measured | µs per heartbeat |")
    print("|---|---:|")
    print(f"| core handler, warm (tight loop) | {warm:.1f} |")
    print(f"| core handler, cold (32 MB swept before each call) | {cold:.1f} |")
    print(f"| core handler, served over gRPC ({sent:,} heartbeats from another process) | {served:.1f} |")
    print(f"| whole servicer path, warm (routing, runtime, metrics, handler) | {servicer:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
