from connect.coordinator.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AssignRequest(_message.Message):
    __slots__ = ("assignor_name", "group_id", "group_epoch", "members", "connectors", "current_target", "assignor_state", "now_ms", "group_configs", "accept_task_ranges", "current_target_checked", "items_once", "accept_unchanged_omitted")
    class GroupConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ASSIGNOR_NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONNECTORS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TARGET_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_STATE_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TASK_RANGES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TARGET_CHECKED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_ONCE_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_UNCHANGED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    assignor_name: str
    group_id: str
    group_epoch: int
    members: _containers.RepeatedCompositeFieldContainer[_common_pb2.GroupMember]
    connectors: _containers.RepeatedCompositeFieldContainer[_common_pb2.ConnectorSpec]
    current_target: _common_pb2.TargetAssignment
    assignor_state: bytes
    now_ms: int
    group_configs: _containers.ScalarMap[str, str]
    accept_task_ranges: bool
    current_target_checked: bool
    items_once: bool
    accept_unchanged_omitted: bool
    def __init__(self, assignor_name: _Optional[str] = ..., group_id: _Optional[str] = ..., group_epoch: _Optional[int] = ..., members: _Optional[_Iterable[_Union[_common_pb2.GroupMember, _Mapping]]] = ..., connectors: _Optional[_Iterable[_Union[_common_pb2.ConnectorSpec, _Mapping]]] = ..., current_target: _Optional[_Union[_common_pb2.TargetAssignment, _Mapping]] = ..., assignor_state: _Optional[bytes] = ..., now_ms: _Optional[int] = ..., group_configs: _Optional[_Mapping[str, str]] = ..., accept_task_ranges: _Optional[bool] = ..., current_target_checked: _Optional[bool] = ..., items_once: _Optional[bool] = ..., accept_unchanged_omitted: _Optional[bool] = ...) -> None: ...

class AssignResponse(_message.Message):
    __slots__ = ("error", "error_message", "members", "assignor_state", "rebalance_delay_ms", "unchanged_omitted")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_STATE_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    error: int
    error_message: str
    members: _containers.RepeatedCompositeFieldContainer[_common_pb2.MemberTarget]
    assignor_state: bytes
    rebalance_delay_ms: int
    unchanged_omitted: bool
    def __init__(self, error: _Optional[int] = ..., error_message: _Optional[str] = ..., members: _Optional[_Iterable[_Union[_common_pb2.MemberTarget, _Mapping]]] = ..., assignor_state: _Optional[bytes] = ..., rebalance_delay_ms: _Optional[int] = ..., unchanged_omitted: _Optional[bool] = ...) -> None: ...

class ListAssignorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAssignorsResponse(_message.Message):
    __slots__ = ("assignors", "reads_items_once")
    ASSIGNORS_FIELD_NUMBER: _ClassVar[int]
    READS_ITEMS_ONCE_FIELD_NUMBER: _ClassVar[int]
    assignors: _containers.RepeatedCompositeFieldContainer[_common_pb2.Assignor]
    reads_items_once: bool
    def __init__(self, assignors: _Optional[_Iterable[_Union[_common_pb2.Assignor, _Mapping]]] = ..., reads_items_once: _Optional[bool] = ...) -> None: ...
