"""Bad input at the transport: garbage bytes get INVALID_REQUEST, oversized messages are refused
by gRPC itself, nothing is written, and the coordinator keeps serving."""

from __future__ import annotations

import grpc
import pytest

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.runtime.asyncio_runtime import MAX_MESSAGE_BYTES
from tests.fixtures.coordinator import Client, CoordinatorProcess

HEARTBEAT = "/connect.coordinator.v1.ConnectGroupCoordinator/ConnectGroupHeartbeat"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_garbage_and_oversized_messages_are_refused_and_the_server_keeps_serving(
    coordinator: CoordinatorProcess,
) -> None:
    c = Client(coordinator.address)
    c.put_connector("A", 2)
    before = c.view()
    raw = c.channel.unary_unary(HEARTBEAT, request_serializer=lambda b: b, response_deserializer=lambda b: b)

    # Bytes that are not a ConnectGroupHeartbeatRequest (an invalid wire type / truncated varint):
    # answered in-band with INVALID_REQUEST naming the parse failure (and counted, not a traceback each).
    for garbage in (b"\xff\xff\xff\xff\xff\xff", b"\x0a\x80", b"\x12\x05ab"):
        answer = coordinator_pb2.ConnectGroupHeartbeatResponse.FromString(raw(garbage, timeout=5))
        assert answer.error_code == ErrorCode.INVALID_REQUEST
        assert "does not parse" in answer.error_message and "Error parsing message" in answer.error_message

    # Larger than the server accepts.
    big = grpc.insecure_channel(coordinator.address, options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES * 2)])
    big_raw = big.unary_unary(HEARTBEAT, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as err:
        big_raw(b"\x0a" + b"\xff" * 8 + b"x" * (MAX_MESSAGE_BYTES + 16), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    big.close()

    # Well-formed but invalid requests are answered in-band, never with a gRPC status.
    r = c.heartbeat("", 5)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "member_id" in r.error_message

    # Nothing changed, and the server still works.
    assert c.view() == before
    r = c.heartbeat("W1", 0)
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    c.close()
