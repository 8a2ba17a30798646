"""Scale-out of coordinator replicas (SPEC §10): heartbeat server CPU per request with one replica
and with two (groups spread over them by partition), in the same run, over a throwaway PostgreSQL.

Every member of every group is Stable and heartbeats with no change (the steady state), round-robin,
each request sent to its group's owner (found with FindCoordinator). CPU time is read from /proc,
so the ratio holds even when the load generator is the bottleneck. Replica i runs on core i % 2 (the machine has two), the load
generator wherever the OS puts it. Per-replica capacity = 1 / (CPU seconds per request); the target is
two replicas each within 10 % of the single replica's (scale-out is linear: N replicas carry N x
the workers). The lease cycles (one transaction per replica per renew interval) run throughout.

    .venv/bin/python bench/replica_capacity_bench.py [--groups 8] [--members 125] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "proto"))

from bench._coordinator import start_server  # noqa: E402
from bench.heartbeat_bench import cpu_seconds  # noqa: E402
from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from services.common.items import Items  # noqa: E402
from services.coordinator.runtime.partitions import partition_for  # noqa: E402

PARTITIONS = 24
SETTINGS = [
    f"group.coordinator.partitions={PARTITIONS}",
    "group.connect.session.timeout.ms=60000",
    "group.connect.max.session.timeout.ms=60000",
]


def coordinator(url: str, core: int) -> tuple[object, str, int]:
    cmd = [sys.executable, "-m", "services.coordinator.cli.coordinator", "serve", "--listen", "127.0.0.1:0"]
    cmd += ["--metrics-listen", "", "--database", url, "--log-level", "WARNING"]
    for s in SETTINGS:
        cmd += ["--set", s]
    proc, address = start_server(cmd, "a replica", core=core)
    return proc, address, proc.pid


def wait_owned(address: str, replicas: int) -> dict[int, str]:
    admin = admin_pb2_grpc.ConnectGroupAdminStub(grpc.insecure_channel(address))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = admin.DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=10)
        live = {x.replica_id for x in r.replicas if x.live}
        owners = {p.partition: p.owner_address for p in r.partitions if p.owner_replica_id in live}
        settled = len(set(owners.values())) == replicas and not any(a.endswith(":0") for a in owners.values())
        if len(live) == replicas and len(owners) == PARTITIONS and settled:
            time.sleep(1.0)  # every replica has read the final spread
            if owners == wait_owned_once(admin):
                return owners
        time.sleep(0.1)
    raise RuntimeError("the replicas did not spread the partitions in time")


def wait_owned_once(admin: admin_pb2_grpc.ConnectGroupAdminStub) -> dict[int, str]:
    r = admin.DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=10)
    return {p.partition: p.owner_address for p in r.partitions}


def group_ids(n: int, owners: dict[int, str]) -> dict[str, str]:
    """n groups spread evenly over the owners (group -> owner address)."""
    sides = sorted(set(owners.values()))
    per_side = -(-n // len(sides))
    out: dict[str, str] = {}
    count = dict.fromkeys(sides, 0)
    i = 0
    while len(out) < n:
        gid = f"bench-{i}"
        owner = owners[partition_for(gid, PARTITIONS)]
        if count[owner] < per_side:
            out[gid] = owner
            count[owner] += 1
        i += 1
    return out


def setup(address_of: dict[str, str], members: int) -> list[tuple[str, str, str, int]]:
    """Join every group's members at its owner, install a round-robin assignment, reconcile."""
    out = []
    assignors = common_pb2.ClientAssignors(
        assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
    )
    for gid, address in address_of.items():
        ch = grpc.insecure_channel(address)
        coord = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch)
        admin = admin_pb2_grpc.ConnectGroupAdminStub(ch)
        for c in range(members // 10 or 1):
            assert (
                admin.PutConnector(
                    admin_pb2.PutConnectorRequest(group_id=gid, connector=f"c{c}", task_count=10)
                ).error_code
                == 0
            )
        epochs = {}
        for i in range(members):
            r = coord.ConnectGroupHeartbeat(
                coordinator_pb2.ConnectGroupHeartbeatRequest(
                    group_id=gid,
                    member_id=f"w{i}",
                    member_epoch=0,
                    rebalance_timeout_ms=60_000,
                    client_assignors=assignors,
                    owned=common_pb2.ConnectorsAndTasks(),
                )
            )
            assert r.error_code in (0, 1000), r
            epochs[r.member_id] = r.member_epoch
        ids = sorted(epochs)
        chooser = ids[0]
        r = coord.ConnectGroupHeartbeat(
            coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=gid, member_id=chooser, member_epoch=epochs[chooser])
        )
        prep = coord.ConnectGroupPrepareAssignment(
            coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
                group_id=gid, member_id=chooser, member_epoch=r.member_epoch
            )
        )
        conns: dict[str, list[str]] = {m: [] for m in ids}
        tasks: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
        k = 0
        for spec in prep.connectors:
            conns[ids[k % members]].append(spec.name)
            for t in range(spec.task_count):
                k += 1
                tasks[ids[k % members]].append((spec.name, t))
        install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
            group_id=gid, member_id=chooser, member_epoch=r.member_epoch, group_epoch=prep.group_epoch
        )
        for m in ids:
            Items.of(conns[m], tasks[m]).to_proto(install.members.add(member_id=m).connectors_and_tasks)
        assert coord.ConnectGroupInstallAssignment(install).error_code == 0
        for m in ids:
            r = coord.ConnectGroupHeartbeat(
                coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=gid, member_id=m, member_epoch=epochs[m])
            )
            assert r.error_code in (0, 1000), r
            out.append((address, gid, m, r.member_epoch))
        state = admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[gid])).groups[0].group_state
        assert state == "Stable", (gid, state)
        ch.close()
    return out


