"""Records <-> table rows.

Each state record type has a table, the names of its key columns, a function that turns the
record's key and value into bind parameters, and a function that turns a selected row (columns in
``table.c`` order) back into the record. Bytes inside JSON (assignor metadata, a classic member's
protocol metadata) are base64.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table

from services.common.items import Items
from services.coordinator.core.records import (
    AssignorSpec,
    ClassicGroupMetadata,
    ClassicGroupState,
    ClassicGroupValue,
    ClassicMemberMetadata,
    ClassicMemberValue,
    ConnectorRecord,
    CurrentAssignment,
    CurrentAssignmentValue,
    GroupConfig,
    GroupMetadata,
    GroupMetadataValue,
    HeldAssignment,
    MemberMetadata,
    MemberMetadataValue,
    RebalanceEvent,
    Record,
    TargetMember,
    TargetMemberValue,
    TargetMetadata,
    TargetMetadataValue,
    shared_assignors,
)
from services.storage import models

Params = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TableCodec:
    table: Table
    key_columns: tuple[str, ...]
    is_tombstone: Callable[[Any], bool]
    key: Callable[[Any], tuple[Any, ...]]
    to_params: Callable[[Any], Params]
    from_row: Callable[[Sequence[Any]], Record]


def _bytes(value: Any) -> bytes:
    # psycopg2 hands back memoryview for bytea; SQLite gives bytes.
    return value if isinstance(value, bytes) else bytes(value)


def items_json(items: Items) -> dict[str, Any]:
    # Most revoking sets are empty; skip Items.to_json's sorting for them (same output).
    return items.to_json() if items else {"connectors": [], "tasks": []}


def assignors_to_json(specs: Sequence[AssignorSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "minimum_version": s.minimum_version,
            "maximum_version": s.maximum_version,
            "reason": s.reason,
            "version": s.version,
            "metadata": base64.b64encode(s.metadata).decode("ascii"),
        }
        for s in specs
    ]


def assignors_from_json(data: Sequence[dict[str, Any]]) -> tuple[AssignorSpec, ...]:
    return shared_assignors(
        tuple(
            AssignorSpec(
                name=d["name"],
                minimum_version=int(d["minimum_version"]),
                maximum_version=int(d["maximum_version"]),
                reason=int(d.get("reason", 0)),
                version=int(d.get("version", 0)),
                metadata=base64.b64decode(d.get("metadata", "")),
            )
            for d in data
        )
    )


def protocols_to_json(protocols: Sequence[tuple[str, bytes]]) -> list[list[str]]:
    """A classic member's (name, metadata) list, in its order, as ``[[name, base64], ...]``."""
    return [[name, base64.b64encode(metadata).decode("ascii")] for name, metadata in protocols]


def protocols_from_json(data: Sequence[Sequence[str]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, base64.b64decode(metadata, validate=True)) for name, metadata in data)


# ---- per record type --------------------------------------------------------------------------


def _group_params(r: GroupMetadata) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "group_type": v.group_type,
        "group_epoch": v.epoch,
        "created_ms": v.created_ms,
        "config_offset": v.config_offset,
    }


def _group_row(row: Sequence[Any]) -> Record:
    group_id, group_type, epoch, created_ms, config_offset = row
    value = GroupMetadataValue(epoch=epoch, group_type=group_type, created_ms=created_ms, config_offset=config_offset)
    return GroupMetadata(group_id, value)


def _connector_params(r: ConnectorRecord) -> Params:
    return {"group_id": r.group_id, "connector": r.connector, "task_count": r.task_count, "task_weight": r.task_weight}


def _connector_row(row: Sequence[Any]) -> Record:
    group_id, connector, task_count, task_weight = row
    return ConnectorRecord(group_id, connector, task_count, float(task_weight))


def loads_to_json(loads: Sequence[tuple[str, int, float]]) -> list[list[Any]]:
    """A member's stored load report (SPEC §13) as ``[[connector, task, load], ...]`` (task -1: the connector)."""
    return [[c, t, load] for c, t, load in loads]


