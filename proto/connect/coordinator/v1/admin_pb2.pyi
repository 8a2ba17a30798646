from connect.coordinator.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListGroupsRequest(_message.Message):
    __slots__ = ("states_filter", "types_filter")
    STATES_FILTER_FIELD_NUMBER: _ClassVar[int]
    TYPES_FILTER_FIELD_NUMBER: _ClassVar[int]
    states_filter: _containers.RepeatedScalarFieldContainer[str]
    types_filter: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states_filter: _Optional[_Iterable[str]] = ..., types_filter: _Optional[_Iterable[str]] = ...) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "group_state", "group_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    group_state: str
    group_type: str
    def __init__(self, group_id: _Optional[str] = ..., group_state: _Optional[str] = ..., group_type: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids", "accept_task_ranges")
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TASK_RANGES_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    accept_task_ranges: bool
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ..., accept_task_ranges: _Optional[bool] = ...) -> None: ...

class DescribedMember(_message.Message):
    __slots__ = ("member_id", "instance_id", "url", "client_id", "member_epoch", "member_state", "assignment", "target_assignment", "pending", "revoking", "revoking_since_ms", "revocation_deadline_ms", "pending_holders", "session_expires_ms", "member_type", "load", "capacity", "rack")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBER_STATE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    REVOKING_FIELD_NUMBER: _ClassVar[int]
    REVOKING_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    REVOCATION_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    PENDING_HOLDERS_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_TYPE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    url: str
    client_id: str
    member_epoch: int
    member_state: str
    assignment: _common_pb2.ConnectorsAndTasks
    target_assignment: _common_pb2.ConnectorsAndTasks
    pending: _common_pb2.ConnectorsAndTasks
    revoking: _common_pb2.ConnectorsAndTasks
    revoking_since_ms: int
    revocation_deadline_ms: int
    pending_holders: _containers.RepeatedCompositeFieldContainer[PendingHolder]
    session_expires_ms: int
    member_type: str
    load: float
    capacity: float
    rack: str
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., url: _Optional[str] = ..., client_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., member_state: _Optional[str] = ..., assignment: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., target_assignment: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., pending: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., revoking: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., revoking_since_ms: _Optional[int] = ..., revocation_deadline_ms: _Optional[int] = ..., pending_holders: _Optional[_Iterable[_Union[PendingHolder, _Mapping]]] = ..., session_expires_ms: _Optional[int] = ..., member_type: _Optional[str] = ..., load: _Optional[float] = ..., capacity: _Optional[float] = ..., rack: _Optional[str] = ...) -> None: ...

class PendingHolder(_message.Message):
    __slots__ = ("member_id", "fenced", "items")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    fenced: bool
    items: _common_pb2.ConnectorsAndTasks
    def __init__(self, member_id: _Optional[str] = ..., fenced: _Optional[bool] = ..., items: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ...) -> None: ...

class HeldItems(_message.Message):
    __slots__ = ("reason", "member_id", "instance_id", "items", "until_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    member_id: str
    instance_id: str
    items: _common_pb2.ConnectorsAndTasks
    until_ms: int
    def __init__(self, reason: _Optional[str] = ..., member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., items: _Optional[_Union[_common_pb2.ConnectorsAndTasks, _Mapping]] = ..., until_ms: _Optional[int] = ...) -> None: ...

class AssignmentInFlight(_message.Message):
    __slots__ = ("executor", "started_ms", "deadline_ms")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    executor: str
    started_ms: int
    deadline_ms: int
    def __init__(self, executor: _Optional[str] = ..., started_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ...) -> None: ...

class AssignmentError(_message.Message):
    __slots__ = ("executor", "message", "time_ms")
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    executor: str
    message: str
    time_ms: int
    def __init__(self, executor: _Optional[str] = ..., message: _Optional[str] = ..., time_ms: _Optional[int] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("error_code", "error_message", "group_id", "group_type", "group_state", "group_epoch", "assignment_epoch", "assignor_name", "connectors", "members", "held", "assignment_in_flight", "last_assignment_error", "scheduled_rebalance_ms", "target_computed_by", "config_offset", "generation_id", "protocol_name", "leader_id", "load_ratio")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUP_STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_NAME_FIELD_NUMBER: _ClassVar[int]
    CONNECTORS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LAST_ASSIGNMENT_ERROR_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_REBALANCE_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_COMPUTED_BY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_RATIO_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    group_id: str
    group_type: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    connectors: _containers.RepeatedCompositeFieldContainer[_common_pb2.ConnectorSpec]
    members: _containers.RepeatedCompositeFieldContainer[DescribedMember]
    held: _containers.RepeatedCompositeFieldContainer[HeldItems]
    assignment_in_flight: AssignmentInFlight
    last_assignment_error: AssignmentError
    scheduled_rebalance_ms: int
    target_computed_by: str
    config_offset: int
    generation_id: int
    protocol_name: str
    leader_id: str
    load_ratio: float
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., group_id: _Optional[str] = ..., group_type: _Optional[str] = ..., group_state: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignment_epoch: _Optional[int] = ..., assignor_name: _Optional[str] = ..., connectors: _Optional[_Iterable[_Union[_common_pb2.ConnectorSpec, _Mapping]]] = ..., members: _Optional[_Iterable[_Union[DescribedMember, _Mapping]]] = ..., held: _Optional[_Iterable[_Union[HeldItems, _Mapping]]] = ..., assignment_in_flight: _Optional[_Union[AssignmentInFlight, _Mapping]] = ..., last_assignment_error: _Optional[_Union[AssignmentError, _Mapping]] = ..., scheduled_rebalance_ms: _Optional[int] = ..., target_computed_by: _Optional[str] = ..., config_offset: _Optional[int] = ..., generation_id: _Optional[int] = ..., protocol_name: _Optional[str] = ..., leader_id: _Optional[str] = ..., load_ratio: _Optional[float] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class PutConnectorRequest(_message.Message):
    __slots__ = ("group_id", "connector", "task_count", "task_weight")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TASK_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    connector: str
    task_count: int
    task_weight: float
    def __init__(self, group_id: _Optional[str] = ..., connector: _Optional[str] = ..., task_count: _Optional[int] = ..., task_weight: _Optional[float] = ...) -> None: ...

class PutConnectorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "group_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    group_epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., group_epoch: _Optional[int] = ...) -> None: ...

class DeleteConnectorRequest(_message.Message):
    __slots__ = ("group_id", "connector")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    connector: str
    def __init__(self, group_id: _Optional[str] = ..., connector: _Optional[str] = ...) -> None: ...

class DeleteConnectorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "group_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    group_epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., group_epoch: _Optional[int] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "configs")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("group_id", "set", "delete", "group_must_exist")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    GROUP_MUST_EXIST_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    set: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
    delete: _containers.RepeatedScalarFieldContainer[str]
    group_must_exist: bool
    def __init__(self, group_id: _Optional[str] = ..., set: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ..., delete: _Optional[_Iterable[str]] = ..., group_must_exist: _Optional[bool] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupResult(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupResult, _Mapping]]] = ...) -> None: ...