async def load(members: list[tuple[str, str, str, int]], in_flight: int, seconds: float) -> dict[str, int]:
    addresses = sorted({a for a, *_ in members})
    channels = {a: grpc.aio.insecure_channel(a) for a in addresses}
    stubs = {a: coordinator_pb2_grpc.ConnectGroupCoordinatorStub(c) for a, c in channels.items()}
    reqs = [
        (a, coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=g, member_id=m, member_epoch=e))
        for a, g, m, e in members
    ]
    counts = dict.fromkeys(addresses, 0)
    stop_at = time.perf_counter() + seconds
    errors = 0

    async def worker(offset: int) -> None:
        nonlocal errors
        i = offset
        while time.perf_counter() < stop_at:
            a, req = reqs[i % len(reqs)]
            resp = await stubs[a].ConnectGroupHeartbeat(req, timeout=10)
            counts[a] += 1
            errors += resp.error_code != 0
            i += in_flight

    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    for c in channels.values():
        await c.close(None)
    if errors:
        raise RuntimeError(f"{errors} heartbeats answered with an error")
    return counts


def phase(server_url: str, n_replicas: int, groups: int, members: int, seconds: float, in_flight: int) -> list[float]:
    from tests.fixtures.postgres import create_test_database

    url = create_test_database(server_url)
    procs = [coordinator(url, i % 2) for i in range(n_replicas)]
    try:
        owners = wait_owned(procs[0][1], n_replicas)
        address_of = group_ids(groups, owners)
        ms = setup(address_of, members)
        asyncio.run(load(ms, in_flight, 1.5))  # warm-up
        pids = {addr: pid for _, addr, pid in procs}
        cpu0 = {a: cpu_seconds(p) for a, p in pids.items()}
        counts = asyncio.run(load(ms, in_flight, seconds))
        per_req = [(cpu_seconds(pids[a]) - cpu0[a]) / counts[a] for a in sorted(pids) if counts.get(a)]
        for a in sorted(pids):
            print(f"  {n_replicas} replica(s): {a} served {counts.get(a, 0)} heartbeats", flush=True)
        return per_req
    finally:
        for proc, _, _ in procs:
            proc.terminate()  # type: ignore[attr-defined]
            proc.wait(15)  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--members", type=int, default=125, help="members per group")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--in-flight", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="alternate one/two replicas this many times")
    args = ap.parse_args()
    from tests.fixtures.postgres import PostgresServer, ensure_installed

    server = PostgresServer(ensure_installed())
    server.start()
    try:
        one: list[float] = []
        two: list[float] = []
        for _ in range(args.rounds):
            one += phase(server.url(), 1, args.groups, args.members, args.seconds, args.in_flight)
            two += phase(server.url(), 2, args.groups, args.members, args.seconds, args.in_flight)
    finally:
        server.stop()
    single = sum(one) / len(one)
    print(f"members: {args.groups} groups x {args.members}; {args.seconds}s per phase, {args.rounds} rounds alternated")
    print(f"one replica:  {single * 1e6:7.1f} us CPU per heartbeat -> {1 / single:8.0f} heartbeats/s per core")
    for i, c in enumerate(two):
        print(
            f"two replicas: replica {i % 2}: {c * 1e6:7.1f} us CPU per heartbeat -> {1 / c:8.0f}/s ({single / c:.2f} of one)"
        )
    ratios = [single / c for c in two]
    mean = sum(ratios) / len(ratios)
    print(f"per-replica capacity with two replicas / single: mean {mean:.2f}, worst {min(ratios):.2f} (target >= 0.90)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
