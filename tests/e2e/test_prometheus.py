"""SPEC §5 observability, checked with a real Prometheus: both services' /metrics are scraped by a
Prometheus server and the series it stores reflect the traffic the test drove; each raw exposition
passes `promtool check metrics` (format and naming lint) without a single warning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, assignor_pb2, assignor_pb2_grpc, common_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items, all_items
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess
from tests.fixtures.net import free_port
from tests.fixtures.prometheus import PrometheusServer, promtool_check_metrics

COORDINATOR_JOB = "connect-coordinator"
ASSIGNOR_JOB = "connect-assignor"
# Fast heartbeats, but sessions long enough that the test's worker (which stops heartbeating once
# the group is Stable) is still a member while Prometheus scrapes.
SETTINGS = [
    "group.connect.min.heartbeat.interval.ms=50",
    "group.connect.heartbeat.interval.ms=200",
    "group.connect.session.timeout.ms=60000",
    "group.connect.assignment.retry.backoff.ms=100",
]


class AssignorService:
    """`connect-assignor serve` with /metrics on a free port (the CLI prints only the gRPC address)."""

    def __init__(self) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.metrics_target = f"127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, timeout_s: float = 20.0) -> AssignorService:
        cmd = [sys.executable, "-m", "services.assignor.cli", "serve", "--listen", self.address]
        cmd += ["--metrics-listen", self.metrics_target]
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("connect-assignor listening on"):
                return self
            if time.monotonic() > deadline:
                break
        self.kill()
        raise RuntimeError("connect-assignor did not start:\n" + "".join(self.output))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def assignor_service() -> Iterator[AssignorService]:
    service = AssignorService().start()
    try:
        yield service
    finally:
        service.kill()


@pytest.fixture
def coordinator_with_assignor(tmp_path: Path, assignor_service: AssignorService) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(
        f"sqlite:///{tmp_path / 'coordinator.db'}", settings=SETTINGS, assignor_address=assignor_service.address
    ).start()
    try:
        yield proc
    finally:
        proc.kill()


def _target(metrics_url: str) -> str:
    """`http://127.0.0.1:PORT/metrics` (the coordinator's log line) -> `127.0.0.1:PORT`."""
    parsed = urllib.parse.urlsplit(metrics_url)
    assert parsed.path == "/metrics" and parsed.netloc, metrics_url
    return parsed.netloc


def _fetch(target: str) -> str:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return str(resp.read().decode())


def _converge_one_worker(client: Client, member: str, timeout_s: float = 20.0) -> None:
    """Join `member` and heartbeat (running exactly what it is told) until the group is Stable."""
    r = client.heartbeat(member, 0)
    assert r.error_code == ErrorCode.NONE, r
    epoch, running = r.member_epoch, Items.from_proto(r.assignment.assigned) if r.HasField("assignment") else EMPTY
    deadline = time.monotonic() + timeout_s
    while client.view()["state"] != "Stable":
        assert time.monotonic() < deadline, f"not Stable in {timeout_s}s: {client.view()}"
        time.sleep(0.05)
        r = client.heartbeat(member, epoch, owned=running)
        assert r.error_code == ErrorCode.NONE, r
        epoch = r.member_epoch
        if r.HasField("assignment"):
            running = Items.from_proto(r.assignment.assigned)
    assert list(running.item_keys()), "the worker runs nothing"


def _direct_assign(address: str) -> None:
    """One Assign RPC straight to the assignor service, as the coordinator would send it."""
    with grpc.insecure_channel(address) as channel:
        stub = assignor_pb2_grpc.ConnectAssignorStub(channel)
        listed = stub.ListAssignors(assignor_pb2.ListAssignorsRequest(), timeout=10).assignors
        assert listed, "the assignor service offers no assignor"
        chosen = listed[0]
        entry = common_pb2.Assignor(
            name=chosen.name,
            minimum_version=chosen.minimum_version,
            maximum_version=chosen.maximum_version,
            version=chosen.maximum_version,
        )
        # m1 runs all of X under the current target; m2 has just joined: some of X moves to m2.
        everything = all_items({"X": 4})
        req = assignor_pb2.AssignRequest(
            assignor_name=chosen.name,
            group_id="direct",
            group_epoch=2,
            connectors=[common_pb2.ConnectorSpec(name="X", task_count=4)],
            now_ms=int(time.time() * 1000),
        )
        m1 = req.members.add(member_id="m1", member_epoch=1, assignor=entry)
        everything.to_proto(m1.owned)
        everything.to_proto(m1.target)
        req.members.add(member_id="m2", member_epoch=0, assignor=entry)
        req.current_target.assignment_epoch = 1
        everything.to_proto(req.current_target.members.add(member_id="m1").connectors_and_tasks)
        resp = stub.Assign(req, timeout=10)
        assert resp.error == 0, resp.error_message
        targets = {m.member_id: Items.from_proto(m.connectors_and_tasks) for m in resp.members}
        assert set(targets) == {"m1", "m2"} and list(targets["m2"].item_keys()), targets


def test_prometheus_scrapes_both_services(
    coordinator_with_assignor: CoordinatorProcess,
    assignor_service: AssignorService,
    prometheus: PrometheusServer,
) -> None:
    coordinator_target = _target(coordinator_with_assignor.metrics_address)
    assignor_target = assignor_service.metrics_target

    # Traffic: two groups (one with a worker that converges through the assignor service), one
    # direct Assign call to the assignor service.
    client = Client(coordinator_with_assignor.address, "prom-g1")
    try:
        assert client.put_connector("A", 2).error_code == ErrorCode.NONE
        _converge_one_worker(client, "W1")
        other = Client(coordinator_with_assignor.address, "prom-g2")
        try:
            assert other.put_connector("B", 1).error_code == ErrorCode.NONE
        finally:
            other.close()
        listed = client.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        group_count = len(listed.groups)
        assert group_count >= 2
    finally:
        client.close()
    _direct_assign(assignor_service.address)

    # The raw expositions: well-formed and lint-clean.
    for job, target in ((COORDINATOR_JOB, coordinator_target), (ASSIGNOR_JOB, assignor_target)):
        rc, report = promtool_check_metrics(_fetch(target))
        assert rc == 0 and report == "", f"promtool check metrics on {job} ({target}): rc={rc}\n{report}"

    # A real Prometheus scrapes both.
    prometheus.start({COORDINATOR_JOB: [coordinator_target], ASSIGNOR_JOB: [assignor_target]})
    for job in (COORDINATOR_JOB, ASSIGNOR_JOB):
        prometheus.wait_for(f'up{{job="{job}"}}', lambda v: v == 1.0)
    targets = prometheus.api("targets")["activeTargets"]
    assert {t["labels"]["job"] for t in targets} == {COORDINATOR_JOB, ASSIGNOR_JOB}
    for t in targets:
        assert t["health"] == "up" and t["lastError"] == "", t
    for job in (COORDINATOR_JOB, ASSIGNOR_JOB):
        samples = prometheus.value(f'scrape_samples_scraped{{job="{job}"}}')
        assert samples is not None and samples > 0, job

    v = prometheus.value  # each query below reads what the scrapes stored
    c = f'job="{COORDINATOR_JOB}"'

    # RPC results per method and error code, and latency histograms per method.
    heartbeats = v(f'sum(connect_coordinator_rpc_results_total{{{c},method="ConnectGroupHeartbeat"}})')
    assert heartbeats is not None and heartbeats > 0
    ok_heartbeats = v(
        f'sum(connect_coordinator_rpc_results_total{{{c},method="ConnectGroupHeartbeat",error_code="NONE"}})'
    )
    assert ok_heartbeats == heartbeats  # every heartbeat of the test succeeded
    assert v(f'connect_coordinator_rpc_duration_seconds_count{{{c},method="ConnectGroupHeartbeat"}}') == heartbeats
    put = v(f'sum(connect_coordinator_rpc_results_total{{{c},method="PutConnector"}})')
    assert put == 2
    buckets = prometheus.query(f'connect_coordinator_rpc_duration_seconds_bucket{{{c},method="ConnectGroupHeartbeat"}}')
    assert len(buckets) > 1 and any(b["metric"]["le"] == "+Inf" for b in buckets)
    inf = v(f'connect_coordinator_rpc_duration_seconds_bucket{{{c},method="ConnectGroupHeartbeat",le="+Inf"}}')
    assert inf == heartbeats
    p99 = v(
        "histogram_quantile(0.99, sum by (le) "
        f'(connect_coordinator_rpc_duration_seconds_bucket{{{c},method="ConnectGroupHeartbeat"}}))'
    )
    assert p99 is not None and 0 < p99 <= 10

    # Groups by type and by state sum to the number of groups; one Stable member.
    assert v(f"sum(connect_coordinator_connect_groups{{{c}}})") == group_count
    assert v(f"sum(connect_coordinator_groups{{{c}}})") == group_count
    assert v(f'connect_coordinator_connect_groups{{{c},state="stable"}}') == 1
    assert v(f"connect_coordinator_members{{{c}}}") == 1

    # Rebalances, target assignments through the assignor service, storage commits.
    rebalances = v(f"sum(connect_coordinator_rebalances_total{{{c}}})")
    assert rebalances is not None and rebalances > 0
    assignor_ok = v(f'connect_coordinator_assignor_calls_total{{{c},result="ok"}}')
    assert assignor_ok is not None and assignor_ok > 0
    assignments = v(f"sum(connect_coordinator_assignments_total{{{c}}})")
    assert assignments is not None and assignments > 0
    commits = v(f"connect_coordinator_storage_commit_duration_seconds_count{{{c}}}")
    assert commits is not None and commits > 0
    assert v(f"connect_coordinator_event_queue_size{{{c}}}") is not None
    assert v(f"connect_coordinator_shard_load_duration_seconds{{{c}}}") is not None

    # The assignor service: the coordinator's calls plus the direct one.
    a = f'job="{ASSIGNOR_JOB}"'
    # (Two processes, scraped at different instants: give the later scrape a moment to catch up.)
    assigns = prometheus.wait_for(
        f'sum(connect_assignor_requests_total{{{a},method="Assign",result="ok"}})',
        lambda n: n is not None and n >= assignor_ok + 1,
        timeout_s=5,
    )
    assert v(f"sum(connect_assignor_assign_duration_seconds_count{{{a}}})") == assigns
    assert v(f"connect_assignor_requests_in_flight{{{a}}}") == 0
    moved = v(f"sum(connect_assignor_moved_items_total{{{a}}})")
    assert moved is not None and moved > 0