class ListGroupEventsRequest(_message.Message):
    __slots__ = ("group_id", "after_event_id", "since_ms", "max_events")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    after_event_id: int
    since_ms: int
    max_events: int
    def __init__(self, group_id: _Optional[str] = ..., after_event_id: _Optional[int] = ..., since_ms: _Optional[int] = ..., max_events: _Optional[int] = ...) -> None: ...

class GroupEvent(_message.Message):
    __slots__ = ("event_id", "time_ms", "event", "member_id", "group_epoch", "assignment_epoch", "member_epoch", "details_json")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    event_id: int
    time_ms: int
    event: str
    member_id: str
    group_epoch: int
    assignment_epoch: int
    member_epoch: int
    details_json: str
    def __init__(self, event_id: _Optional[int] = ..., time_ms: _Optional[int] = ..., event: _Optional[str] = ..., member_id: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignment_epoch: _Optional[int] = ..., member_epoch: _Optional[int] = ..., details_json: _Optional[str] = ...) -> None: ...

class ListGroupEventsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "events", "next_event_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    events: _containers.RepeatedCompositeFieldContainer[GroupEvent]
    next_event_id: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., events: _Optional[_Iterable[_Union[GroupEvent, _Mapping]]] = ..., next_event_id: _Optional[int] = ...) -> None: ...

class MemberIdentity(_message.Message):
    __slots__ = ("member_id", "instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class RemoveMembersRequest(_message.Message):
    __slots__ = ("group_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[MemberIdentity]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberIdentity, _Mapping]]] = ...) -> None: ...

class RemovedMember(_message.Message):
    __slots__ = ("member_id", "instance_id", "error_code", "error_message")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class RemoveMembersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results", "group_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[RemovedMember]
    group_epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RemovedMember, _Mapping]]] = ..., group_epoch: _Optional[int] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "address", "partition", "epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    address: str
    partition: int
    epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., address: _Optional[str] = ..., partition: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class DescribeCoordinatorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CoordinatorReplica(_message.Message):
    __slots__ = ("replica_id", "address", "started_ms", "expires_ms", "live", "partitions_owned")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_OWNED_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    address: str
    started_ms: int
    expires_ms: int
    live: bool
    partitions_owned: int
    def __init__(self, replica_id: _Optional[str] = ..., address: _Optional[str] = ..., started_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ..., live: _Optional[bool] = ..., partitions_owned: _Optional[int] = ...) -> None: ...

class PartitionLease(_message.Message):
    __slots__ = ("partition", "owner_replica_id", "owner_address", "epoch", "expires_ms", "groups")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    owner_replica_id: str
    owner_address: str
    epoch: int
    expires_ms: int
    groups: int
    def __init__(self, partition: _Optional[int] = ..., owner_replica_id: _Optional[str] = ..., owner_address: _Optional[str] = ..., epoch: _Optional[int] = ..., expires_ms: _Optional[int] = ..., groups: _Optional[int] = ...) -> None: ...

class DescribeCoordinatorsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partition_count", "replicas", "partitions", "now_ms", "replica_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    partition_count: int
    replicas: _containers.RepeatedCompositeFieldContainer[CoordinatorReplica]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLease]
    now_ms: int
    replica_id: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partition_count: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[CoordinatorReplica, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLease, _Mapping]]] = ..., now_ms: _Optional[int] = ..., replica_id: _Optional[str] = ...) -> None: ...
