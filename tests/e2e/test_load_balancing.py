"""Load-aware and rack-aware assignment end to end (SPEC §13, issue 37): a real coordinator process
and a real `connect-assignor` process over gRPC on loopback, on SQLite and PostgreSQL. Workers are
played by the test with raw gRPC calls: each runs what it was told, heartbeats every ~100 ms and
reports its items' loads the way the SDK does (only when they changed)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.assignor import within_ratio
from services.common.items import Items, TaskId
from tests.e2e.test_service_mode import AssignorProcess
from tests.fixtures.coordinator import FAST_SETTINGS, REPO, Client, CoordinatorProcess, assignors
from tests.fixtures.net import free_port

COOLDOWN_MS = 1_500
LB = ("load-balanced", 1, 2)
IC = ("incremental-cooperative", 1, 2)
SETTINGS = [
    *FAST_SETTINGS,
    "group.connect.session.timeout.ms=4000",
    f"group.connect.load.cooldown.ms={COOLDOWN_MS}",
    "group.connect.load.report.interval.ms=1000",
]


@pytest.fixture
def stack(database_url: str) -> Iterator[Client]:
    assignor = AssignorProcess(free_port()).start()
    coordinator = CoordinatorProcess(database_url, settings=SETTINGS, assignor_address=assignor.address).start()
    client = Client(coordinator.address)
    yield client
    client.close()
    coordinator.kill()
    assignor.kill()


class Workers:
    """Workers that run exactly what they are told, each item with a fixed load (tasks 1.0 unless set)."""

    def __init__(self, client: Client, assignor: tuple[str, int, int] = LB) -> None:
        self.client = client
        self.assignor = assignor
        self.epoch: dict[str, int] = {}
        self.running: dict[str, Items] = {}
        self.sent: dict[str, tuple[tuple[str, int, float], ...]] = {}
        self.task_load: dict[TaskId, float] = {}
        self.report = True

    def join(self, n: int, racks: list[str] | None = None) -> list[str]:
        ids = []
        for i in range(n):
            req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=self.client.group_id, member_epoch=0)
            req.rebalance_timeout_ms = 30_000
            req.client_assignors.CopyFrom(assignors(self.assignor))
            req.owned.SetInParent()
            if racks:
                req.rack = racks[i]
            r = self.client.coord.ConnectGroupHeartbeat(req, timeout=10)
            assert r.error_code == ErrorCode.NONE, r
            self.epoch[r.member_id] = r.member_epoch
            self.running[r.member_id] = Items.from_proto(r.assignment.assigned)
            ids.append(r.member_id)
        return ids

    def loads_of(self, mid: str) -> tuple[tuple[str, int, float], ...]:
        return tuple(sorted((t.connector, t.task, self.task_load.get(t, 1.0)) for t in self.running[mid].tasks))

    def beat(self, mid: str, **extra: object) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
        req = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=self.client.group_id, member_id=mid, member_epoch=self.epoch[mid]
        )
        self.running[mid].to_proto(req.owned)
        mine = self.loads_of(mid)
        if self.report and mine != self.sent.get(mid):
            req.item_loads.SetInParent()
            for c, t, load in mine:
                req.item_loads.loads.add(connector=c, task=t, load=load)
        for name, value in extra.items():
            setattr(req, name, value)
        r = self.client.coord.ConnectGroupHeartbeat(req, timeout=10)
        if r.error_code == ErrorCode.NONE:
            if req.HasField("item_loads"):
                self.sent[mid] = mine
            self.epoch[mid] = r.member_epoch
            if r.HasField("assignment"):
                self.running[mid] = Items.from_proto(r.assignment.assigned)
        return r

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for mid in list(self.epoch):
                r = self.beat(mid)
                assert r.error_code == ErrorCode.NONE, r
            time.sleep(0.1)

    def run_until(self, predicate: object, timeout_s: float) -> admin_pb2.DescribedGroup:
        deadline = time.monotonic() + timeout_s
        while True:
            self.run(0.3)
            g = self.client.describe()
            if predicate(g):  # type: ignore[operator]
                return g
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached in {timeout_s} s: {g}")

    def stable(self) -> admin_pb2.DescribedGroup:
        return self.run_until(lambda g: g.group_state == "Stable" and g.group_epoch == g.assignment_epoch, 20)


def balanced(g: admin_pb2.DescribedGroup) -> bool:
    """Stable and within the assignor's goal (every worker within 1.1 of the mean, both ways)."""
    members = [(m.load, m.capacity, len(m.assignment.tasks)) for m in g.members]
    return g.group_state == "Stable" and g.load_ratio > 0 and within_ratio(members, 1.1)


