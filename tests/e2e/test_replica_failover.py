"""Three coordinator replicas on the real PostgreSQL, the assignor service and reference workers
(`connect-worker` processes given the replicas as a bootstrap list), several groups spread over the
replicas (SPEC §10). What runs where is read from the workers' own status files; every observation
checks that nothing runs on two workers at once.

* SIGKILL the replica owning a group in the middle of a rebalance: another replica takes it over
  once the lease expires, the group converges, nothing committed is lost;
* SIGSTOP a replica past its lease, then SIGCONT: it steps down (its partitions are served by the
  others; it counts the lost leases) and nothing runs twice meanwhile;
* rolling restart of every replica, one by one: groups keep converging and no worker ever stops
  anything (no work moved).
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.runtime.partitions import partition_for
from tests.e2e.test_service_mode import AssignorProcess
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.net import free_port
from tests.fixtures.processes import ManagedProcess, Processes
from tests.worker.observe import Admin, Fleet, Snapshot, settled

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

PARTITIONS = 6
LEASE_S = 1.5
SETTINGS = [
    "group.connect.min.session.timeout.ms=1000",
    # A worker stops its work after ~4.8 s without a successful heartbeat: well after a takeover.
    "group.connect.session.timeout.ms=6000",
    "group.connect.min.heartbeat.interval.ms=100",
    "group.connect.heartbeat.interval.ms=300",
    "group.connect.assignment.retry.backoff.ms=100",
    f"group.coordinator.partitions={PARTITIONS}",
    f"group.coordinator.lease.ms={int(LEASE_S * 1000)}",
    "group.coordinator.lease.renew.interval.ms=250",
]
RETRY = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
WORKERS_PER_GROUP = 3


class FollowingAdmin(Admin):
    """The operator's side against the replicas: every call goes to the group's owner, found with
    FindCoordinator on any live replica and found again when the answer says it moved."""

    def __init__(self, bootstrap: Callable[[], list[str]], group: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.connectors: dict[str, int] = {}
        self.address = ""
        self._channels: dict[str, grpc.Channel] = {}

    def _stub(self, address: str) -> admin_pb2_grpc.ConnectGroupAdminStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address)
        return admin_pb2_grpc.ConnectGroupAdminStub(self._channels[address])

    def owner(self) -> str:
        for address in self.bootstrap():
            try:
                r = self._stub(address).FindCoordinator(
                    admin_pb2.FindCoordinatorRequest(group_id=self.group), timeout=2
                )
            except grpc.RpcError:
                continue
            if r.error_code == ErrorCode.NONE:
                return str(r.address)
        return ""

    def _call(self, method: str, request: Any, error_of: Callable[[Any], int]) -> Any:
        deadline = time.monotonic() + 30
        while True:
            if not self.address:
                self.address = self.owner()
            if self.address:
                try:
                    response = getattr(self._stub(self.address), method)(request, timeout=5)
                    if error_of(response) not in RETRY:
                        return response
                except grpc.RpcError:
                    pass
                self.address = ""
            if time.monotonic() > deadline:
                raise AssertionError(f"{method} for {self.group}: no coordinator answered in 30 s")
            time.sleep(0.1)

    @property
    def stub(self) -> Any:  # type: ignore[override]
        admin = self

        class _Routed:
            def __getattr__(self, method: str) -> Callable[..., Any]:
                def call(request: Any, timeout: float = 10) -> Any:
                    if method == "DescribeGroups":
                        return admin._call(method, request, lambda r: r.groups[0].error_code)
                    return admin._call(method, request, lambda r: r.error_code)

                return call

        return _Routed()

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()


@dataclass
class Cluster:
    url: str
    replicas: list[CoordinatorProcess]
    processes: Processes
    tmp: Path

    def addresses(self) -> list[str]:
        return [r.address for r in self.replicas if r.proc is not None and r.proc.poll() is None]

    def bootstrap(self) -> str:
        return ",".join(r.address for r in self.replicas)

    def describe(self) -> admin_pb2.DescribeCoordinatorsResponse:
        for address in self.addresses():
            try:
                return admin_pb2_grpc.ConnectGroupAdminStub(grpc.insecure_channel(address)).DescribeCoordinators(
                    admin_pb2.DescribeCoordinatorsRequest(), timeout=5
                )
            except grpc.RpcError:
                continue
        raise AssertionError("no replica answered")

    def owners(self) -> dict[int, str]:
        return {p.partition: p.owner_address for p in self.describe().partitions}

    def wait_spread(self, n: int, timeout_s: float = 30.0) -> dict[int, str]:
        """Until every partition is owned by one of the n running replicas, each owning some."""
        deadline = time.monotonic() + timeout_s
        while True:
            d = self.describe()
            live = {r.replica_id for r in d.replicas if r.live}
            ok = all(p.owner_replica_id in live and p.expires_ms > d.now_ms for p in d.partitions)
            addresses = {p.owner_address for p in d.partitions}
            if ok and len(live) == n and len(addresses) == n and addresses <= set(self.addresses()):
                time.sleep(0.6)  # every replica has read the spread
                return {p.partition: p.owner_address for p in d.partitions}
            if time.monotonic() > deadline:
                raise AssertionError(f"partitions not spread over {n} replicas: {d}")
            time.sleep(0.1)

    def restart(self, index: int) -> None:
        old = self.replicas[index]
        # The same port: the workers' bootstrap list names it.
        port = old.address.rpartition(":")[2]
        fresh = CoordinatorProcess(
            self.url, settings=SETTINGS, extra_args=[*old.extra_args[:2], "--listen", f"127.0.0.1:{port}"]
        )
        fresh.start(wait_owned=False)
        self.replicas[index] = fresh


def start_replica(url: str, assignor: str, listen: str = "127.0.0.1:0") -> CoordinatorProcess:
    proc = CoordinatorProcess(url, settings=SETTINGS, extra_args=["--assignor-address", assignor, "--listen", listen])
    return proc.start(wait_owned=False)


@pytest.fixture
def cluster(postgres_db_url: str, processes: Processes, tmp_path: Path) -> Iterator[Cluster]:
    assignor = AssignorProcess(free_port()).start()
    replicas = [start_replica(postgres_db_url, assignor.address) for _ in range(3)]
    c = Cluster(postgres_db_url, replicas, processes, tmp_path)
    try:
        c.wait_spread(3)
        yield c
    finally:
        processes.stop_all()  # the workers first (they leave), then the replicas
        for r in c.replicas:
            r.kill()
        assignor.kill()


def groups_on_each_owner(owners: dict[int, str]) -> dict[str, str]:
    """One group per replica: group id -> its owner's address."""
    out: dict[str, str] = {}
    for i in range(10_000):
        gid = f"group-{i}"
        owner = owners[partition_for(gid, PARTITIONS)]
        if owner not in out.values():
            out[gid] = owner
        if len(out) == len(set(owners.values())):
            return out
    raise AssertionError("no group for some replica")


