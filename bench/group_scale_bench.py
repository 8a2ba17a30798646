"""One large group, black box: N members join one group with 100,000 tasks over gRPC, the group is
assigned, every member then takes its target; the coordinator's resident set size (RSS) is read from
/proc at each stage (issue 39's user view: the process, its peak and after convergence).

A real `connect-coordinator serve` subprocess (SQLite). The joins come from ``--clients`` client
processes at once (raw heartbeat requests, ``--in-flight`` in all over a few channels each, not SDK
clients, so the coordinator is what is measured), started together once all are connected.

* ``--mode worker`` (client-side assignment): nothing is assigned until the last join; then the
  executor's Prepare, the local incremental cooperative assignor (in this process) and Install.
* ``--mode service``: a `connect-assignor serve` subprocess, which the coordinator calls itself
  while the joins come in and after the last (one Assign in flight at a time, the latest epoch next).

Then every member heartbeats until it holds its target and DescribeGroups says Stable. Then, with the
coordinator stopped, the same client processes send the same joins to a bare ``grpc.aio`` server of the
same service that parses each request and answers it with its own ids, nothing more: the floor under the
joins' figure on this machine in this run (``--no-floor`` leaves it out). Reports the
time per slice of joins (flat = a join costs the same at 1,000 and 10,000 members), all joins (target
<= 5 s, issue 39) next to that floor, Prepare / compute / Install (worker mode), everyone Stable, and RSS after start,
after the joins, at Stable, the peak (target <= 100 MB, issue 39) and after the heap trim.

    .venv/bin/python bench/group_scale_bench.py [--mode worker|service] [--members 10000] [--tasks 100000]
        [--clients 4] [--in-flight 64] [--no-floor]
    .venv/bin/python bench/group_scale_bench.py --quick     # the CI smoke form (tests/bench/)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This process starts processes while its gRPC channels are open: with grpc's fork support on, a
# child can die before it execs (see tests/conftest.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from connect.coordinator.v1 import (  # noqa: E402
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
)
from connect.coordinator.v1.common_pb2 import ErrorCode  # noqa: E402
from services import assignor  # noqa: E402
from worker_sdk import assign_request  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from _coordinator import (  # noqa: E402
    ECHO_SERVER,
    AssignorService,
    Coordinator,
    main_thread_cpu_s,
    process_cpu_s,
    start_server,
    stop_process,
)

GROUP = "big"
ASSIGNORS = common_pb2.ClientAssignors(
    assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
)
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


JOINS_TARGET_S = 5.0  # issue 39: 10,000 joins over real gRPC
RSS_TARGET_MB = 100.0  # issue 13 / 39: the coordinator process at 10,000 members / 100,000 tasks


def start_coordinator(workdir: Path, service: AssignorService | None) -> Coordinator:
    # Sessions long enough that no member expires while 10,000 join one after the other; no request
    # quota (one bench client host sends every member's requests).
    extra = ["--assignor-address", service.address] if service is not None else []
    return Coordinator(
        workdir,
        (
            "group.connect.max.session.timeout.ms=900000",
            "group.connect.session.timeout.ms=600000",
            "group.connect.heartbeat.interval.ms=15000",
            "group.coordinator.principal.request.rate=0",
        ),
        extra,
    )


def heartbeat(
    member_id: str, epoch: int, sequence: int, owned: Any = None
) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=GROUP, member_id=member_id, member_epoch=epoch)
    req.request_sequence = sequence
    if epoch == 0:
        req.rebalance_timeout_ms = 60_000
        req.client_assignors.CopyFrom(ASSIGNORS)
    if owned is not None:
        req.owned.CopyFrom(owned)
    else:
        req.owned.SetInParent()
    return req


async def join_slice(address: str, first: int, count: int, in_flight: int) -> dict[str, Any]:
    """The joins of members ``first`` .. ``first + count - 1`` (a client process's share), ``in_flight``
    at a time over two channels, once the parent says go (a line on stdin)."""
    channels = [grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) for _ in range(2)]
    for ch in channels:
        await ch.channel_ready()
    stubs = [coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch) for ch in channels]
    # Warm the connections (and the servicer's first call) with a request that changes nothing.
    await stubs[0].ConnectGroupHeartbeat(heartbeat("warm-up", 5, 1), timeout=30)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    ids = [""] * count
    epochs = [0] * count
    done_at = [0.0] * count
    executor: list[int] = []
    nxt = 0

    async def joiner() -> None:
        nonlocal nxt
        while nxt < count:
            i = nxt
            nxt += 1
            r = await stubs[i % len(stubs)].ConnectGroupHeartbeat(heartbeat("", 0, 1), timeout=60)
            assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
            ids[i], epochs[i] = r.member_id, r.member_epoch
            if r.error_code == ErrorCode.COMPUTE_ASSIGNMENT:
                executor.append(first + i)
            done_at[i] = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the host

    await asyncio.gather(*(joiner() for _ in range(in_flight)))
    for ch in channels:
        await ch.close(None)
    return {"first": first, "ids": ids, "epochs": epochs, "done_at": done_at, "executor": executor}


def floor_joins(members: int, clients: int, in_flight: int) -> tuple[float, float]:
    """The same joins from the same client processes to a bare server of the coordinator's service
    (``ECHO_SERVER``) in a process of its own: (seconds from go to the last answer, its CPU seconds)."""
    server, address = start_server([sys.executable, "-c", ECHO_SERVER], "the bare server")
    try:
        cpu0 = process_cpu_s(server.pid)
        t0, joined = join_from_clients(address, members, clients, in_flight)
        return max(joined["done_at"]) - t0, process_cpu_s(server.pid) - cpu0
    finally:
        stop_process(server)


def join_from_clients(address: str, members: int, clients: int, in_flight: int) -> tuple[float, dict[str, Any]]:
    """``clients`` processes join ``members`` members at once; (the monotonic time of go, their results)."""
    procs = []
    share = -(-members // clients)
    for k in range(clients):
        first, count = k * share, min(share, members - k * share)
        cmd = [sys.executable, __file__, "--child", address, "--first", str(first), "--count", str(count)]
        cmd += ["--in-flight", str(max(1, in_flight // clients))]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", f"a join client did not start: {line!r}"
    t0 = time.monotonic()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    merged: dict[str, Any] = {"ids": [""] * members, "epochs": [0] * members, "done_at": [0.0] * members}
    merged["executor"] = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, f"a join client failed ({p.returncode})"
        r = json.loads(out.strip().splitlines()[-1])
        f, n = r["first"], len(r["ids"])
        for key in ("ids", "epochs", "done_at"):
            merged[key][f : f + n] = r[key]
        merged["executor"] += r["executor"]
    return t0, merged


async def run(
    address: str,
    coord: Coordinator,
    args: argparse.Namespace,
) -> dict[str, Any]:
    members, tasks, in_flight, slice_ = args.members, args.tasks, args.in_flight, args.slice
    channels = [grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) for _ in range(4)]
    stubs = [coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch) for ch in channels]
    admin = admin_pb2_grpc.ConnectGroupAdminStub(channels[0])
    out: dict[str, Any] = {"members": members, "tasks": tasks, "mode": args.mode, "clients": args.clients}
    out["rss_start_mb"] = coord.rss_mb()
    connectors = 100
    for c in range(connectors):
        r = await admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=GROUP, connector=f"c{c:03d}", task_count=tasks // connectors),
            timeout=30,
        )
        assert r.error_code == 0, r.error_message

    cpu0, main0 = coord.cpu_s(), main_thread_cpu_s(coord.proc.pid)
    loop = asyncio.get_running_loop()
    t0, joined = await loop.run_in_executor(None, join_from_clients, address, members, args.clients, in_flight)
    ids, epochs, done_at, executor = joined["ids"], joined["epochs"], joined["done_at"], joined["executor"]
    ends = sorted(done_at)
    joined_s = ends[-1] - t0
    slices = []
    prev = t0
    for k in range(slice_, members + 1, slice_):
        end = ends[k - 1]
        slices.append({"members": k, "ms_per_join": (end - prev) * 1000 / slice_})
        prev = end
    out.update(joins_s=joined_s, joins_cpu_s=coord.cpu_s() - cpu0, slices=slices, rss_after_joins_mb=coord.rss_mb())
    # The event loop's thread (the process's first), apart from the storage writer's and gRPC's threads.
    out["joins_main_thread_cpu_s"] = main_thread_cpu_s(coord.proc.pid) - main0

    if args.mode == "worker":
        # The assignment, once: the executor the coordinator chose (the first joiner) computes it.
        assert executor, "no member was asked to compute the assignment"
        ex = min(executor, key=lambda i: done_at[i])
        stub = stubs[0]
        t = time.monotonic()
        prepared = await stub.ConnectGroupPrepareAssignment(
            coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
                group_id=GROUP, member_id=ids[ex], member_epoch=epochs[ex]
            ),
            timeout=120,
        )
        assert prepared.error_code == ErrorCode.NONE, prepared
        prepare_s = time.monotonic() - t
        out.update(rss_after_prepare_mb=coord.rss_mb(), rss_peak_after_prepare_mb=coord.peak_rss_mb())
        t = time.monotonic()
        result = assignor.assign(assign_request(GROUP, prepared))
        compute_s = time.monotonic() - t
        assert result.error == 0, result.error_message
        install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id=GROUP, member_id=ids[ex], member_epoch=epochs[ex], group_epoch=prepared.group_epoch
        )
        install.members.extend(result.members)
        install.assignor_state = result.assignor_state
        install.unchanged_omitted = result.unchanged_omitted
        t = time.monotonic()
        installed = await stub.ConnectGroupInstallAssignment(install, timeout=120)
        install_s = time.monotonic() - t
        assert installed.error_code == ErrorCode.NONE, installed
        out.update(rss_after_install_mb=coord.rss_mb(), rss_peak_after_install_mb=coord.peak_rss_mb())
        out.update(
            prepare_s=prepare_s, compute_s=compute_s, install_s=install_s, install_request_mb=install.ByteSize() / 1e6
        )
    else:
        assert not executor, "service mode: no member computes"

    # Every member heartbeats until it holds its target (nothing to revoke: all started empty). In
    # service mode a pass may come before the service's last answer is installed: another pass then.
    got = [0] * members
    sequence = [1] * members
    t = time.monotonic()
    passes = 0
    while True:
        passes += 1
        nxt = 0

        async def reconciler() -> None:
            nonlocal nxt
            while nxt < members:
                i = nxt
                nxt += 1
                sequence[i] += 1
                req = heartbeat(ids[i], epochs[i], sequence[i])
                r = await stubs[i % len(stubs)].ConnectGroupHeartbeat(req, timeout=60)
                assert r.error_code == ErrorCode.NONE, r
                epochs[i] = r.member_epoch
                if r.HasField("assignment"):
                    a = r.assignment.assigned
                    got[i] = len(a.connectors) + len(a.tasks) + sum(a.task_range_counts)

        await asyncio.gather(*(reconciler() for _ in range(in_flight)))
        if sum(got) == tasks + connectors and len(set(epochs)) == 1:
            out.update(rss_reconciled_mb=coord.rss_mb(), rss_peak_reconciled_mb=coord.peak_rss_mb())
            d = await admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=120)
            if d.groups[0].group_state == "Stable" and d.groups[0].group_epoch == epochs[0]:
                break
        assert passes < 50, f"not Stable after {passes} passes"
        await asyncio.sleep(0.2)
    out["reconcile_s"] = time.monotonic() - t
    out["reconcile_passes"] = passes
    out.update(rss_stable_mb=coord.rss_mb(), rss_peak_mb=coord.peak_rss_mb(), total_s=time.monotonic() - t0)
    out["rss_anon_stable_mb"] = coord.anon_rss_mb()
    await asyncio.sleep(REST_S)  # the coordinator returns freed heap pages a second after its last commit
    out["rss_rest_mb"], out["rss_anon_rest_mb"] = coord.rss_mb(), coord.anon_rss_mb()
    for ch in channels:
        await ch.close(None)
    return out


REST_S = 3.0


def met(ok: bool, full_size: bool) -> str:
    """Whether a target is met; the targets are for 10,000 members / 100,000 tasks only."""
    return ("yes" if ok else "no") if full_size else "- (not the target's size)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("worker", "service"), default="worker", help="who computes the assignment")
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--clients", type=int, default=4, help="client processes sending the joins")
    p.add_argument("--in-flight", type=int, default=64, help="joins in flight, over all the clients")
    p.add_argument("--slice", type=int, default=1_000)
    p.add_argument("--no-floor", action="store_true", help="leave out the same joins to a bare gRPC server (the floor)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1,000 members, 10,000 tasks, 2 clients")
    p.add_argument("--out", default=None, help="JSON results (default bench/out/group_scale-MODE.json)")
    p.add_argument("--child", metavar="ADDRESS", help=argparse.SUPPRESS)  # a join client process
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(join_slice(args.child, args.first, args.count, args.in_flight))))
        return 0
    if args.quick:
        args.members, args.tasks, args.clients, args.slice = 1_000, 10_000, 2, 250
    if args.members % args.slice:
        p.error(f"--members ({args.members}) must be a multiple of --slice ({args.slice})")
    with tempfile.TemporaryDirectory(prefix="group-scale-") as tmp:
        service = AssignorService() if args.mode == "service" else None
        try:
            coord = start_coordinator(Path(tmp), service)
            try:
                r = asyncio.run(run(coord.address, coord, args))
            finally:
                coord.stop()
        finally:
            if service is not None:
                service.stop()
    if not args.no_floor:  # after the coordinator has stopped: nothing else runs beside it
        r["floor_joins_s"], r["floor_cpu_s"] = floor_joins(args.members, args.clients, args.in_flight)
    print(
        f"{r['members']:,} members join one group with {r['tasks']:,} tasks ({args.mode} mode; "
        f"{args.clients} client processes, {args.in_flight} joins in flight):"
    )
    print("| members | ms per join (this slice) |")
    print("|---:|---:|")
    for s in r["slices"]:
        print(f"| {s['members']:,} | {s['ms_per_join']:.2f} |")
    if args.mode == "worker":
        print(
            f"Prepare {r['prepare_s'] * 1000:.0f} ms, assignor {r['compute_s'] * 1000:.0f} ms, "
            f"Install {r['install_s'] * 1000:.0f} ms ({r['install_request_mb']:.1f} MB)"
        )
    print(
        f"every member took its target in {r['reconcile_s']:.1f} s ({r['reconcile_passes']} passes); "
        f"in all {r['total_s']:.1f} s"
    )
    full = r["members"] >= 10_000 and r["tasks"] >= 100_000
    print("| figure | measured | target | met? |")
    print("|---|---:|---|---|")
    print(
        f"| all {r['members']:,} joins, over gRPC | **{r['joins_s']:.2f} s** (coordinator CPU {r['joins_cpu_s']:.1f} s, "
        f"{r['joins_main_thread_cpu_s']:.1f} s of it the event loop's thread) "
        f"| <= {JOINS_TARGET_S:.0f} s at 10,000 | {met(r['joins_s'] <= JOINS_TARGET_S, r['members'] >= 10_000)} |"
    )
    if "floor_joins_s" in r:
        print(
            f"| the same joins to a bare gRPC server of the same service (the floor: parse, echo the ids) "
            f"| **{r['floor_joins_s']:.2f} s** (server CPU {r['floor_cpu_s']:.1f} s); the coordinator "
            f"{r['joins_s'] / r['floor_joins_s']:.2f}x | - | - |"
        )
    print(
        f"| coordinator RSS, peak | **{r['rss_peak_mb']:.0f} MB** | <= {RSS_TARGET_MB:.0f} MB at 10,000 / 100,000 "
        f"| {met(r['rss_peak_mb'] <= RSS_TARGET_MB, full)} |"
    )
    print(
        f"| coordinator RSS, peak before the DescribeGroups that confirms Stable | **{r['rss_peak_reconciled_mb']:.0f} MB** "
        f"| <= {RSS_TARGET_MB:.0f} MB | {met(r['rss_peak_reconciled_mb'] <= RSS_TARGET_MB, full)} |"
    )
    print(
        f"| coordinator RSS, at Stable / {REST_S:.0f} s later | **{r['rss_stable_mb']:.0f} / {r['rss_rest_mb']:.0f} MB** "
        f"| <= {RSS_TARGET_MB:.0f} MB | {met(max(r['rss_stable_mb'], r['rss_rest_mb']) <= RSS_TARGET_MB, full)} |"
    )
    steps = f"RSS {r['rss_start_mb']:.0f} MB at start, {r['rss_after_joins_mb']:.0f} MB after the joins"
    if args.mode == "worker":
        steps += (
            f", {r['rss_after_prepare_mb']:.0f} MB after Prepare (peak so far {r['rss_peak_after_prepare_mb']:.0f}), "
            f"{r['rss_after_install_mb']:.0f} MB after Install (peak so far {r['rss_peak_after_install_mb']:.0f})"
        )
    steps += (
        f", {r['rss_reconciled_mb']:.0f} MB once every member holds its target (peak so far "
        f"{r['rss_peak_reconciled_mb']:.0f}), before the DescribeGroups that confirms Stable"
    )
    steps += (
        f"; of the RSS at Stable / {REST_S:.0f} s later, {r['rss_anon_stable_mb']:.0f} / {r['rss_anon_rest_mb']:.0f} MB "
        "is the process's own (RssAnon), the rest mapped files"
    )
    print(f"({steps})")
    out = Path(args.out or REPO / "bench" / "out" / f"group_scale-{args.mode}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
