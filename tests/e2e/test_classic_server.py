"""The classic protocol served for real (issue 35): ConnectClassicGroup over gRPC on a real
coordinator process, raw clients playing Connect workers: MEMBER_ID_REQUIRED, JoinGroup answers
parked until the rebalance completes, the leader's SyncGroup stored and each member answered its own
bytes, heartbeats, a third member's join making the others rejoin (REBALANCE_IN_PROGRESS), leaving,
bad input answered in band with nothing stored."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator

import grpc
import pytest

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, classic_pb2, classic_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.classic import encode_assignment, join_protocols
from services.classic.connect_protocol import ConnectAssignment
from services.common.items import TaskId
from tests.fixtures.coordinator import FAST_SETTINGS, CoordinatorProcess

pytestmark = pytest.mark.timeout(120)

SETTINGS = [*FAST_SETTINGS, "group.classic.initial.rebalance.delay.ms=200", "group.classic.min.session.timeout.ms=1000"]


@pytest.fixture
def stub(tmp_path: object) -> Iterator[classic_pb2_grpc.ConnectClassicGroupStub]:
    proc = CoordinatorProcess(f"sqlite:///{tmp_path}/c.db", settings=SETTINGS).start()
    try:
        with grpc.insecure_channel(proc.address) as channel:
            stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
            stub.admin = admin_pb2_grpc.ConnectGroupAdminStub(channel)  # type: ignore[attr-defined]
            yield stub
    finally:
        proc.kill()


def _join(stub: classic_pb2_grpc.ConnectClassicGroupStub, member_id: str, url: str) -> classic_pb2.JoinGroupResponse:
    req = classic_pb2.JoinGroupRequest(
        group_id="cg",
        member_id=member_id,
        protocol_type="connect",
        session_timeout_ms=5_000,
        rebalance_timeout_ms=10_000,
        client_id=url,
    )
    for name, metadata in join_protocols("sessioned", url, 0, None):
        req.protocols.add(name=name, metadata=metadata)
    return stub.JoinGroup(req, timeout=30)


def _first_join(stub: classic_pb2_grpc.ConnectClassicGroupStub, url: str) -> str:
    first = _join(stub, "", url)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    return first.member_id


def test_two_members_rebalance_sync_heartbeat_and_a_third_makes_them_rejoin(
    stub: classic_pb2_grpc.ConnectClassicGroupStub,
) -> None:
    a, b = _first_join(stub, "http://a:8083"), _first_join(stub, "http://b:8083")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ja, jb = pool.submit(_join, stub, a, "http://a:8083"), pool.submit(_join, stub, b, "http://b:8083")
        ra, rb = ja.result(30), jb.result(30)
    assert ra.error_code == rb.error_code == ErrorCode.NONE, (ra, rb)
    assert ra.generation_id == rb.generation_id >= 1 and ra.protocol_name == "sessioned"
    assert ra.leader == rb.leader in (a, b)
    leader, follower = (ra, rb) if ra.leader == a else (rb, ra)
    assert sorted(m.member_id for m in leader.members) == sorted([a, b]) and not follower.members
    gen = ra.generation_id
    mine = {
        a: encode_assignment(ConnectAssignment(2, 0, leader.leader, "http://a:8083", 0, ("c1",), (TaskId("c1", 0),))),
        b: encode_assignment(ConnectAssignment(2, 0, leader.leader, "http://a:8083", 0, (), (TaskId("c1", 1),))),
    }
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        fs = pool.submit(
            stub.SyncGroup,
            classic_pb2.SyncGroupRequest(group_id="cg", member_id=follower.member_id, generation_id=gen),
            timeout=30,
        )
        sync_leader = stub.SyncGroup(
            classic_pb2.SyncGroupRequest(
                group_id="cg",
                member_id=leader.member_id,
                generation_id=gen,
                protocol_name="sessioned",
                assignments=[classic_pb2.ClassicAssignment(member_id=m, assignment=x) for m, x in mine.items()],
            ),
            timeout=30,
        )
        sync_follower = fs.result(30)
    assert sync_leader.error_code == sync_follower.error_code == ErrorCode.NONE
    assert sync_leader.assignment == mine[leader.member_id]
    assert sync_follower.assignment == mine[follower.member_id]
    for m in (a, b):
        hb = stub.Heartbeat(classic_pb2.HeartbeatRequest(group_id="cg", member_id=m, generation_id=gen), timeout=10)
        assert hb.error_code == ErrorCode.NONE
    stale = stub.Heartbeat(classic_pb2.HeartbeatRequest(group_id="cg", member_id=a, generation_id=gen - 1), timeout=10)
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    described = stub.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["cg"]), timeout=10)  # type: ignore[attr-defined]
    assert described.groups[0].group_type == "classic"

    # A third member: its join parks; the others learn of the rebalance from their heartbeats.
    c = _first_join(stub, "http://c:8083")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        jc = pool.submit(_join, stub, c, "http://c:8083")
        for _ in range(200):  # until the newcomer's join (sent concurrently) has started the rebalance
            hb = stub.Heartbeat(classic_pb2.HeartbeatRequest(group_id="cg", member_id=a, generation_id=gen), timeout=10)
            if hb.error_code != ErrorCode.NONE:
                break
            time.sleep(0.01)
        assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = [pool.submit(_join, stub, m, f"http://{n}:8083") for m, n in ((a, "a"), (b, "b"))]
        answers = [f.result(30) for f in (*rejoined, jc)]
    assert {r.error_code for r in answers} == {ErrorCode.NONE}
    assert {r.generation_id for r in answers} == {gen + 1}
    left = stub.LeaveGroup(classic_pb2.LeaveGroupRequest(group_id="cg", member_ids=[c, "nobody"]), timeout=10)
    assert left.error_code == ErrorCode.NONE
    assert [(r.member_id, r.error_code) for r in left.results] == [
        (c, ErrorCode.NONE),
        ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
    ]


def test_bad_classic_input_is_refused_in_band_and_stores_nothing(
    stub: classic_pb2_grpc.ConnectClassicGroupStub,
) -> None:
    bad_type = stub.JoinGroup(
        classic_pb2.JoinGroupRequest(
            group_id="bad",
            protocol_type="consumer",
            session_timeout_ms=5_000,
            rebalance_timeout_ms=5_000,
            protocols=[classic_pb2.ClassicProtocol(name="range", metadata=b"x")],
        ),
        timeout=10,
    )
    assert bad_type.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    huge = stub.JoinGroup(
        classic_pb2.JoinGroupRequest(
            group_id="bad",
            protocol_type="connect",
            session_timeout_ms=5_000,
            rebalance_timeout_ms=5_000,
            protocols=[classic_pb2.ClassicProtocol(name="sessioned", metadata=b"x" * (10 * 1024 * 1024))],
        ),
        timeout=30,
    )
    assert huge.error_code == ErrorCode.INVALID_REQUEST and "metadata" in huge.error_message
    unknown = stub.SyncGroup(classic_pb2.SyncGroupRequest(group_id="bad", member_id="m", generation_id=1), timeout=10)
    assert unknown.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND)
    described = stub.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["bad"]), timeout=10)  # type: ignore[attr-defined]
    assert described.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_coordinator_killed_mid_rebalance_comes_back_with_the_generation_and_members(
    database_url: str,
) -> None:
    """SIGKILL while a third member's join waits for the others; a new coordinator on the same
    database (SQLite and PostgreSQL) has the group at the same generation or later, with its members,
    and the rebalance completes at a generation above the one before the kill."""
    proc = CoordinatorProcess(database_url, settings=SETTINGS).start()
    try:
        with grpc.insecure_channel(proc.address) as channel:
            stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
            a, b = _first_join(stub, "http://a:8083"), _first_join(stub, "http://b:8083")
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                ra, rb = [f.result(30) for f in (pool.submit(_join, stub, a, "a"), pool.submit(_join, stub, b, "b"))]
            gen = ra.generation_id
            for m, r in ((a, ra), (b, rb)):
                sync = classic_pb2.SyncGroupRequest(group_id="cg", member_id=m, generation_id=gen)
                if r.leader == m:
                    sync.assignments.add(member_id=a, assignment=b"for-a")
                    sync.assignments.add(member_id=b, assignment=b"for-b")
                    assert stub.SyncGroup(sync, timeout=30).assignment == (b"for-a" if m == a else b"for-b")
            c = _first_join(stub, "http://c:8083")
            parked = concurrent.futures.ThreadPoolExecutor(1).submit(_join, stub, c, "c")
            admin = admin_pb2_grpc.ConnectGroupAdminStub(channel)
            # The parked join is sent from another thread: wait until the coordinator has it (and stored it).
            deadline = time.monotonic() + 30
            describe = admin_pb2.DescribeGroupsRequest(group_ids=["cg"])
            while True:
                described = admin.DescribeGroups(describe, timeout=10).groups[0]
                if len(described.members) == 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert len(described.members) == 3
        proc.kill()
        with pytest.raises(grpc.RpcError):
            parked.result(30)
        proc = CoordinatorProcess(database_url, settings=SETTINGS).start()
        with grpc.insecure_channel(proc.address) as channel:
            stub = classic_pb2_grpc.ConnectClassicGroupStub(channel)
            hb = stub.Heartbeat(classic_pb2.HeartbeatRequest(group_id="cg", member_id=a, generation_id=gen), timeout=10)
            assert hb.error_code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS), hb
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                futures = [pool.submit(_join, stub, m, n) for m, n in ((a, "a"), (b, "b"), (c, "c"))]
                answers = [f.result(60) for f in futures]
            assert {r.error_code for r in answers} == {ErrorCode.NONE}, answers
            generations = {r.generation_id for r in answers}
            assert len(generations) == 1 and generations.pop() > gen  # never backwards
    finally:
        proc.kill()
