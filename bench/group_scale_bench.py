"""One large group, black box: N members join one group with 100,000 tasks over gRPC, the assignment
is computed once at the end (client-side mode: the executor's Prepare, the local incremental
cooperative assignor, Install), every member then takes its target; the coordinator's resident set
size (RSS) is read from /proc at each stage.

A real `connect-coordinator serve` subprocess (SQLite, client-side mode); the members are raw
heartbeat requests from this process (many in flight over a few channels), not SDK clients, so the
coordinator is what is measured. Reports: the time per slice of joins (flat = a join costs the same
at 1,000 and 10,000 members), all joins, Prepare / compute / Install, everyone Stable, and RSS
(after start, after the joins, once Stable, and the peak).

    .venv/bin/python bench/group_scale_bench.py [--members 10000] [--tasks 100000] [--in-flight 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from _coordinator import Coordinator  # noqa: E402

GROUP = "big"
ASSIGNORS = common_pb2.ClientAssignors(
    assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
)
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def start_coordinator(workdir: Path) -> Coordinator:
    # Sessions long enough that no member expires while 10,000 join one after the other.
    return Coordinator(
        workdir,
        (
            "group.connect.max.session.timeout.ms=900000",
            "group.connect.session.timeout.ms=600000",
            "group.connect.heartbeat.interval.ms=15000",
        ),
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


async def run(
    address: str, coord: Coordinator, members: int, tasks: int, in_flight: int, slice_: int
) -> dict[str, Any]:
    channels = [grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) for _ in range(4)]
    stubs = [coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch) for ch in channels]
    admin = admin_pb2_grpc.ConnectGroupAdminStub(channels[0])
    out: dict[str, Any] = {"members": members, "tasks": tasks, "rss_start_mb": coord.rss_mb()}
    connectors = 100
    for c in range(connectors):
        r = await admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id=GROUP, connector=f"c{c:03d}", task_count=tasks // connectors),
            timeout=30,
        )
        assert r.error_code == 0, r.error_message

    ids: list[str] = [""] * members
    epochs: list[int] = [0] * members
    executor: list[int] = []
    done_at: list[float] = [0.0] * members
    next_index = 0

    async def joiner() -> None:
        nonlocal next_index
        while next_index < members:
            i = next_index
            next_index += 1
            r = await stubs[i % len(stubs)].ConnectGroupHeartbeat(heartbeat("", 0, 1), timeout=60)
            assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
            ids[i], epochs[i] = r.member_id, r.member_epoch
            if r.error_code == ErrorCode.COMPUTE_ASSIGNMENT:
                executor.append(i)
            done_at[i] = time.monotonic()

    t0 = time.monotonic()
    await asyncio.gather(*(joiner() for _ in range(in_flight)))
    joined_s = time.monotonic() - t0
    ends = sorted(done_at)
    slices = []
    prev = t0
    for k in range(slice_, members + 1, slice_):
        end = ends[k - 1]
        slices.append({"members": k, "ms_per_join": (end - prev) * 1000 / slice_})
        prev = end
    out.update(joins_s=joined_s, slices=slices, rss_after_joins_mb=coord.rss_mb())

    # The assignment, once: the executor the coordinator chose (the first joiner) computes it.
    assert executor, "no member was asked to compute the assignment"
    ex = executor[0]
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
    t = time.monotonic()
    result = assignor.assign(assign_request(GROUP, prepared))
    compute_s = time.monotonic() - t
    assert result.error == 0, result.error_message
    install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=GROUP, member_id=ids[ex], member_epoch=epochs[ex], group_epoch=prepared.group_epoch
    )
    install.members.extend(result.members)
    install.assignor_state = result.assignor_state
    t = time.monotonic()
    installed = await stub.ConnectGroupInstallAssignment(install, timeout=120)
    install_s = time.monotonic() - t
    assert installed.error_code == ErrorCode.NONE, installed
    out.update(
        prepare_s=prepare_s, compute_s=compute_s, install_s=install_s, install_request_mb=install.ByteSize() / 1e6
    )

    # Every member takes its target (nothing to revoke: all started empty).
    next_index = 0
    got = [0] * members

    async def reconciler() -> None:
        nonlocal next_index
        while next_index < members:
            i = next_index
            next_index += 1
            r = await stubs[i % len(stubs)].ConnectGroupHeartbeat(heartbeat(ids[i], epochs[i], 2), timeout=60)
            assert r.error_code == ErrorCode.NONE, r
            epochs[i] = r.member_epoch
            a = r.assignment.assigned
            got[i] = len(a.connectors) + len(a.tasks) + sum(a.task_range_counts)

    t = time.monotonic()
    await asyncio.gather(*(reconciler() for _ in range(in_flight)))
    out["reconcile_s"] = time.monotonic() - t
    d = await admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[GROUP]), timeout=120)
    state = d.groups[0].group_state
    assert state == "Stable", state
    assert sum(got) == tasks + connectors, (sum(got), tasks + connectors)
    out.update(rss_stable_mb=coord.rss_mb(), rss_peak_mb=coord.peak_rss_mb(), total_s=time.monotonic() - t0)
    await asyncio.sleep(REST_S)  # the coordinator returns freed heap pages a second after its last commit
    out["rss_rest_mb"] = coord.rss_mb()
    for ch in channels:
        await ch.close(None)
    return out


REST_S = 3.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=10_000)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--slice", type=int, default=1_000)
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "group_scale.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="group-scale-") as tmp:
        coord = start_coordinator(Path(tmp))
        try:
            r = asyncio.run(run(coord.address, coord, args.members, args.tasks, args.in_flight, args.slice))
        finally:
            coord.stop()
    print(f"{r['members']:,} members join one group with {r['tasks']:,} tasks ({args.in_flight} joins in flight):")
    print("| members | ms per join (this slice) |")
    print("|---:|---:|")
    for s in r["slices"]:
        print(f"| {s['members']:,} | {s['ms_per_join']:.2f} |")
    print(
        f"all joins {r['joins_s']:.1f} s; Prepare {r['prepare_s'] * 1000:.0f} ms, assignor {r['compute_s'] * 1000:.0f} ms, "
        f"Install {r['install_s'] * 1000:.0f} ms ({r['install_request_mb']:.1f} MB); every member took its target in "
        f"{r['reconcile_s']:.1f} s; in all {r['total_s']:.1f} s"
    )
    print(
        f"coordinator RSS: {r['rss_start_mb']:.0f} MB at start, {r['rss_after_joins_mb']:.0f} MB after the joins, "
        f"{r['rss_stable_mb']:.0f} MB Stable, peak {r['rss_peak_mb']:.0f} MB, {r['rss_rest_mb']:.0f} MB {REST_S:.0f} s later"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
