"""Bounds on input (SPEC §9): each limit hit gets INVALID_REQUEST naming the field and the limit;
what is echoed back is truncated; a flood of oversized and unparsable requests leaves the server
healthy with bounded memory; ListGroups while loading answers in-band."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime
from services.coordinator.runtime.server import start_server
from services.storage import Storage
from tests.fixtures.coordinator import FAST_SETTINGS, Client, CoordinatorProcess, assignors

LIMITS = [
    "group.connect.max.id.length=40",
    "group.connect.max.items.per.request=10",
    "group.connect.max.members.per.group=2",
    "group.connect.max.connectors.per.group=2",
    "group.connect.max.tasks.per.group=5",
    "group.connect.max.tasks.per.connector=4",
    "group.connect.max.rebalance.timeout.ms=60000",
    "group.connect.max.request.bytes=65536",
]
HEARTBEAT = "/connect.coordinator.v1.ConnectGroupCoordinator/ConnectGroupHeartbeat"


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    tmp = tmp_path_factory.mktemp("bounds")
    proc = CoordinatorProcess(f"sqlite:///{tmp / 'c.db'}", settings=[*FAST_SETTINGS, *LIMITS]).start()
    try:
        yield proc
    finally:
        proc.kill()


def _join(group: str, **fields: object) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id=group, member_epoch=0, rebalance_timeout_ms=30_000, client_assignors=assignors()
    )
    for k, v in fields.items():
        if isinstance(v, common_pb2.ConnectorsAndTasks | common_pb2.ClientAssignors):
            getattr(req, k).CopyFrom(v)
        else:
            setattr(req, k, v)
    return req


def _invalid(message: str, *words: str) -> bool:
    return all(w in message for w in words)


def test_each_limit_gets_invalid_request_naming_the_field_and_the_limit(bounded: CoordinatorProcess) -> None:
    c = Client(bounded.address, "bounds")
    long = "x" * 41
    many = Items.of([f"c{i}" for i in range(6)], [("c0", i) for i in range(5)])
    cases = [
        (_join(long), "group_id", "40"),
        (_join("bounds", member_id=long, member_epoch=3), "member_id", "40"),
        (_join("bounds", instance_id=long), "instance_id", "40"),
        (_join("bounds", client_id=long), "client_id", "40"),
        (_join("bounds", url="u" * 4097), "url", "4096"),
        (_join("bounds", client_assignors=assignors((long, 1, 1))), "client_assignors.assignors[0].name", "40"),
        (
            _join("bounds", owned=many.to_proto(common_pb2.ConnectorsAndTasks()) or common_pb2.ConnectorsAndTasks()),
            "owned",
            "10",
        ),
        (_join("bounds", rebalance_timeout_ms=2**31 - 1), "rebalance_timeout_ms", "60000"),
        (_join("bounds", request_sequence=-(2**63)), "request_sequence", ">= 0"),
    ]
    for req, field, limit in cases:
        r = c.coord.ConnectGroupHeartbeat(req, timeout=10)
        assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(r.error_message, field, limit), (field, r)

    admin = c.admin
    put = admin_pb2.PutConnectorRequest
    assert admin.PutConnector(
        put(group_id="bounds", connector=long, task_count=1), timeout=10
    ).error_message.startswith("connector")
    r = admin.PutConnector(put(group_id="bounds", connector="A", task_count=5), timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(
        r.error_message, "task_count", "4", "group.connect.max.tasks.per.connector"
    )
    assert (
        admin.PutConnector(put(group_id="bounds", connector="A", task_count=3), timeout=10).error_code == ErrorCode.NONE
    )
    r = admin.PutConnector(put(group_id="bounds", connector="B", task_count=3), timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(
        r.error_message, "task_count", "6", "group.connect.max.tasks.per.group = 5"
    )
    assert (
        admin.PutConnector(put(group_id="bounds", connector="B", task_count=2), timeout=10).error_code == ErrorCode.NONE
    )
    r = admin.PutConnector(put(group_id="bounds", connector="C", task_count=0), timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(
        r.error_message, "connector", "group.connect.max.connectors.per.group = 2"
    )

    alter = admin_pb2.AlterConfigsRequest(
        group_id="bounds", set=[admin_pb2.ConfigEntry(name="max.size", value="1" * 41)]
    )
    r = admin.AlterConfigs(alter, timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(r.error_message, "set[0].value", "40")
    alter = admin_pb2.AlterConfigsRequest(group_id="bounds", delete=["max.size"] * 11)
    assert _invalid(admin.AlterConfigs(alter, timeout=10).error_message, "set + delete", "10")
    r = admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["bounds"] * 11), timeout=10)
    assert [g.error_code for g in r.groups] == [ErrorCode.INVALID_REQUEST] and _invalid(
        r.groups[0].error_message, "group_ids", "10"
    )
    r = admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=[long]), timeout=10)
    assert r.results[0].error_code == ErrorCode.INVALID_REQUEST and "40" in r.results[0].error_message
    r = admin.DescribeConfigs(admin_pb2.DescribeConfigsRequest(group_id=long), timeout=10)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "40" in r.error_message
    assert (
        admin.ListGroups(admin_pb2.ListGroupsRequest(states_filter=["Stable"] * 11), timeout=10).error_code
        == ErrorCode.INVALID_REQUEST
    )

    # Members per group: the third join is refused, naming the limit.
    first = c.heartbeat("", 0)
    second = c.heartbeat("", 0)
    assert first.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT) and second.member_id
    third = c.heartbeat("", 0)
    assert (
        third.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        and "group.connect.max.members.per.group" in third.error_message
    )

    # Install: items in one request.
    targets = {
        first.member_id: Items.of([], [("A", 0), ("A", 1), ("A", 2)]),
        **{f"m{i}": Items.of(["A"]) for i in range(10)},
    }
    r = c.install(first.member_id, first.member_epoch, 1, targets)
    assert r.error_code == ErrorCode.INVALID_REQUEST and _invalid(r.error_message, "members", "10"), r
    c.close()


def test_oversized_input_is_not_echoed_back(bounded: CoordinatorProcess) -> None:
    c = Client(bounded.address)
    huge = "g" * 60_000  # under the request size limit, far over the id length
    r = c.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[huge]), timeout=10)
    assert r.groups[0].error_code == ErrorCode.INVALID_REQUEST and r.ByteSize() < 1_000
    alter = admin_pb2.AlterConfigsRequest(group_id="echo", set=[admin_pb2.ConfigEntry(name="n" * 60_000, value="v")])
    r2 = c.admin.AlterConfigs(alter, timeout=10)
    assert r2.error_code == ErrorCode.INVALID_REQUEST and len(r2.error_message) < 300
    r3 = c.admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=[huge]), timeout=10)
    assert r3.ByteSize() < 1_000
    c.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_flood_of_oversized_and_unparsable_requests_leaves_the_server_healthy_with_bounded_memory(
    bounded: CoordinatorProcess,
) -> None:
    assert bounded.proc is not None
    pid = bounded.proc.pid
    channel = grpc.insecure_channel(bounded.address, options=[("grpc.max_send_message_length", 8 * 1024 * 1024)])
    raw = channel.unary_unary(HEARTBEAT, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    under = _join("f" * 60_000).SerializeToString()  # parses, refused by validation
    over = _join("f" * 100_000).SerializeToString()  # over max.request.bytes: refused by gRPC unread
    garbage = b"\x0a\x80" + b"\xff" * 1000

    def flood(n: int) -> None:
        for i in range(n):
            answer = coordinator_pb2.ConnectGroupHeartbeatResponse.FromString(raw(under, timeout=10))
            assert answer.error_code == ErrorCode.INVALID_REQUEST and len(answer.error_message) < 300
            if i % 10 == 0:  # (a refused message costs the client ~0.2 s: fewer of them)
                with pytest.raises(grpc.RpcError) as err:
                    raw(over, timeout=10)
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            answer = coordinator_pb2.ConnectGroupHeartbeatResponse.FromString(raw(garbage, timeout=10))
            assert answer.error_code == ErrorCode.INVALID_REQUEST and "does not parse" in answer.error_message

    flood(50)  # warm-up: allocator arenas, caches
    before = _rss_kb(pid)
    flood(400)
    after = _rss_kb(pid)
    # 40 x 100 kB were sent at it, 400 x 60 kB and 400 x 1 kB of garbage read: nothing of that may stay.
    assert after - before < 20_000, (before, after)

    with grpc.insecure_channel(bounded.address) as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    c = Client(bounded.address, "after-flood")
    assert c.heartbeat("", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    c.close()
    channel.close()
    # Counted, and logged only now and then (not one traceback per request).
    metrics = urllib.request.urlopen(bounded.metrics_address, timeout=10).read().decode()
    counted = [
        line for line in metrics.splitlines() if line.startswith("connect_coordinator_unparsable_requests_total{")
    ]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= 450
    assert sum("does not parse" in line for line in bounded.output) < 20  # at most one line per 10 s
    assert not any("Traceback" in line for line in bounded.output)


def test_list_groups_while_loading_answers_in_band(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
        storage.open()
        runtime = CoordinatorRuntime(GroupCoordinator(ServerConfig()), storage)  # not started: loading
        running = await start_server(runtime, "127.0.0.1:0", None)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
                stub = admin_pb2_grpc.ConnectGroupAdminStub(ch)
                listed = await stub.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
                assert listed.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                described = await stub.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["a"]), timeout=10)
                assert [(g.group_id, g.error_code) for g in described.groups] == [
                    ("a", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                ]
        finally:
            await running.stop(0)
            storage.close()

    asyncio.run(scenario())