def loads_from_json(data: Sequence[Sequence[Any]]) -> tuple[tuple[str, int, float], ...]:
    return tuple((str(c), int(t), float(load)) for c, t, load in data)


def _member_params(r: MemberMetadata) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "member_id": r.member_id,
        "instance_id": v.instance_id,
        "url": v.url,
        "client_id": v.client_id,
        "rebalance_timeout_ms": v.rebalance_timeout_ms,
        "assignors": assignors_to_json(v.assignors),
        "joined_ms": v.joined_ms,
        "member_type": v.member_type,
        "session_timeout_ms": v.session_timeout_ms,
        "protocols": protocols_to_json(v.protocols),
        "capacity": v.capacity,
        "rack": v.rack,
        "item_loads": loads_to_json(v.item_loads),
    }


def _member_row(row: Sequence[Any]) -> Record:
    (
        group_id,
        member_id,
        instance_id,
        url,
        client_id,
        rebalance_timeout_ms,
        assignors,
        joined_ms,
        member_type,
        session_timeout_ms,
        protocols,
        capacity,
        rack,
        item_loads,
    ) = row
    return MemberMetadata(
        group_id,
        member_id,
        MemberMetadataValue(
            instance_id=instance_id,
            url=url,
            client_id=client_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            assignors=assignors_from_json(assignors),
            joined_ms=joined_ms,
            member_type=member_type,
            session_timeout_ms=session_timeout_ms,
            protocols=protocols_from_json(protocols),
            capacity=float(capacity),
            rack=rack,
            item_loads=loads_from_json(item_loads),
        ),
    )


def _target_member_params(r: TargetMember) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "member_id": r.member_id,
        "items": items_json(v.items),
        "error": v.error,
        "version": v.version,
        "metadata": v.metadata,
    }


def _target_member_row(row: Sequence[Any]) -> Record:
    group_id, member_id, items, error, version, metadata = row
    return TargetMember(
        group_id,
        member_id,
        TargetMemberValue(items=Items.from_json(items), error=error, version=version, metadata=_bytes(metadata)),
    )


def _target_params(r: TargetMetadata) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "assignment_epoch": v.assignment_epoch,
        "error": v.error,
        "assignor_name": v.assignor_name,
        "assignor_state": v.assignor_state,
        "scheduled_rebalance_ms": v.scheduled_rebalance_ms,
        "computed_by": v.computed_by,
    }


def _target_row(row: Sequence[Any]) -> Record:
    group_id, assignment_epoch, error, assignor_name, assignor_state, scheduled_rebalance_ms, computed_by = row
    return TargetMetadata(
        group_id,
        TargetMetadataValue(
            assignment_epoch=assignment_epoch,
            error=error,
            assignor_name=assignor_name,
            assignor_state=_bytes(assignor_state),
            scheduled_rebalance_ms=scheduled_rebalance_ms,
            computed_by=computed_by,
        ),
    )


def _assignment_params(r: CurrentAssignment) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "member_id": r.member_id,
        "member_epoch": v.member_epoch,
        "previous_member_epoch": v.previous_member_epoch,
        "state": v.state,
        "assigned": items_json(v.assigned),
        "revoking": items_json(v.revoking),
        "error": v.error,
        "version": v.version,
        "metadata": v.metadata,
        "request_sequence": v.request_sequence,
    }


def _assignment_row(row: Sequence[Any]) -> Record:
    (
        group_id,
        member_id,
        member_epoch,
        previous_member_epoch,
        state,
        assigned,
        revoking,
        error,
        version,
        metadata,
        request_sequence,
    ) = row
    return CurrentAssignment(
        group_id,
        member_id,
        CurrentAssignmentValue(
            member_epoch=member_epoch,
            previous_member_epoch=previous_member_epoch,
            state=state,
            assigned=Items.from_json(assigned),
            revoking=Items.from_json(revoking),
            error=error,
            version=version,
            metadata=_bytes(metadata),
            request_sequence=request_sequence,
        ),
    )


