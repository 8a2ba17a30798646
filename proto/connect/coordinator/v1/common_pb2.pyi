from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN_SERVER_ERROR: _ClassVar[ErrorCode]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    INCONSISTENT_GROUP_PROTOCOL: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    UNSUPPORTED_VERSION: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    DUPLICATE_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    MEMBER_ID_REQUIRED: _ClassVar[ErrorCode]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    THROTTLING_QUOTA_EXCEEDED: _ClassVar[ErrorCode]
    FENCED_MEMBER_EPOCH: _ClassVar[ErrorCode]
    UNRELEASED_INSTANCE_ID: _ClassVar[ErrorCode]
    UNSUPPORTED_ASSIGNOR: _ClassVar[ErrorCode]
    STALE_MEMBER_EPOCH: _ClassVar[ErrorCode]
    COMPUTE_ASSIGNMENT: _ClassVar[ErrorCode]
    INVALID_ASSIGNMENT: _ClassVar[ErrorCode]
NONE: ErrorCode
UNKNOWN_SERVER_ERROR: ErrorCode
COORDINATOR_LOAD_IN_PROGRESS: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
NOT_COORDINATOR: ErrorCode
ILLEGAL_GENERATION: ErrorCode
INCONSISTENT_GROUP_PROTOCOL: ErrorCode
UNKNOWN_MEMBER_ID: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
UNSUPPORTED_VERSION: ErrorCode
INVALID_REQUEST: ErrorCode
OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode
DUPLICATE_SEQUENCE_NUMBER: ErrorCode
NON_EMPTY_GROUP: ErrorCode
GROUP_ID_NOT_FOUND: ErrorCode
MEMBER_ID_REQUIRED: ErrorCode
GROUP_MAX_SIZE_REACHED: ErrorCode
FENCED_INSTANCE_ID: ErrorCode
THROTTLING_QUOTA_EXCEEDED: ErrorCode
FENCED_MEMBER_EPOCH: ErrorCode
UNRELEASED_INSTANCE_ID: ErrorCode
UNSUPPORTED_ASSIGNOR: ErrorCode
STALE_MEMBER_EPOCH: ErrorCode
COMPUTE_ASSIGNMENT: ErrorCode
INVALID_ASSIGNMENT: ErrorCode

class ConnectorTaskId(_message.Message):
    __slots__ = ("connector", "task")
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    connector: str
    task: int
    def __init__(self, connector: _Optional[str] = ..., task: _Optional[int] = ...) -> None: ...

class ConnectorsAndTasks(_message.Message):
    __slots__ = ("connectors", "tasks", "task_range_connectors", "task_range_firsts", "task_range_counts")
    CONNECTORS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_RANGE_CONNECTORS_FIELD_NUMBER: _ClassVar[int]
    TASK_RANGE_FIRSTS_FIELD_NUMBER: _ClassVar[int]
    TASK_RANGE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    connectors: _containers.RepeatedScalarFieldContainer[str]
    tasks: _containers.RepeatedCompositeFieldContainer[ConnectorTaskId]
    task_range_connectors: _containers.RepeatedScalarFieldContainer[str]
    task_range_firsts: _containers.RepeatedScalarFieldContainer[int]
    task_range_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, connectors: _Optional[_Iterable[str]] = ..., tasks: _Optional[_Iterable[_Union[ConnectorTaskId, _Mapping]]] = ..., task_range_connectors: _Optional[_Iterable[str]] = ..., task_range_firsts: _Optional[_Iterable[int]] = ..., task_range_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class Assignor(_message.Message):
    __slots__ = ("name", "minimum_version", "maximum_version", "reason", "version", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    minimum_version: int
    maximum_version: int
    reason: int
    version: int
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., minimum_version: _Optional[int] = ..., maximum_version: _Optional[int] = ..., reason: _Optional[int] = ..., version: _Optional[int] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class ClientAssignors(_message.Message):
    __slots__ = ("assignors",)
    ASSIGNORS_FIELD_NUMBER: _ClassVar[int]
    assignors: _containers.RepeatedCompositeFieldContainer[Assignor]
    def __init__(self, assignors: _Optional[_Iterable[_Union[Assignor, _Mapping]]] = ...) -> None: ...

class ConnectorSpec(_message.Message):
    __slots__ = ("name", "task_count", "task_weight")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TASK_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    name: str
    task_count: int
    task_weight: float
    def __init__(self, name: _Optional[str] = ..., task_count: _Optional[int] = ..., task_weight: _Optional[float] = ...) -> None: ...

class ItemLoad(_message.Message):
    __slots__ = ("connector", "task", "load")
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    connector: str
    task: int
    load: float
    def __init__(self, connector: _Optional[str] = ..., task: _Optional[int] = ..., load: _Optional[float] = ...) -> None: ...

class ItemLoads(_message.Message):
    __slots__ = ("loads",)
    LOADS_FIELD_NUMBER: _ClassVar[int]
    loads: _containers.RepeatedCompositeFieldContainer[ItemLoad]
    def __init__(self, loads: _Optional[_Iterable[_Union[ItemLoad, _Mapping]]] = ...) -> None: ...

class MemberTarget(_message.Message):
    __slots__ = ("member_id", "connectors_and_tasks", "error", "version", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECTORS_AND_TASKS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    connectors_and_tasks: ConnectorsAndTasks
    error: int
    version: int
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., connectors_and_tasks: _Optional[_Union[ConnectorsAndTasks, _Mapping]] = ..., error: _Optional[int] = ..., version: _Optional[int] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class TargetAssignment(_message.Message):
    __slots__ = ("assignment_epoch", "members")
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    assignment_epoch: int
    members: _containers.RepeatedCompositeFieldContainer[MemberTarget]
    def __init__(self, assignment_epoch: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MemberTarget, _Mapping]]] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "member_epoch", "instance_id", "url", "assignor", "owned", "target", "owned_is_target", "item_loads", "capacity", "rack", "load_summary")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    OWNED_IS_TARGET_FIELD_NUMBER: _ClassVar[int]
    ITEM_LOADS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    LOAD_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    member_epoch: int
    instance_id: str
    url: str
    assignor: Assignor
    owned: ConnectorsAndTasks
    target: ConnectorsAndTasks
    owned_is_target: bool
    item_loads: ItemLoads
    capacity: float
    rack: str
    load_summary: MemberLoadSummary
    def __init__(self, member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., url: _Optional[str] = ..., assignor: _Optional[_Union[Assignor, _Mapping]] = ..., owned: _Optional[_Union[ConnectorsAndTasks, _Mapping]] = ..., target: _Optional[_Union[ConnectorsAndTasks, _Mapping]] = ..., owned_is_target: _Optional[bool] = ..., item_loads: _Optional[_Union[ItemLoads, _Mapping]] = ..., capacity: _Optional[float] = ..., rack: _Optional[str] = ..., load_summary: _Optional[_Union[MemberLoadSummary, _Mapping]] = ...) -> None: ...

class MemberLoadSummary(_message.Message):
    __slots__ = ("known_load", "unknown_weight", "connector_load")
    KNOWN_LOAD_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_LOAD_FIELD_NUMBER: _ClassVar[int]
    known_load: float
    unknown_weight: float
    connector_load: float
    def __init__(self, known_load: _Optional[float] = ..., unknown_weight: _Optional[float] = ..., connector_load: _Optional[float] = ...) -> None: ...
