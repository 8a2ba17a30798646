"""Remote assignors for real: the Node.js example (examples/assignors/node) and the built-in
`connect-assignor`, both as processes, one coordinator process pointed at both, reference workers
(`connect-worker`) choosing an assignor by name. `make setup` installs the example's npm packages.

Covered: both groups converge to the targets their assignor returns; services started after the
coordinator are found (on demand, before the join is answered: the periodic refresh is set to 10
minutes here so it cannot be what finds them); a service restarted with an added name is picked up
without restarting the coordinator; a name no service serves is refused after a fresh look;
`connect-groups describe` and the metrics name the service that computed each target.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, assignor_pb2, assignor_pb2_grpc, common_pb2
from services.common.items import Items
from tests.e2e.test_service_mode import AssignorProcess
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess
from tests.fixtures.net import free_port
from tests.fixtures.processes import Processes, wait_for_port

DESCRIBE = ("describe", "g-js")
NODE_EXAMPLE = REPO / "examples" / "assignors" / "node"


class NodeAssignor:
    """`node assignor.js` on a fixed loopback port (so it can be restarted at the same address)."""

    def __init__(self, processes: Processes, port: int) -> None:
        self.processes = processes
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, names: str) -> NodeAssignor:
        if not (NODE_EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir():
            raise RuntimeError(f"{NODE_EXAMPLE}/node_modules is missing: run `make setup` (npm ci)")
        mp = self.processes._popen(
            f"node-assignor-{len(self.processes.started)}",
            ["node", str(NODE_EXAMPLE / "assignor.js"), "--listen", self.address, "--names", names],
        )
        host, _, port = self.address.rpartition(":")
        wait_for_port(host, int(port))
        self.proc = mp.proc
        self.managed = mp
        return self

    def stop(self) -> None:
        self.managed.stop()


def assign_stub(address: str) -> assignor_pb2_grpc.ConnectAssignorStub:
    return assignor_pb2_grpc.ConnectAssignorStub(grpc.insecure_channel(address))


def converged(group: admin_pb2.DescribedGroup, members: int, items: int) -> bool:
    """Stable, every member runs its target, and the targets cover every connector and task."""
    targets = [Items.from_proto(m.target_assignment) for m in group.members]
    return (
        group.group_state == "Stable"
        and len(group.members) == members
        and all(Items.from_proto(m.assignment) == t for m, t in zip(group.members, targets, strict=True))
        and sum(len(t) for t in targets) == items
    )


def wait_converged(client: Client, members: int, items: int, timeout_s: float = 30.0) -> admin_pb2.DescribedGroup:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        g = client.describe()
        if converged(g, members, items):
            return g
        if time.monotonic() > deadline:
            raise AssertionError(f"group {client.group_id} did not converge in {timeout_s}s: {g}")
        time.sleep(0.1)


def what_the_assignor_returns(address: str, group: admin_pb2.DescribedGroup, version: int) -> dict[str, Items]:
    """Ask the assignor itself, on the group's current state (its installed target as current_target):
    both assignors keep a balanced target as it is, so this must be exactly what is installed."""
    req = assignor_pb2.AssignRequest(
        assignor_name=group.assignor_name, group_id=group.group_id, group_epoch=group.group_epoch, now_ms=1
    )
    req.connectors.extend(group.connectors)
    req.current_target.assignment_epoch = group.assignment_epoch
    for m in group.members:
        gm = req.members.add(
            member_id=m.member_id,
            member_epoch=m.member_epoch,
            assignor=common_pb2.Assignor(name=group.assignor_name, version=version),
        )
        gm.owned.CopyFrom(m.assignment)
        gm.target.CopyFrom(m.target_assignment)
        req.current_target.members.add(member_id=m.member_id).connectors_and_tasks.CopyFrom(m.target_assignment)
    resp = assign_stub(address).Assign(req, timeout=10)
    assert resp.error == 0, resp.error_message
    return {mt.member_id: Items.from_proto(mt.connectors_and_tasks) for mt in resp.members}


def installed(group: admin_pb2.DescribedGroup) -> dict[str, Items]:
    return {m.member_id: Items.from_proto(m.target_assignment) for m in group.members}


def metric(metrics_url: str, line_start: str) -> float:
    body = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(line_start)]
    assert values, f"no {line_start} in /metrics"
    return values[0]


@pytest.fixture
def coordinator_first(tmp_path: Path) -> Iterator[tuple[CoordinatorProcess, str, str]]:
    """A coordinator pointed at two assignor services that are not running yet."""
    py_address, node_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    coordinator = CoordinatorProcess(
        f"sqlite:///{tmp_path / 'coordinator.db'}",
        extra_args=[
            *("--assignor-address", py_address, "--assignor-address", node_address),
            *("--assignor-refresh-interval", "600"),
        ],
    ).start()
    try:
        yield coordinator, py_address, node_address
    finally:
        coordinator.kill()


def test_workers_choose_the_built_in_or_the_node_assignor_by_name(
    coordinator_first: tuple[CoordinatorProcess, str, str], processes: Processes, tmp_path: Path
) -> None:
    coordinator, py_address, node_address = coordinator_first
    # Both services start after the coordinator (whose first look found nothing).
    py_port = int(py_address.rpartition(":")[2])
    python_assignor = AssignorProcess(py_port).start()
    try:
        node = NodeAssignor(processes, int(node_address.rpartition(":")[2])).start("round-robin-js")
        js, ic = Client(coordinator.address, "g-js"), Client(coordinator.address, "g-ic")
        assert js.put_connector("orders", 5).error_code == 0
        assert js.put_connector("audit", 1).error_code == 0
        assert ic.put_connector("billing", 3).error_code == 0
        for i in range(3):
            processes.start_worker(coordinator.address, "g-js", name=f"js-{i}", extra=["--assignors", "round-robin-js"])
        for i in range(2):
            processes.start_worker(
                coordinator.address, "g-ic", name=f"ic-{i}", extra=["--assignors", "incremental-cooperative"]
            )

        g_js = wait_converged(js, members=3, items=8)
        g_ic = wait_converged(ic, members=2, items=4)
        assert (g_js.assignor_name, g_js.target_computed_by) == ("round-robin-js", node_address)
        assert (g_ic.assignor_name, g_ic.target_computed_by) == ("incremental-cooperative", py_address)
        assert installed(g_js) == what_the_assignor_returns(node_address, g_js, version=0)
        assert installed(g_ic) == what_the_assignor_returns(py_address, g_ic, version=2)
        assert sorted(len(t) for t in installed(g_js).values()) == [2, 3, 3]

        # connect-groups shows who computed the target.
        out = subprocess.run(
            [sys.executable, "-m", "services.coordinator.cli.groups", "--coordinator", coordinator.address, *DESCRIBE],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert f"target_computed_by={node_address}" in out
        # Metrics: which service computed targets, and the discovery state.
        m = coordinator.metrics_address
        installed_by = 'connect_coordinator_assignor_service_assignments_total{result="installed",service='
        assert metric(m, installed_by + f'"{node_address}"}}') >= 1
        assert metric(m, installed_by + f'"{py_address}"}}') >= 1
        assert metric(m, f'connect_coordinator_assignor_service_up{{service="{node_address}"}}') == 1
        assert metric(m, "connect_coordinator_assignor_name_conflicts") == 0

        # A name no service serves: refused (after a fresh look), the worker says why and exits.
        stray = processes.start_worker(coordinator.address, "g-x", name="stray", extra=["--assignors", "nope-js"])
        assert stray.wait(30) == 1
        assert "does not provide 'nope-js'" in stray.log()

        # The Node service is redeployed with an added name: used without restarting the coordinator.
        node.stop()
        NodeAssignor(processes, int(node_address.rpartition(":")[2])).start("round-robin-js,round-robin-js-v2")
        v2 = Client(coordinator.address, "g-v2")
        assert v2.put_connector("events", 3).error_code == 0
        for i in range(2):
            processes.start_worker(
                coordinator.address, "g-v2", name=f"v2-{i}", extra=["--assignors", "round-robin-js-v2"]
            )
        g_v2 = wait_converged(v2, members=2, items=4)
        assert (g_v2.assignor_name, g_v2.target_computed_by) == ("round-robin-js-v2", node_address)
        assert installed(g_v2) == what_the_assignor_returns(node_address, g_v2, version=0)
        # The first groups were not disturbed.
        assert installed(js.describe()) == installed(g_js)
        assert installed(ic.describe()) == installed(g_ic)
    finally:
        python_assignor.kill()


def test_in_client_side_mode_a_worker_refuses_to_compute_with_an_assignor_it_does_not_implement(
    processes: Processes,
) -> None:
    import time

    coordinator = processes.start_coordinator()  # no assignor service: workers compute
    client = Client(coordinator.address, "g-local")
    assert client.put_connector("orders", 2).error_code == 0
    worker = processes.start_worker(coordinator.address, "g-local", extra=["--assignors", "round-robin-js"])
    refusal = "this worker cannot compute with assignor 'round-robin-js' for group g-local (client-side mode)"
    deadline = time.monotonic() + 30
    while refusal not in worker.log():
        assert time.monotonic() < deadline, worker.log()
        time.sleep(0.1)
    assert "not built into this worker" in worker.log()  # said at start
    group = client.describe()
    assert (group.group_state, group.assignment_epoch, len(group.members)) == ("Assigning", 0, 1)
    assert worker.alive()  # a refusal, not a crash: it keeps its membership