def load_bumps(client: Client) -> list[admin_pb2.GroupEvent]:
    events = client.admin.ListGroupEvents(
        admin_pb2.ListGroupEventsRequest(group_id=client.group_id, max_events=10_000), timeout=10
    ).events
    return [
        e
        for e in events
        if e.event == "group_epoch_bumped" and json.loads(e.details_json)["reason"] == "load_imbalance"
    ]


def skewed(client: Client) -> tuple[Workers, list[str]]:
    """Three workers, connector c of 9 tasks; the three tasks of the first weigh 10, the rest 1."""
    w = Workers(client)
    ids = w.join(3)
    assert client.put_connector("c", 9).error_code == ErrorCode.NONE
    w.report = False
    w.stable()
    w.run_until(lambda g: all(len(m.assignment.tasks) == 3 for m in g.members), 10)
    heavy = sorted(w.running[ids[0]].tasks)
    w.task_load = dict.fromkeys(heavy, 10.0)
    w.report = True
    return w, ids


def test_skewed_loads_converge_within_the_ratio_with_a_bounded_number_of_rebalances(stack: Client) -> None:
    w, ids = skewed(stack)
    w.run(0.5)
    g = stack.describe()
    loads = {m.member_id: m.load for m in g.members}
    assert loads[ids[0]] == 30.0 and g.load_ratio == pytest.approx(2.5)
    g = w.run_until(balanced, 30)
    assert 0 < g.load_ratio <= 1.1 + 1e-9 and sum(m.load for m in g.members) == 36.0
    bumps = load_bumps(stack)
    assert 1 <= len(bumps) <= math.ceil(10 / 1) + 1
    first = json.loads(bumps[0].details_json)
    assert first["load_ratio"] == pytest.approx(2.5) and bumps[0].member_id == ids[0]
    # Converged: no more rebalances for load, however long the same loads are reported.
    w.run(4 * COOLDOWN_MS / 1000)
    assert len(load_bumps(stack)) == len(bumps)
    # `connect-groups describe` shows the loads, capacities, racks and the ratio.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.coordinator.cli.groups",
            "--coordinator",
            stack_address(stack),
            "describe",
            "g",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    shown = re.search(r"load_ratio=(\d\.\d{3})", out.stdout)
    assert shown is not None and 1.0 <= float(shown.group(1)) <= 1.1, out.stdout
    header = next(line for line in out.stdout.splitlines() if line.startswith("WORKER"))
    assert header.split()[5:8] == ["LOAD", "CAP", "RACK"], header
    rows = [line.split() for line in out.stdout.splitlines()[out.stdout.splitlines().index(header) + 1 :]]
    assert sum(float(r[5]) for r in rows[:3]) == 36.0 and [r[6:8] for r in rows[:3]] == [["1", "-"]] * 3


def stack_address(client: Client) -> str:
    return client.channel._channel.target().decode()  # type: ignore[attr-defined]


def test_one_load_change_brings_one_rebalance_not_a_storm(stack: Client) -> None:
    w, _ = skewed(stack)
    # Moves per rebalance unbounded for this group: what one load change needs fits one rebalance.
    alter = admin_pb2.AlterConfigsRequest(group_id="g")
    alter.set.add(name="load.max.moves", value="100")
    assert stack.admin.AlterConfigs(alter, timeout=10).error_code == ErrorCode.NONE
    w.run_until(balanced, 30)
    w.run(2 * COOLDOWN_MS / 1000)
    before = len(load_bumps(stack))
    epoch = stack.describe().group_epoch
    # One light task (on whichever worker) becomes six times heavier.
    w.task_load[TaskId("c", 8)] = 6.0
    g = w.run_until(lambda g: g.group_state == "Stable" and len(load_bumps(stack)) > before, 20)
    w.run(5 * COOLDOWN_MS / 1000)
    after = load_bumps(stack)
    assert 1 <= len(after) - before <= 2, [json.loads(e.details_json) for e in after]
    assert stack.describe().group_epoch - epoch <= 2 * (len(after) - before)
    _ = g


