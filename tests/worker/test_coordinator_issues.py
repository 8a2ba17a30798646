"""Coordinator problems found while building the worker SDK, as minimal reproductions (kept as
regression tests once fixed). A reproduction of an open problem is marked xfail(strict=True), so
the fix cannot go unnoticed: the test then passes, strict fails it, and the marker comes off."""

from __future__ import annotations

import grpc
import pytest

from connect.coordinator.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.fixtures.processes import Processes
from tests.worker.observe import Admin

pytestmark = pytest.mark.timeout(60)


def test_restart_while_an_assignment_is_pending(processes: Processes) -> None:
    """Found: CoordinatorRuntime._load awaited _commit() for the records load() returns (the
    assignment_requested event of a group whose epoch is ahead of its assignment epoch) before the
    writer task existed, so the restarted coordinator never listened. Fixed in ca321a9."""
    first = processes.start_coordinator(name="coordinator-1")
    admin = Admin(first.address, "g")
    admin.put("a", 1)
    admin.close()
    with grpc.insecure_channel(first.address) as channel:
        join = coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id="g",
            member_epoch=0,
            rebalance_timeout_ms=60_000,
            client_assignors=common_pb2.ClientAssignors(
                assignors=[common_pb2.Assignor(name="eager", minimum_version=0, maximum_version=0)]
            ),
            owned=common_pb2.ConnectorsAndTasks(),
        )
        r = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel).ConnectGroupHeartbeat(join, timeout=10)
    # The group epoch is now ahead of the assignment epoch; the member is asked to compute.
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    first.kill()
    # A crash at this point is ordinary (every join, leave or connector change opens this window).
    second = processes.start_coordinator(name="coordinator-2", timeout_s=5)
    assert second.alive()
