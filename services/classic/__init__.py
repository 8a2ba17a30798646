"""The classic Connect group protocol: Kafka Connect's embedded JoinGroup / SyncGroup payloads.

``connect_protocol`` encodes and decodes the worker metadata and assignments exactly as Kafka
Connect's ``ConnectProtocol`` (V0, ``default``) and ``IncrementalCooperativeConnectProtocol``
(V1 ``compatible``, V2 ``sessioned``) do. Pure: no I/O.
"""

from services.classic.connect_protocol import (
    CONFIG_MISMATCH,
    CONNECT_PROTOCOL_V0,
    CONNECT_PROTOCOL_V1,
    CONNECT_PROTOCOL_V2,
    CONNECTOR_TASK,
    NO_ERROR,
    PROTOCOL_TYPE,
    ConnectAssignment,
    ProtocolError,
    WorkerMetadata,
    canonical,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    join_protocols,
    mode_version,
    protocol_name,
    protocol_version,
)

__all__ = [
    "CONFIG_MISMATCH",
    "CONNECTOR_TASK",
    "CONNECT_PROTOCOL_V0",
    "CONNECT_PROTOCOL_V1",
    "CONNECT_PROTOCOL_V2",
    "NO_ERROR",
    "PROTOCOL_TYPE",
    "ConnectAssignment",
    "ProtocolError",
    "WorkerMetadata",
    "canonical",
    "decode_assignment",
    "decode_metadata",
    "encode_assignment",
    "encode_metadata",
    "join_protocols",
    "mode_version",
    "protocol_name",
    "protocol_version",
]