def test_tasks_are_spread_over_racks(stack: Client) -> None:
    w = Workers(stack, IC)
    w.report = False
    w.join(4, racks=["zone-a", "zone-a", "zone-b", "zone-c"])
    assert stack.put_connector("c", 7).error_code == ErrorCode.NONE
    g = w.run_until(lambda g: g.group_state == "Stable" and sum(len(m.assignment.tasks) for m in g.members) == 7, 20)
    per_rack: dict[str, int] = {}
    for m in g.members:
        per_rack[m.rack] = per_rack.get(m.rack, 0) + len(m.assignment.tasks)
    assert max(per_rack.values()) <= math.ceil(7 / 3), per_rack
    assert {m.rack for m in g.members} == {"zone-a", "zone-b", "zone-c"}


def test_bad_input(stack: Client) -> None:
    w, ids = skewed(stack)
    w.run(0.3)
    a, b = ids[0], ids[1]
    epoch = stack.describe().group_epoch
    # Loads for an item the worker does not own.
    theirs = sorted(w.running[b].tasks)[0]
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id=a, member_epoch=w.epoch[a])
    req.item_loads.loads.add(connector=theirs.connector, task=theirs.task, load=5.0)
    r = stack.coord.ConnectGroupHeartbeat(req, timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST
    assert f"item_loads[{theirs}]: the member does not own {theirs}" in r.error_message
    # A capacity of 0 and a 10 KB rack.
    r = w.beat(a, capacity=0.0)
    assert (
        r.error_code == ErrorCode.INVALID_REQUEST and "capacity must be a number from 1e-06 to 1e+06" in r.error_message
    )
    r = w.beat(a, rack="x" * 10_240)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "rack must be at most 255 bytes, got 10240" in r.error_message
    # A weight on a connector that does not exist creates it (PutConnector creates); a bad weight is refused.
    bad = admin_pb2.PutConnectorRequest(group_id="g", connector="d", task_count=1, task_weight=-1.0)
    r2 = stack.admin.PutConnector(bad, timeout=10)
    assert (
        r2.error_code == ErrorCode.INVALID_REQUEST
        and "task_weight must be a number from 0 to 1e+15" in r2.error_message
    )
    assert [c.name for c in stack.describe().connectors] == ["c"]
    good = admin_pb2.PutConnectorRequest(group_id="g", connector="d", task_count=3, task_weight=3.0)
    assert stack.admin.PutConnector(good, timeout=10).error_code == ErrorCode.NONE
    d = {c.name: c for c in stack.describe().connectors}["d"]
    assert (d.task_count, d.HasField("task_weight"), d.task_weight) == (3, True, 3.0)
    assert stack.describe().group_epoch == epoch + 1  # the connector's, none for the refused requests
    # Loads flooding every heartbeat (each one different): accepted, stored at most once per half
    # interval, and no rebalance from them -- equal loads, 4 tasks per worker: a balanced group.
    w.task_load = {}
    w.run_until(lambda g: g.group_state == "Stable" and [len(m.assignment.tasks) for m in g.members] == [4] * 3, 20)
    w.run(2 * COOLDOWN_MS / 1000)
    quiet = len(load_bumps(stack))
    epoch = stack.describe().group_epoch
    deadline = time.monotonic() + 3 * COOLDOWN_MS / 1000
    i = 0
    while time.monotonic() < deadline:
        for mid in ids:
            i += 1
            req = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id=mid, member_epoch=w.epoch[mid])
            w.running[mid].to_proto(req.owned)
            for t in sorted(w.running[mid].tasks):
                req.item_loads.loads.add(connector=t.connector, task=t.task, load=1.0 + (i % 2) * 1e-6)
            r = stack.coord.ConnectGroupHeartbeat(req, timeout=10)
            assert r.error_code == ErrorCode.NONE, r
            w.epoch[mid] = r.member_epoch
        time.sleep(0.02)
    assert len(load_bumps(stack)) == quiet and stack.describe().group_epoch == epoch
