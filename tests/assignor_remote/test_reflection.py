"""Server reflection under `grpc.reflection.v1` (what grpcurl >= 1.9, grpcui and Postman ask for
first) and `grpc.reflection.v1alpha`, on the coordinator and the assignor service, as processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.e2e.test_service_mode import AssignorProcess
from tests.fixtures.coordinator import CoordinatorProcess
from tests.fixtures.net import free_port

V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
REFLECTION = {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
HEALTH = "grpc.health.v1.Health"


def ask(
    address: str, method: str, *requests: reflection_pb2.ServerReflectionRequest
) -> list[reflection_pb2.ServerReflectionResponse]:
    # v1 and v1alpha messages are the same bytes (same fields and numbers): only the method path differs.
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(
            method,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        return list(call(iter(requests), timeout=10))


def services(address: str, method: str) -> set[str]:
    (resp,) = ask(address, method, reflection_pb2.ServerReflectionRequest(list_services=""))
    return {s.name for s in resp.list_services_response.service}


def file_of(address: str, symbol: str) -> descriptor_pb2.FileDescriptorProto:
    (resp,) = ask(address, V1, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol))
    assert resp.WhichOneof("message_response") == "file_descriptor_response", resp
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(b) for b in resp.file_descriptor_response.file_descriptor_proto
    ]
    return next(f for f in files if any(f"{f.package}.{s.name}" == symbol for s in f.service))


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    assignor = AssignorProcess(free_port()).start()
    coordinator = CoordinatorProcess(f"sqlite:///{tmp_path / 'c.db'}").start()
    try:
        yield coordinator.address, assignor.address
    finally:
        coordinator.kill()
        assignor.kill()


def test_both_servers_answer_reflection_v1_and_v1alpha(servers: tuple[str, str]) -> None:
    coordinator, assignor = servers
    coordinator_services = {
        "connect.coordinator.v1.ConnectGroupCoordinator",
        "connect.coordinator.v1.ConnectGroupAdmin",
        "connect.coordinator.v1.ConnectClassicGroup",
    }
    for method in (V1, V1ALPHA):
        assert services(coordinator, method) == coordinator_services | {HEALTH} | REFLECTION
        assert services(assignor, method) == {"connect.coordinator.v1.ConnectAssignor", HEALTH} | REFLECTION
    # Through v1, a client can fetch the descriptors it needs to call anything listed.
    admin = file_of(coordinator, "connect.coordinator.v1.ConnectGroupAdmin")
    assert admin.name == "connect/coordinator/v1/admin.proto"
    assert [m.name for m in admin.service[0].method][:2] == ["ListGroups", "DescribeGroups"]
    assert file_of(assignor, "connect.coordinator.v1.ConnectAssignor").name == "connect/coordinator/v1/assignor.proto"
    v1 = file_of(assignor, "grpc.reflection.v1.ServerReflection")
    assert (v1.name, v1.package) == ("grpc/reflection/v1/reflection.proto", "grpc.reflection.v1")
    assert v1.service[0].method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"
    # An unknown symbol is an in-band NOT_FOUND, as in v1alpha.
    (missing,) = ask(assignor, V1, reflection_pb2.ServerReflectionRequest(file_containing_symbol="no.Such"))
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
