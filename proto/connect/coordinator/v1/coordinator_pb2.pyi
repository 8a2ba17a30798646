from connect.coordinator.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConnectGroupWatchRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ...) -> None: ...

class ConnectGroupWatchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "reason")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    reason: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ConnectGroupHeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "url", "rebalance_timeout_ms", "client_assignors", "owned", "client_id", "request_sequence", "item_loads", "capacity", "rack")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ASSIGNORS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ITEM_LOADS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    url: str
    rebalance_timeout_ms: int
    client_assignors: _common_pb2.ClientAssignors
    owned: _common_pb2.ConnectorsAndTasks
    client_id: str
    request_sequence: int
    item_loads: _common_pb2.ItemLoads
    capacity: float
    rack: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., url: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., client_assignors: _Optional[_Union[_common_pb2.ClientAssignors, _Mapping]] = ..., owned: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., client_id: _Optional[str] = ..., request_sequence: _Optional[int] = ..., item_loads: _Optional[_Union[_common_pb2.ItemLoads, _Mapping]] = ..., capacity: _Optional[float] = ..., rack: _Optional[str] = ...) -> None: ...

class MemberAssignment(_message.Message):
    __slots__ = ("error", "assigned", "pending", "version", "metadata")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    error: int
    assigned: _common_pb2.ConnectorsAndTasks
    pending: _common_pb2.ConnectorsAndTasks
    version: int
    metadata: bytes
    def __init__(self, error: _Optional[int] = ..., assigned: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., pending: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., version: _Optional[int] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class ConnectGroupHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms", "session_timeout_ms", "assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    assignment: MemberAssignment
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., assignment: _Optional[_Union[MemberAssignment, _Mapping]] = ...) -> None: ...

class ConnectGroupPrepareAssignmentRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "accept_task_ranges")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TASK_RANGES_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    accept_task_ranges: bool
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., accept_task_ranges: _Optional[bool] = ...) -> None: ...

class ConnectGroupPrepareAssignmentResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "group_epoch", "assignor_name", "members", "connectors", "current_target", "assignor_state", "now_ms", "group_configs", "accept_task_ranges", "current_target_checked", "accept_unchanged_omitted")
    class GroupConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONNECTORS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TARGET_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_STATE_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TASK_RANGES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TARGET_CHECKED_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_UNCHANGED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    group_epoch: int
    assignor_name: str
    members: _containers.RepeatedCompositeFieldContainer[_common_pb2.GroupMember]
    connectors: _containers.RepeatedCompositeFieldContainer[_common_pb2.ConnectorSpec]
    current_target: _common_pb2.TargetAssignment
    assignor_state: bytes
    now_ms: int
    group_configs: _containers.ScalarMap[str, str]
    accept_task_ranges: bool
    current_target_checked: bool
    accept_unchanged_omitted: bool
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignor_name: _Optional[str] = ..., members: _Optional[_Iterable[_Union[_common_pb2.GroupMember, _Mapping]]] = ..., connectors: _Optional[_Iterable[_Union[_common_pb2.ConnectorSpec, _Mapping]]] = ..., current_target: _Optional[_Union[_common_pb2.TargetAssignment, _Mapping]] = ..., assignor_state: _Optional[bytes] = ..., now_ms: _Optional[int] = ..., group_configs: _Optional[_Mapping[str, str]] = ..., accept_task_ranges: _Optional[bool] = ..., current_target_checked: _Optional[bool] = ..., accept_unchanged_omitted: _Optional[bool] = ...) -> None: ...

class ConnectGroupInstallAssignmentRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "group_epoch", "error", "members", "assignor_state", "rebalance_delay_ms", "unchanged_omitted")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_STATE_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    error: int
    members: _containers.RepeatedCompositeFieldContainer[_common_pb2.MemberTarget]
    assignor_state: bytes
    rebalance_delay_ms: int
    unchanged_omitted: bool
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., group_epoch: _Optional[int] = ..., error: _Optional[int] = ..., members: _Optional[_Iterable[_Union[_common_pb2.MemberTarget, _Mapping]]] = ..., assignor_state: _Optional[bytes] = ..., rebalance_delay_ms: _Optional[int] = ..., unchanged_omitted: _Optional[bool] = ...) -> None: ...

class ConnectGroupInstallAssignmentResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
