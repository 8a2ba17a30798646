"""Three coordinator replicas over one real PostgreSQL database (SPEC §10): partitions spread over
them, FindCoordinator answered by any replica, NOT_COORDINATOR naming the owner, per-group answers
for multi-group RPCs, LOAD_IN_PROGRESS while a partition loads, and a graceful stop handing its
partitions over at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime
from services.coordinator.runtime.machine import NotAvailable
from services.coordinator.runtime.partitions import PartState, partition_for
from services.coordinator.runtime.server import start_server
from services.storage import Storage
from tests.fixtures.coordinator import FAST_SETTINGS, REPO, Client, CoordinatorProcess
from tests.fixtures.net import free_port

PARTITIONS = 6


def start_replicas(url: str, n: int) -> list[CoordinatorProcess]:
    settings = [*FAST_SETTINGS, f"group.coordinator.partitions={PARTITIONS}"]
    procs = [CoordinatorProcess(url, settings=settings).start(wait_owned=False) for _ in range(n)]
    wait_spread(procs)
    return procs


def wait_spread(procs: list[CoordinatorProcess]) -> admin_pb2.DescribeCoordinatorsResponse:
    """Until every partition is owned (and loaded) by one of these live replicas, each owning its share."""

    def live(resp: admin_pb2.DescribeCoordinatorsResponse) -> set[str]:
        return {r.replica_id for r in resp.replicas if r.live}

    resp = procs[0].wait_partitions_owned(30, owners=live)
    while len({p.owner_replica_id for p in resp.partitions}) < len(procs):
        resp = procs[0].wait_partitions_owned(30, owners=live)
    # Each replica routes by its last read of the leases: one more renew interval (250 ms) or two
    # and every replica has read this spread.
    time.sleep(0.6)
    return resp


def admin(address: str) -> admin_pb2_grpc.ConnectGroupAdminStub:
    return admin_pb2_grpc.ConnectGroupAdminStub(grpc.insecure_channel(address))


def owner_map(resp: admin_pb2.DescribeCoordinatorsResponse) -> dict[int, str]:
    return {p.partition: p.owner_address for p in resp.partitions}


def group_on(partition: int, prefix: str = "g") -> str:
    return next(f"{prefix}{i}" for i in range(100_000) if partition_for(f"{prefix}{i}", PARTITIONS) == partition)


@pytest.fixture
def replicas(postgres_db_url: str) -> Iterator[list[CoordinatorProcess]]:
    procs = start_replicas(postgres_db_url, 3)
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()


@pytest.mark.postgres
def test_find_coordinator_and_not_coordinator_across_three_replicas(replicas: list[CoordinatorProcess]) -> None:
    resp = admin(replicas[0].address).DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=10)
    assert resp.partition_count == PARTITIONS
    assert sorted(r.address for r in resp.replicas if r.live) == sorted(p.address for p in replicas)
    assert sum(r.partitions_owned for r in resp.replicas) == PARTITIONS
    assert all(r.partitions_owned == 2 for r in resp.replicas)  # balanced: 6 partitions, 3 replicas
    owners = owner_map(resp)
    for partition in range(PARTITIONS):
        gid = group_on(partition)
        owner = owners[partition]
        for proc in replicas:  # any replica answers FindCoordinator with the owner
            found = admin(proc.address).FindCoordinator(admin_pb2.FindCoordinatorRequest(group_id=gid), timeout=10)
            assert (found.error_code, found.address, found.partition) == (ErrorCode.NONE, owner, partition)
        # The owner serves the group; the others answer NOT_COORDINATOR naming the owner.
        for proc in replicas:
            put = Client(proc.address, gid).put_connector("c", 2)
            if proc.address == owner:
                assert put.error_code == ErrorCode.NONE, put
            else:
                assert put.error_code == ErrorCode.NOT_COORDINATOR, put
                assert owner in put.error_message
        hb = Client(next(p.address for p in replicas if p.address != owner), gid).heartbeat("", 0)
        assert hb.error_code == ErrorCode.NOT_COORDINATOR and owner in hb.error_message
    # Multi-group RPCs answer per group: served ones described, the others NOT_COORDINATOR.
    gids = [group_on(p) for p in range(PARTITIONS)]
    first = replicas[0].address
    described = admin(first).DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=gids), timeout=10)
    assert [g.group_id for g in described.groups] == gids
    for partition, g in enumerate(described.groups):
        if owners[partition] == first:
            assert g.error_code == ErrorCode.NONE and g.group_state == "Empty"
        else:
            assert g.error_code == ErrorCode.NOT_COORDINATOR and owners[partition] in g.error_message
    # ListGroups: each replica lists its own groups; together, all of them, once.
    listed = [
        g.group_id
        for proc in replicas
        for g in admin(proc.address).ListGroups(admin_pb2.ListGroupsRequest(), timeout=10).groups
    ]
    assert sorted(listed) == sorted(gids)
    # Bad input to FindCoordinator: named, not a crash.
    bad = admin(first).FindCoordinator(admin_pb2.FindCoordinatorRequest(group_id=""), timeout=10)
    assert bad.error_code == ErrorCode.INVALID_REQUEST and "group_id" in bad.error_message


@pytest.mark.postgres
def test_a_graceful_stop_hands_partitions_over_at_once(replicas: list[CoordinatorProcess]) -> None:
    resp = admin(replicas[0].address).DescribeCoordinators(admin_pb2.DescribeCoordinatorsRequest(), timeout=10)
    leaving = replicas[2]
    moved = [p for p, a in owner_map(resp).items() if a == leaving.address]
    gid = group_on(moved[0], "kept")
    assert Client(leaving.address, gid).put_connector("c", 3).error_code == ErrorCode.NONE
    assert leaving.stop() == 0
    # Well before the 1.5 s lease would have expired on its own: the others own everything.
    after = wait_spread(replicas[:2])
    owner = owner_map(after)[moved[0]]
    assert owner in (replicas[0].address, replicas[1].address)
    described = Client(owner, gid).describe()
    assert described.error_code == ErrorCode.NONE
    assert [(c.name, c.task_count) for c in described.connectors] == [("c", 3)]  # nothing committed was lost
    assert {r.address for r in after.replicas} == {p.address for p in replicas[:2]}  # deregistered
    assert "handing partitions" in "".join(leaving.output)


def test_a_partition_loading_answers_load_in_progress_and_find_coordinator_names_its_owner(tmp_path: Path) -> None:
    """In process (the loading window of a real load is milliseconds): a partition held but not yet
    loaded answers COORDINATOR_LOAD_IN_PROGRESS, FindCoordinator already names this replica, and
    other partitions are served meanwhile."""

    async def scenario() -> None:
        storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
        storage.open()
        runtime = CoordinatorRuntime(GroupCoordinator(ServerConfig(coordinator_partitions=PARTITIONS)), storage)
        await runtime.start("127.0.0.1:1")
        running = await start_server(runtime, "127.0.0.1:0", None)
        runtime.replica.advertise(f"127.0.0.1:{running.port}")  # type: ignore[union-attr]
        table = runtime.replica.table  # type: ignore[union-attr]
        assert table is not None and sorted(table.owned()) == list(range(PARTITIONS))
        table.held[0].state = PartState.LOADING  # as between acquiring a lease and serving its groups
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
                coord = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(ch)
                stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
                loading, served = group_on(0), group_on(1)
                hb = await coord.ConnectGroupHeartbeat(
                    coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=loading, member_epoch=0), timeout=10
                )
                assert hb.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and "partition 0" in hb.error_message
                found = await stub.FindCoordinator(admin_pb2.FindCoordinatorRequest(group_id=loading), timeout=10)
                assert (found.error_code, found.address) == (ErrorCode.NONE, f"127.0.0.1:{running.port}")
                put = await stub.PutConnector(
                    admin_pb2.PutConnectorRequest(group_id=served, connector="c", task_count=1), timeout=10
                )
                assert put.error_code == ErrorCode.NONE
                watch = coord.ConnectGroupWatch(
                    coordinator_pb2.ConnectGroupWatchRequest(group_id=loading, member_id="m"), timeout=10
                )
                first = await watch.read()
                assert first.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        finally:
            await running.stop(0)
            await runtime.stop()
            storage.close()

    asyncio.run(scenario())


@pytest.mark.postgres
def test_a_replica_whose_memory_says_it_owns_a_taken_partition_can_never_commit(postgres_db_url: str) -> None:
    """The fence, through the whole runtime: replica A's lease loop is frozen (as in a pause) and its
    memory kept believing it serves everything, while replica B takes the partitions over after
    the leases expired. A request A then handles writes nothing: the database refuses the write
    (fencing epoch), A steps down, and the caller is told to retry elsewhere."""
    config = ServerConfig(coordinator_partitions=2, coordinator_lease_ms=600, coordinator_lease_renew_interval_ms=100)

    async def scenario() -> None:
        sa, sb = Storage(postgres_db_url), Storage(postgres_db_url)
        sa.open()
        sb.open()
        a = CoordinatorRuntime(GroupCoordinator(config), sa)
        await a.start("a:1")
        assert a.replica is not None and a.replica.table is not None
        table = a.replica.table
        assert sorted(table.owned()) == [0, 1]
        gid = next(f"g{i}" for i in range(100) if table.partition(f"g{i}") == 0)
        put = admin_pb2.PutConnectorRequest(group_id=gid, connector="c", task_count=1)
        assert (await a.handle(a.coordinator.put_connector, put)).error_code == ErrorCode.NONE
        # Freeze A's lease cycles; its memory goes on believing it serves everything.
        assert a.replica._task is not None
        a.replica._task.cancel()
        for h in table.held.values():
            h.valid_until_ms = 2**62
        await asyncio.sleep(0.8)  # A's leases expire in the database
        b = CoordinatorRuntime(GroupCoordinator(config), sb)
        await b.start("b:1")
        assert b.replica is not None and b.replica.table is not None
        assert sorted(b.replica.table.owned()) == [0, 1]
        # A handles a change: applied to its memory, refused by the database.
        put2 = admin_pb2.PutConnectorRequest(group_id=gid, connector="c", task_count=5)
        with pytest.raises(NotAvailable) as refused:
            await a.handle(a.coordinator.put_connector, put2)
        assert refused.value.code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)
        assert 0 not in table.held  # stepped down from the partition it was fenced on
        assert gid not in a.coordinator.state.groups
        assert a.metrics.fenced_writes._value.get() >= 1
        # What is stored is what B serves: the change A made in memory was never committed.
        described = await b.read(b.coordinator.describe_groups, admin_pb2.DescribeGroupsRequest(group_ids=[gid]))
        assert [(c.name, c.task_count) for c in described.groups[0].connectors] == [("c", 1)]
        await b.stop()
        await a.stop()
        sa.close()
        sb.close()

    asyncio.run(scenario())


def groups_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


@pytest.mark.postgres
def test_connect_groups_follows_owners_from_a_bootstrap_list_with_a_dead_address(
    replicas: list[CoordinatorProcess],
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    bootstrap = ",".join([dead, *(p.address for p in replicas)])
    gids = [group_on(p, "cli") for p in range(PARTITIONS)]  # one group on every partition: all replicas
    for gid in gids:  # each put goes to its group's owner
        out = groups_cli(bootstrap, "connectors", "put", gid, "c", "--tasks", "2")
        assert out.returncode == 0, out.stderr
    listed = groups_cli(bootstrap, "--output", "json", "list")
    assert listed.returncode == 0, listed.stderr
    assert sorted(g["group_id"] for g in json.loads(listed.stdout)["groups"]) == sorted(gids)
    described = groups_cli(bootstrap, "--output", "json", "describe", *gids)
    assert described.returncode == 0, described.stderr
    groups = json.loads(described.stdout)["groups"]
    assert [g["group_id"] for g in groups] == gids and all(g["error_code"] == "NONE" for g in groups)
    table = groups_cli(bootstrap, "coordinators")
    assert table.returncode == 0, table.stderr
    assert f"{PARTITIONS} partitions" in table.stdout
    for proc in replicas:
        assert proc.address in table.stdout
    as_json = json.loads(groups_cli(bootstrap, "--output", "json", "coordinators").stdout)
    assert as_json["partition_count"] == PARTITIONS
    assert {r["address"] for r in as_json["replicas"] if r["live"]} == {p.address for p in replicas}
    # Every bootstrap address dead: exit 3, one line naming them.
    unreachable = groups_cli(dead, "list")
    assert unreachable.returncode == 3 and dead in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1
    bad = groups_cli("not-an-address", "list")
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr
