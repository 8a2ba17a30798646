"""Issue 33's attacks on bounded state, on a real coordinator over real gRPC, while a real
`connect-worker` in another group runs its work (read from its status file throughout): a flood of
joins under fresh group ids (findings 1 and its cap), DescribeGroups naming one group 200,000 times
(finding 2), and oversized assignor metadata (finding 7). Each attack must fail in band, leave no
state behind, and never stop the live worker's work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from tests.fixtures.coordinator import assignors
from tests.fixtures.processes import WORKER_TEST_SETTINGS, ManagedProcess, Processes
from tests.worker.observe import Admin, Fleet, Snapshot

pytestmark = pytest.mark.timeout(120)

MAX_GROUPS = 60
SETTINGS = (
    *WORKER_TEST_SETTINGS,
    f"group.coordinator.max.groups={MAX_GROUPS}",
    "group.connect.max.member.metadata.bytes=100000",
    "group.connect.max.group.metadata.bytes=250000",
)


@pytest.fixture
def live(processes: Processes, tmp_path: Path) -> Iterator[tuple[ManagedProcess, Admin, Fleet]]:
    """A coordinator and one worker running group `live` (2 connectors, 5 tasks)."""
    coordinator = processes.start_coordinator(settings=SETTINGS)
    admin = Admin(coordinator.address, "live")
    admin.put("a", 2)
    admin.put("b", 3)
    fleet = Fleet()
    status = fleet.add(tmp_path / "live.json")
    processes.start_worker(coordinator.address, "live", name="live", status_file=status)
    fleet.wait_for("the live worker runs everything", lambda s: s.union() == admin.expected())
    yield coordinator, admin, fleet
    admin.close()


def _keeps_its_work(fleet: Fleet, expected: Items) -> Callable[[], None]:
    """Watch the live worker's status file in the background until the returned stop is called;
    it fails the test if the worker ever ran less than all of `expected` meanwhile."""
    stop = threading.Event()
    seen: list[Snapshot] = []
    problems: list[str] = []

    def run() -> None:
        while not stop.is_set():
            snap = fleet.observe()
            seen.append(snap)
            if snap.union() != expected:
                problems.append(f"the live worker ran {snap.union()} instead of {expected}")
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def done() -> None:
        time.sleep(0.5)  # and a little after the attack
        stop.set()
        thread.join(10)
        assert not problems, problems[:3]
        assert len(seen) >= 3

    return done


def _join(stub: coordinator_pb2_grpc.ConnectGroupCoordinatorStub, gid: str, metadata: bytes = b"") -> Any:
    client = assignors()
    if metadata:
        client.assignors[0].metadata = metadata
    return stub.ConnectGroupHeartbeat(
        coordinator_pb2.ConnectGroupHeartbeatRequest(
            group_id=gid, member_epoch=0, rebalance_timeout_ms=5_000, client_assignors=client
        ),
        timeout=10,
    )


def test_a_flood_of_fresh_groups_is_capped_and_retired_and_the_live_group_runs_throughout(
    live: tuple[ManagedProcess, Admin, Fleet],
) -> None:
    coordinator, admin, fleet = live
    done = _keeps_its_work(fleet, admin.expected())
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel)
        admin_stub = admin_pb2_grpc.ConnectGroupAdminStub(channel)
        answers = [_join(stub, f"flood-{i}") for i in range(3 * MAX_GROUPS)]
        accepted = [
            (f"flood-{i}", a) for i, a in enumerate(answers) if a.error_code != ErrorCode.GROUP_MAX_SIZE_REACHED
        ]
        refused = [a for a in answers if a.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED]
        assert len(accepted) == MAX_GROUPS - 1  # `live` is the first of the cap
        assert all(a.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT) for _, a in accepted)
        assert len(refused) == 2 * MAX_GROUPS + 1
        assert f"group.coordinator.max.groups is {MAX_GROUPS}" in refused[0].error_message
        put = admin_stub.PutConnector(admin_pb2.PutConnectorRequest(group_id="one-more", connector="c", task_count=1))
        assert put.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        listed = admin_stub.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        assert len(listed.groups) == MAX_GROUPS
        # The flood's members leave: their groups (only joins made them) go one session timeout later.
        for gid, a in accepted:
            stub.ConnectGroupHeartbeat(
                coordinator_pb2.ConnectGroupHeartbeatRequest(group_id=gid, member_id=a.member_id, member_epoch=-1),
                timeout=10,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            listed = admin_stub.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
            if [g.group_id for g in listed.groups] == ["live"]:
                break
            time.sleep(0.2)
        assert [g.group_id for g in listed.groups] == ["live"]
        assert _join(stub, "after-the-flood").error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT)
    done()


def test_describe_naming_a_group_200000_times_is_refused_unread_and_repeats_are_answered_once(
    live: tuple[ManagedProcess, Admin, Fleet],
) -> None:
    coordinator, admin, fleet = live
    done = _keeps_its_work(fleet, admin.expected())
    with grpc.insecure_channel(coordinator.address) as channel:
        admin_stub = admin_pb2_grpc.ConnectGroupAdminStub(channel)
        request = admin_pb2.DescribeGroupsRequest(group_ids=["live"] * 200_000)
        assert request.ByteSize() > 1_000_000
        for _ in range(6):
            resp = admin_stub.DescribeGroups(request, timeout=30)
            assert [(g.error_code, g.error_message) for g in resp.groups] == [
                (ErrorCode.INVALID_REQUEST, "group_ids: 200000 ids; group.connect.max.describe.group.ids is 1000")
            ]
        repeated = admin_stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["live"] * 1_000), timeout=30)
        assert [g.group_id for g in repeated.groups] == ["live"]
        assert repeated.groups[0].error_code == ErrorCode.NONE and len(repeated.groups[0].members) == 1
        assert repeated.ByteSize() < 10_000
    done()


def test_oversized_assignor_metadata_is_refused_and_stores_nothing(live: tuple[ManagedProcess, Admin, Fleet]) -> None:
    coordinator, admin, fleet = live
    done = _keeps_its_work(fleet, admin.expected())
    with grpc.insecure_channel(coordinator.address) as channel:
        stub = coordinator_pb2_grpc.ConnectGroupCoordinatorStub(channel)
        admin_stub = admin_pb2_grpc.ConnectGroupAdminStub(channel)
        big = _join(stub, "meta", b"x" * (15 * 1024 * 1024 // 2))  # 7.5 MiB, under the request limit
        assert big.error_code == ErrorCode.INVALID_REQUEST
        assert "group.connect.max.member.metadata.bytes is 100000" in big.error_message
        gone = admin_stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["meta"]), timeout=10)
        assert gone.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND  # not even the group
        sizes = [_join(stub, "meta", b"y" * 90_000).error_code for _ in range(3)]
        assert all(c in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT) for c in sizes[:2]), sizes
        assert sizes[2] == ErrorCode.INVALID_REQUEST  # 270,000 bytes together: over the group's 250,000
        described = admin_stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["meta"]), timeout=10)
        assert len(described.groups[0].members) == 2
    done()