@dataclass
class Group:
    gid: str
    admin: FollowingAdmin
    workers: ManagedProcess
    fleet: Fleet


def start_groups(cluster: Cluster, gids: list[str]) -> list[Group]:
    groups = []
    for gid in gids:
        admin = FollowingAdmin(cluster.addresses, gid)
        admin.put("a", 2)
        admin.put("b", 3)
        fleet = Fleet()
        for i in range(WORKERS_PER_GROUP):
            fleet.add(cluster.tmp / f"{gid}-{i}.json")
        workers = cluster.processes.start_worker(
            cluster.bootstrap(),
            gid,
            name=f"workers-{gid}",
            status_file=cluster.tmp / f"{gid}-{{i}}.json",
            simulate=WORKERS_PER_GROUP,
        )
        groups.append(Group(gid, admin, workers, fleet))
    for g in groups:
        g.fleet.wait_for(f"{g.gid} settled", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
    return groups


def watch_all(groups: list[Group], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for g in groups:
            g.fleet.observe()
        time.sleep(0.05)


def stops(snap: Snapshot) -> dict[str, int]:
    return {p.name: int(d.get("stops", 0)) for p, d in snap.docs.items()}


def metric(replica: CoordinatorProcess, name: str) -> float:
    text = urllib.request.urlopen(replica.metrics_address, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_sigkill_of_the_owner_mid_rebalance_moves_the_group_and_nothing_runs_twice(cluster: Cluster) -> None:
    owners = cluster.owners()
    placed = groups_on_each_owner(owners)
    groups = start_groups(cluster, sorted(placed))
    victim_group = groups[0]
    victim = next(r for r in cluster.replicas if r.address == placed[victim_group.gid])
    # A rebalance under way: a new connector's tasks are being assigned when the owner dies.
    victim_group.admin.put("c", 4)
    victim.kill()
    t0 = time.monotonic()
    for g in groups:
        g.fleet.wait_for(f"{g.gid} settled after the kill", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
    took = time.monotonic() - t0
    new_owner = victim_group.admin.owner()
    assert new_owner and new_owner != victim.address
    # Nothing committed was lost: the connector put before the kill (acknowledged) is there.
    described = victim_group.admin.describe()
    assert {c.name: c.task_count for c in described.connectors} == {"a": 2, "b": 3, "c": 4}
    assert victim_group.fleet.observe().union() == victim_group.admin.expected()
    cluster.replicas.remove(victim)
    cluster.wait_spread(2)
    watch_all(groups, 2.0)
    assert took < 60


def test_a_replica_paused_past_its_lease_steps_down_when_it_wakes(cluster: Cluster) -> None:
    owners = cluster.owners()
    placed = groups_on_each_owner(owners)
    groups = start_groups(cluster, sorted(placed))
    paused = next(r for r in cluster.replicas if r.address == placed[groups[0].gid])
    before = {g.gid: stops(g.fleet.observe()) for g in groups}
    assert paused.proc is not None
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        watch_all(groups, LEASE_S * 2.5)  # the lease runs out while it sleeps; others take over
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    # It wakes up believing it owns its partitions: its lease cycle finds them taken, and it stops
    # serving them (routing refuses, and the fence would refuse any write).
    deadline = time.monotonic() + 20
    while metric(paused, "connect_coordinator_lease_losses_total") < 1:
        assert time.monotonic() < deadline, "the woken replica did not step down"
        watch_all(groups, 0.1)
    for g in groups:
        g.fleet.wait_for(f"{g.gid} settled after the pause", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
    # The paused replica rejoined: partitions spread over all three again.
    cluster.wait_spread(3)
    for g in groups:
        snap = g.fleet.wait_for(f"{g.gid} settled", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
        # Workers kept their work throughout (the session-safety stop never fired, nothing moved).
        assert stops(snap) == before[g.gid], (g.gid, stops(snap), before[g.gid])
    log = "".join(paused.output)
    assert "lost the lease" in log


def test_rolling_restart_of_every_replica_moves_no_work(cluster: Cluster) -> None:
    owners = cluster.owners()
    placed = groups_on_each_owner(owners)
    groups = start_groups(cluster, sorted(placed))
    before = {g.gid: stops(g.fleet.observe()) for g in groups}
    for index in range(len(cluster.replicas)):
        assert cluster.replicas[index].stop() == 0  # SIGTERM: hands its partitions over at once
        cluster.wait_spread(2)
        watch_all(groups, 0.5)
        cluster.restart(index)
        cluster.wait_spread(3)
        for g in groups:
            g.fleet.wait_for(f"{g.gid} settled", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
    # A change after the restarts still converges (the group is served and assigns).
    groups[0].admin.put("d", 2)
    for g in groups:
        snap = g.fleet.wait_for(f"{g.gid} settled at the end", settled(g.admin, WORKERS_PER_GROUP), timeout_s=60)
        if g is not groups[0]:
            assert stops(snap) == before[g.gid], (g.gid, stops(snap), before[g.gid])
