"""Steady-state heartbeat throughput: the coordinator vs a bare gRPC echo server, in the same run.

1,000 members of one group (SQLite), all Stable, heartbeat with no changes, round-robin, at 8 and
64 requests in flight. The echo server implements the same RPC with the same message types and a
response of the same size, so the difference is the coordinator's own work. Each server runs in its
own process, pinned to one core; the load generator runs on the other core.

Two ratios are reported: throughput (requests/s, coordinator / echo) and server CPU time per request
(echo / coordinator) -- the latter is the capacity ratio even when the load generator, not the
server, is the bottleneck. Target: >= 0.75.

With --tls, a third server joins the same run: the coordinator over mTLS (certificates made for the
run) with an ACL file (the load's principal is an ordinary user with `Read` on the group, so every
heartbeat is authorized), compared with the plaintext coordinator: the cost of TLS and
authorization. Target: >= 0.8 of plaintext capacity.

With --threads, each server's CPU per request is also split by thread (from /proc/PID/task): the
event loop's thread (user and system time) and all the others (gRPC's pollers and event engine,
the lease cycle) -- where a difference between the two servers is spent.

Each point is measured in --rounds rounds (default 3), the servers taking turns, and the round with
the median CPU per request is reported for each server, with every round's ratio next to it.

    .venv/bin/python bench/heartbeat_bench.py [--members 1000] [--seconds 8] [--rounds 3] [--tls] [--threads]
"""

from __future__ import annotations

import argparse
import asyncio
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
sys.path.insert(0, str(REPO / "proto"))