def _held_params(r: HeldAssignment) -> Params:
    assert r.items is not None
    return {"group_id": r.group_id, "member_id": r.member_id, "items": items_json(r.items)}


def _held_row(row: Sequence[Any]) -> Record:
    group_id, member_id, items = row
    return HeldAssignment(group_id, member_id, Items.from_json(items))


def _config_params(r: GroupConfig) -> Params:
    return {"group_id": r.group_id, "name": r.name, "value": r.value}


def _config_row(row: Sequence[Any]) -> Record:
    group_id, name, value = row
    return GroupConfig(group_id, name, value)


def _classic_group_params(r: ClassicGroupMetadata) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "generation": v.generation,
        "state": str(v.state),
        "protocol_type": v.protocol_type,
        "protocol_name": v.protocol_name,
        "leader": v.leader,
    }


def _classic_group_row(row: Sequence[Any]) -> Record:
    group_id, generation, state, protocol_type, protocol_name, leader = row
    return ClassicGroupMetadata(
        group_id,
        ClassicGroupValue(
            generation=generation,
            state=ClassicGroupState(state),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            leader=leader,
        ),
    )


def _classic_member_params(r: ClassicMemberMetadata) -> Params:
    v = r.value
    assert v is not None
    return {
        "group_id": r.group_id,
        "member_id": r.member_id,
        "client_id": v.client_id,
        "session_timeout_ms": v.session_timeout_ms,
        "rebalance_timeout_ms": v.rebalance_timeout_ms,
        "protocols": protocols_to_json(v.protocols),
        "assignment": v.assignment,
        "joined_ms": v.joined_ms,
    }


def _classic_member_row(row: Sequence[Any]) -> Record:
    group_id, member_id, client_id, session_timeout_ms, rebalance_timeout_ms, protocols, assignment, joined_ms = row
    return ClassicMemberMetadata(
        group_id,
        member_id,
        ClassicMemberValue(
            client_id=client_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocols=protocols_from_json(protocols),
            assignment=_bytes(assignment),
            joined_ms=joined_ms,
        ),
    )


# The event log's typed columns (migration 0009): what the analytics job reads of the details.
EVENT_LISTS = ("connectors", "tasks", "removed_connectors", "removed_tasks")
EVENT_STRINGS = ("reason", "cause", "executor", "instance_id", "url")
EVENT_NUMBERS = ("items", "last_heartbeat_ms", "previous", "members")
EVENT_COLUMNS = ("columns_version", *EVENT_LISTS, *EVENT_STRINGS, *EVENT_NUMBERS, "temporary")
_UNTYPED: dict[str, Any] = dict.fromkeys(EVENT_COLUMNS)


def event_columns(details: Any) -> dict[str, Any]:
    """The typed columns of an event's details (columns_version 1): the item lists as names joined
    by newlines, the strings, numbers and flag as they are. Details that are not an object, or with
    a field of another type (a list of non-names, a number as text, ...), get none (all NULL): a
    reader parses `details` then, and judges them as it always did."""
    if not isinstance(details, dict):
        return _UNTYPED
    out = dict(_UNTYPED)
    for name in EVENT_LISTS:
        v = details.get(name)
        if v is None:
            continue
        if not isinstance(v, list | tuple) or not all(isinstance(x, str) and x and "\n" not in x for x in v):
            return _UNTYPED
        out[name] = "\n".join(v)
    for name in EVENT_STRINGS:
        v = details.get(name)
        if v is not None and not isinstance(v, str):
            return _UNTYPED
        out[name] = v
    for name in EVENT_NUMBERS:
        v = details.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            return _UNTYPED
        out[name] = v
    v = details.get("temporary")
    if v is not None and not isinstance(v, bool):
        return _UNTYPED
    out["temporary"] = v
    out["columns_version"] = 1
    return out