from bench._coordinator import ECHO_SERVER, start_server  # noqa: E402
from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc  # noqa: E402
from services.common.items import Items  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """User and system CPU seconds of each thread of ``pid`` (the main thread's id is ``pid``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return out


def thread_split(pid: int, before: dict[int, tuple[float, float]], n: int) -> dict[str, float]:
    """µs per request: the main (event loop) thread's user and system time, and every other thread's."""
    after = thread_cpu(pid)
    main_user = (after[pid][0] - before.get(pid, (0.0, 0.0))[0]) / n * 1e6
    main_sys = (after[pid][1] - before.get(pid, (0.0, 0.0))[1]) / n * 1e6
    others = sum(sum(v) - sum(before.get(t, (0.0, 0.0))) for t, v in after.items() if t != pid) / n * 1e6
    return {"main_user_us": main_user, "main_sys_us": main_sys, "other_threads_us": others}


def setup_group(address: str, members: int, creds: grpc.ChannelCredentials | None = None) -> list[tuple[str, int]]:
    """Join `members` workers, compute an assignment (tasks spread over them) and reconcile all."""
    channel = grpc.secure_channel(address, creds) if creds else grpc.insecure_channel(address)
    coord = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel)
    admin = admin_pb2_grpc.ConnectGroupAdminStub(channel)
    tasks_per_connector, connectors = 10, members // 10 or 1
    for i in range(connectors):
        admin.PutConnector(
            admin_pb2.PutConnectorRequest(group_id="bench", connector=f"c{i}", task_count=tasks_per_connector)
        )
    ids: list[str] = []
    epochs: dict[str, int] = {}
    for i in range(members):
        r = coord.ConnectGroupHeartbeat(join_request(f"w{i}"))
        ids.append(r.member_id)
        epochs[r.member_id] = r.member_epoch
    # The first member computes: connector i and its tasks round-robin.
    chooser = ids[0]
    r = coord.ConnectGroupHeartbeat(
        coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="bench", member_id=chooser, member_epoch=epochs[chooser])
    )
    prep = coord.ConnectGroupPrepareAssignment(
        coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
            group_id="bench", member_id=chooser, member_epoch=r.member_epoch
        )
    )
    resp = coord.ConnectGroupInstallAssignment(round_robin_install(prep, ids, r.member_epoch))
    assert resp.error_code == 0, resp
    out = []
    for m in ids:
        r = coord.ConnectGroupHeartbeat(
            coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="bench", member_id=m, member_epoch=epochs[m])
        )
        assert r.error_code in (0, 1000), r
        out.append((m, r.member_epoch))
    g = admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["bench"])).groups[0]
    assert g.group_state == "Stable", g.group_state
    channel.close()
    return out


def join_request(member_id: str) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    """A worker joining the bench group (client-side incremental cooperative assignor)."""
    assignors = common_pb2.ClientAssignors(
        assignors=[common_pb2.Assignor(name="incremental-cooperative", minimum_version=1, maximum_version=2, version=2)]
    )
    return coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="bench",
        member_epoch=0,
        member_id=member_id,
        rebalance_timeout_ms=60_000,
        client_assignors=assignors,
        owned=common_pb2.ConnectorsAndTasks(),
    )


def round_robin_install(
    prep: coordinator_pb2.ConnectGroupPrepareAssignmentResponse, ids: list[str], epoch: int
) -> coordinator_pb2.ConnectGroupInstallAssignmentRequest:
    """The install `ids[0]` (at `epoch`) sends: each connector, then its tasks, dealt round-robin over `ids`."""
    targets: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
    conns: dict[str, list[str]] = {m: [] for m in ids}
    k = 0
    for spec in prep.connectors:
        conns[ids[k % len(ids)]].append(spec.name)
        k += 1
        for t in range(spec.task_count):
            targets[ids[k % len(ids)]].append((spec.name, t))
            k += 1
    install = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id="bench", member_id=ids[0], member_epoch=epoch, group_epoch=prep.group_epoch
    )
    for m in ids:
        Items.of(conns[m], targets[m]).to_proto(install.members.add(member_id=m).connectors_and_tasks)
    return install


async def load(
    address: str,
    members: list[tuple[str, int]],
    in_flight: int,
    seconds: float,
    creds: grpc.ChannelCredentials | None = None,
) -> tuple[int, list[float]]:
    channel = grpc.aio.secure_channel(address, creds) if creds else grpc.aio.insecure_channel(address)
    stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel)
    requests = [
        coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="bench", member_id=m, member_epoch=e) for m, e in members
    ]
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds
    errors = 0

    async def worker(offset: int) -> None:
        nonlocal errors
        i = offset
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            resp = await stub.ConnectGroupHeartbeat(requests[i % len(requests)], timeout=10)
            latencies.append(time.perf_counter() - t0)
            if resp.error_code not in (0,):
                errors += 1
            i += in_flight

    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    await channel.close(None)
    if errors:
        raise RuntimeError(f"{errors} heartbeats answered with an error")
    return len(latencies), latencies


def measure(
    name: str,
    pid: int,
    address: str,
    members: list[tuple[str, int]],
    in_flight: int,
    seconds: float,
    creds: grpc.ChannelCredentials | None = None,
) -> dict[str, float]:
    asyncio.run(load(address, members, in_flight, 1.0, creds))  # warm-up
    threads0 = thread_cpu(pid)
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    n, lat = asyncio.run(load(address, members, in_flight, seconds, creds))
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    lat.sort()
    return {
        "rps": n / elapsed,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
        "cpu_us_per_req": cpu / n * 1e6,
        **thread_split(pid, threads0, n),
    }


Point = dict[str, float]


def measure_points(
    args: argparse.Namespace,
    echo: tuple[int, str],
    coord: tuple[int, str],
    members: list[tuple[str, int]],
    secure: tuple[int, str] | None,
    secure_members: list[tuple[str, int]],
    creds: grpc.ChannelCredentials | None,
) -> tuple[list[tuple[int, Point, Point]], list[tuple[int, Point, Point]], dict[int, list[float]]]:
    """Each point (8 and 64 in flight): the servers take turns, `args.rounds` times, so that a drift
    of the machine over the run (another process, the host's clock speed) falls on all of them; the
    median round of each stands. Also each round's capacity ratio, coordinator vs echo."""
    rows, tls_rows, spreads = [], [], {}
    for in_flight in (8, 64):
        es, cs, ts = [], [], []
        for _ in range(args.rounds):
            es.append(measure("echo", *echo, members, in_flight, args.seconds))
            cs.append(measure("coordinator", *coord, members, in_flight, args.seconds))
            if secure is not None:
                ts.append(measure("coordinator+mTLS+ACL", *secure, secure_members, in_flight, args.seconds, creds))
        spreads[in_flight] = sorted(e["cpu_us_per_req"] / c["cpu_us_per_req"] for e, c in zip(es, cs, strict=True))
        c = median_round(cs)
        rows.append((in_flight, median_round(es), c))
        if secure is not None:
            tls_rows.append((in_flight, c, median_round(ts)))
    return rows, tls_rows, spreads


def median_round(rounds: list[dict[str, float]]) -> dict[str, float]:
    """The round with the median CPU per request (its figures together, not medians mixed across rounds)."""
    return sorted(rounds, key=lambda m: m["cpu_us_per_req"])[len(rounds) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--tls", action="store_true", help="also the coordinator over mTLS with ACLs, same run")
    ap.add_argument("--threads", action="store_true", help="also each server's CPU per request split by thread")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per point (the median is reported)")
    args = ap.parse_args()
    os.sched_setaffinity(0, {1})  # the load generator on core 1, servers on core 0
    with tempfile.TemporaryDirectory() as tmp:

        def coordinator(db: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
            return start_server(
                [
                    sys.executable,
                    "-m",
                    "services.coordinator.cli.coordinator",
                    "serve",
                    "--listen",
                    "127.0.0.1:0",
                    "--metrics-listen",
                    "",
                    "--database",
                    f"sqlite:///{tmp}/{db}",
                    "--set",
                    "group.connect.session.timeout.ms=60000",
                    "--set",
                    "group.connect.heartbeat.interval.ms=5000",
                    "--log-level",
                    "WARNING",
                    *extra,
                ],
                "connect-coordinator",
                core=0,
            )

        coord, caddr = coordinator("bench.db")
        echo, eaddr = start_server([sys.executable, "-c", ECHO_SERVER], "the echo server", core=0)
        procs = [coord, echo]
        secure = creds = None
        try:
            if args.tls:
                creds, extra = tls_setup(Path(tmp))
                secure, saddr = coordinator("bench-tls.db", *extra)
                procs.append(secure)
            members = setup_group(caddr, args.members)
            secure_members = setup_group(saddr, args.members, creds) if secure is not None else []
            secure_at = (secure.pid, saddr) if secure is not None else None
            rows, tls_rows, spreads = measure_points(
                args, (echo.pid, eaddr), (coord.pid, caddr), members, secure_at, secure_members, creds
            )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    print(
        f"Steady-state heartbeats, {args.members} members of one group, SQLite, {args.seconds:.0f}s per point, "
        f"servers pinned to one core, load generator on the other; {args.rounds} alternating round(s) per point, "
        f"the median round's figures.\n"
    )
    print("| in flight | server | req/s | p50 ms | p99 ms | server CPU µs/req |")
    print("|---|---|---|---|---|---|")
    for in_flight, e, c in rows:
        for name, m in (("echo", e), ("coordinator", c)):
            print(
                f"| {in_flight} | {name} | {m['rps']:.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us_per_req']:.0f} |"
            )
    print()
    for in_flight, e, c in rows:
        print(
            f"in flight {in_flight}: throughput ratio {c['rps'] / e['rps']:.2f}, "
            f"capacity ratio (echo CPU/req ÷ coordinator CPU/req) {e['cpu_us_per_req'] / c['cpu_us_per_req']:.2f}"
            + (
                f" (each round's: {', '.join(f'{r:.2f}' for r in spreads[in_flight])})"
                if len(spreads[in_flight]) > 1
                else ""
            )
        )
    if args.threads:
        print_threads(rows)
    if tls_rows:
        print()
        print("| in flight | server | req/s | p50 ms | p99 ms | server CPU µs/req |")
        print("|---|---|---|---|---|---|")
        for in_flight, c, t in tls_rows:
            for name, m in (("coordinator (plaintext)", c), ("coordinator (mTLS + ACLs)", t)):
                print(
                    f"| {in_flight} | {name} | {m['rps']:.0f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['cpu_us_per_req']:.0f} |"
                )
        print()
        for in_flight, c, t in tls_rows:
            print(
                f"in flight {in_flight}: mTLS+ACL vs plaintext: throughput ratio {t['rps'] / c['rps']:.2f}, "
                f"capacity ratio (plaintext CPU/req ÷ mTLS CPU/req) {c['cpu_us_per_req'] / t['cpu_us_per_req']:.2f}"
            )
    return 0


def print_threads(rows: list[tuple[int, dict[str, float], dict[str, float]]]) -> None:
    print()
    print(
        "| in flight | server | event loop thread user µs/req | event loop thread system µs/req | other threads µs/req |"
    )
    print("|---|---|---|---|---|")
    for in_flight, e, c in rows:
        for name, m in (("echo", e), ("coordinator", c)):
            print(
                f"| {in_flight} | {name} | {m['main_user_us']:.0f} | {m['main_sys_us']:.0f} | {m['other_threads_us']:.0f} |"
            )


def tls_setup(tmp: Path) -> tuple[grpc.ChannelCredentials, list[str]]:
    """A CA, the server's certificate, the load generator's (CN bench-worker), and ACLs that give
    bench-worker Read on the group (plus an unrelated prefixed ACL, so the lookup is not trivial)."""
    from services.common.tls import ClientTls
    from tests.security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp / "pki")
    server = ca.server()
    client = ca.issue("bench-worker")
    acl = tmp / "acls.yaml"
    acl.write_text(
        'acls:\n  - {principal: "User:bench-worker", operation: Read, group: "bench"}\n'
        '  - {principal: "User:ops", operation: Describe, group: "be", pattern: prefixed}\n'
        '  - {principal: "User:bench-worker", operation: Alter, group: "bench"}\n'
    )
    creds = ClientTls(str(ca.ca_file), str(client.cert), str(client.key)).credentials()
    extra = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.ca_file)]
    return creds, [*extra, "--acl-file", str(acl)]


if __name__ == "__main__":
    sys.exit(main())