def event_params(r: RebalanceEvent) -> Params:
    return {
        "group_id": r.group_id,
        "time_ms": r.time_ms,
        "event": r.event,
        "member_id": r.member_id,
        "group_epoch": r.group_epoch,
        "assignment_epoch": r.assignment_epoch,
        "member_epoch": r.member_epoch,
        "details": r.details,
        **event_columns(r.details),
    }


def event_from_row(row: Sequence[Any]) -> tuple[int, RebalanceEvent]:
    """A selected ``rebalance_events`` row (columns in table order) as (id, record); the typed
    columns after `details` repeat what it holds."""
    event_id, group_id, time_ms, event, member_id, group_epoch, assignment_epoch, member_epoch, details = row[:9]
    return event_id, RebalanceEvent(
        group_id=group_id,
        time_ms=time_ms,
        event=event,
        member_id=member_id,
        group_epoch=group_epoch,
        assignment_epoch=assignment_epoch,
        member_epoch=member_epoch,
        details=details if details is not None else {},
    )


def _codec(
    table: Table,
    key: Callable[[Any], tuple[Any, ...]],
    is_tombstone: Callable[[Any], bool],
    to_params: Callable[[Any], Params],
    from_row: Callable[[Sequence[Any]], Record],
) -> TableCodec:
    return TableCodec(
        table=table,
        key_columns=tuple(c.name for c in table.primary_key.columns),
        is_tombstone=is_tombstone,
        key=key,
        to_params=to_params,
        from_row=from_row,
    )


# Replay order within a group (load() emits records in this order): the group first, then its
# configuration and inputs, then the target, then the members' current and held work; a classic
# group's classic part last (its metadata before its members).
CODECS: dict[type, TableCodec] = {
    GroupMetadata: _codec(
        models.GROUPS_TABLE, lambda r: (r.group_id,), lambda r: r.value is None, _group_params, _group_row
    ),
    GroupConfig: _codec(
        models.CONFIGS_TABLE, lambda r: (r.group_id, r.name), lambda r: r.value is None, _config_params, _config_row
    ),
    ConnectorRecord: _codec(
        models.CONNECTORS_TABLE,
        lambda r: (r.group_id, r.connector),
        lambda r: r.task_count is None,
        _connector_params,
        _connector_row,
    ),
    MemberMetadata: _codec(
        models.MEMBERS_TABLE,
        lambda r: (r.group_id, r.member_id),
        lambda r: r.value is None,
        _member_params,
        _member_row,
    ),
    TargetMember: _codec(
        models.TARGET_MEMBERS_TABLE,
        lambda r: (r.group_id, r.member_id),
        lambda r: r.value is None,
        _target_member_params,
        _target_member_row,
    ),
    TargetMetadata: _codec(
        models.TARGETS_TABLE, lambda r: (r.group_id,), lambda r: r.value is None, _target_params, _target_row
    ),
    CurrentAssignment: _codec(
        models.MEMBER_ASSIGNMENTS_TABLE,
        lambda r: (r.group_id, r.member_id),
        lambda r: r.value is None,
        _assignment_params,
        _assignment_row,
    ),
    HeldAssignment: _codec(
        models.HELD_TABLE,
        lambda r: (r.group_id, r.member_id),
        lambda r: r.items is None,
        _held_params,
        _held_row,
    ),
    ClassicGroupMetadata: _codec(
        models.CLASSIC_GROUPS_TABLE,
        lambda r: (r.group_id,),
        lambda r: r.value is None,
        _classic_group_params,
        _classic_group_row,
    ),
    ClassicMemberMetadata: _codec(
        models.CLASSIC_MEMBERS_TABLE,
        lambda r: (r.group_id, r.member_id),
        lambda r: r.value is None,
        _classic_member_params,
        _classic_member_row,
    ),
}
