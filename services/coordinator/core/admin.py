"""The admin API's handlers: connectors, group configs, group deletion, member removal, and the
read-only views (ListGroups, DescribeGroups, DescribeConfigs)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, all_items
from services.common.load_limits import LOAD_RANGE, load_ok
from services.coordinator.core import explain, loads, validation
from services.coordinator.core.assignment import (
    AssignorSelectionError,
)
from services.coordinator.core.classic import _ordered as ordered_members
from services.coordinator.core.config import (
    ASSIGNMENT_MODE,
    SCHEDULED_REBALANCE_MAX_DELAY,
    GroupConfigError,
    validate_group_configs,
)
from services.coordinator.core.errors import ApiError, clip, invalid
from services.coordinator.core.handler import CoreBase, Result, Sink
from services.coordinator.core.records import (
    MEMBER_TYPE_CLASSIC,
    ConnectorRecord,
    EventType,
    GroupConfig,
    GroupMetadata,
)
from services.coordinator.core.state import (
    STATIC_LEAVE_EPOCH,
    Group,
)
from services.coordinator.core.timers import TimerKey, TimerKind

# What one DescribeGroups answer may carry: well under the 64 MiB send limit.
DESCRIBE_ANSWER_BYTES = 48 * 1024 * 1024


def _describe_estimate(group: Group, compact: bool) -> int:
    """An upper bound of a group's part of a DescribeGroups answer, in bytes, without building it:
    per member its ids, url and explanations; each item (a connector, or a task: its connector's
    name and its number) in three copies (assignment, target, pending). With task ranges a
    connector's tasks take at most one range per member."""
    items = 0
    for name, tasks in group.connectors.items():
        per_task = len(name) + 12
        items += per_task + per_task * (min(tasks, len(group.members) + 1) if compact else tasks)
    return 4_096 + 1_024 * len(group.members) + 3 * items


class Serialized(NamedTuple):
    """A response serialized already (`Admin.describe_groups_serialized`): the runtime sends `data`
    as it is. `first_error`: the first non-zero error code of its groups (0: none), for the metrics."""

    data: bytes
    first_error: int


def _varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf base-128 varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: Any) -> bytes:
    """A length-delimited field's key (field number, wire type 2)."""
    return _varint(field.number << 3 | 2)


_GROUPS_TAG = _tag(admin_pb2.DescribeGroupsResponse.DESCRIPTOR.fields_by_name["groups"])
_MEMBERS_TAG = _tag(admin_pb2.DescribedGroup.DESCRIPTOR.fields_by_name["members"])
_DESCRIBED_MEMBER = admin_pb2.DescribedMember


class Admin(CoreBase):
    """ConnectGroupAdmin's handlers."""

    def _group_or_create(self, sink: Sink, group_id: str, now: int) -> Group:
        group = self.state.groups.get(group_id)
        if group is None:
            return self._create_group(sink, group_id, now)
        group.created_by_join = False  # an operator's group now: the full empty retention
        return group

    def put_connector(self, req: admin_pb2.PutConnectorRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.connector, "connector", cfg=self.config)
            limit = self.config.max_tasks_per_connector
            if not 0 <= req.task_count <= limit:
                raise invalid(
                    f"task_count must be between 0 and {limit} (group.connect.max.tasks.per.connector), got {req.task_count}"
                )
            if req.HasField("task_weight") and not load_ok(req.task_weight):
                raise invalid(f"task_weight must be {LOAD_RANGE} (default 1.0), got {req.task_weight}")
            self._check_group_bounds(req.group_id, req.connector, req.task_count)
            group = self._group_or_create(sink, req.group_id, now_ms)
            previous = group.connectors.get(req.connector)
            # SPEC §13: unset keeps a stored connector's weight (1.0 for a new one).
            old_weight = group.task_weights.get(req.connector, 1.0)
            weight = req.task_weight if req.HasField("task_weight") else old_weight
            if previous != req.task_count:
                before = all_items({req.connector: previous}) if previous is not None else EMPTY
                after = all_items({req.connector: req.task_count})
                sink.emit(ConnectorRecord(group.group_id, req.connector, req.task_count, weight))
                self._connectors_changed(
                    sink,
                    group,
                    "connector_added" if previous is None else "task_count_changed",
                    now_ms,
                    **(after - before).names(),
                    **(before - after).names("removed_"),
                )
            elif weight != old_weight:
                # Only the weight: no config offset (Connect's configuration is unchanged); a
                # `connect` group with members gets a new target (the operator asked for it).
                sink.emit(ConnectorRecord(group.group_id, req.connector, req.task_count, weight))
                if group.classic is None and group.members:
                    self._bump(sink, group, "task_weight_changed", connector=req.connector, task_weight=weight)
            self._after_change(sink, group, now_ms)
            response = admin_pb2.PutConnectorResponse(group_epoch=group.epoch)
        except ApiError as e:
            response = admin_pb2.PutConnectorResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def _connectors_changed(self, sink: Sink, group: Group, reason: str, now: int, **details: Any) -> None:
        """The group's connectors changed: its config offset grows (SPEC §12: Connect's config
        offset, what a classic worker reads its connectors at). A `connect` group's epoch is bumped (a
        new target follows); a classic group rebalances, as a Connect cluster does when its leader
        sees the config change (`connector_changed`; the change itself is in the event's details)."""
        sink.emit(GroupMetadata(group.group_id, replace(group.meta, config_offset=group.meta.config_offset + 1)))
        if group.classic is None:
            self._bump(sink, group, reason, **details)
        else:
            self._classic_connectors_changed(sink, group, now, change=reason, **details)

    def _check_group_bounds(self, group_id: str, connector: str, task_count: int) -> None:
        group = self.state.groups.get(group_id)
        connectors = group.connectors if group is not None else {}
        limit = self.config.max_connectors_per_group
        if connector not in connectors and len(connectors) >= limit:
            raise invalid(
                f"connector: group '{clip(group_id)}' already has {len(connectors)} connectors "
                f"(group.connect.max.connectors.per.group = {limit})"
            )
        tasks = sum(connectors.values()) - connectors.get(connector, 0) + task_count
        if tasks > self.config.max_tasks_per_group:
            raise invalid(
                f"task_count: the group would have {tasks} tasks, more than "
                f"group.connect.max.tasks.per.group = {self.config.max_tasks_per_group}"
            )

    def delete_connector(self, req: admin_pb2.DeleteConnectorRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            validation.check_id(req.connector, "connector", cfg=self.config)
            group = self.state.groups.get(req.group_id)
            if group is None:
                raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{req.group_id}' does not exist")
            if req.connector not in group.connectors:
                raise invalid(f"connector '{req.connector}' is not defined in group '{req.group_id}'")
            removed = all_items({req.connector: group.connectors[req.connector]})
            sink.emit(ConnectorRecord(group.group_id, req.connector, None))
            self._connectors_changed(sink, group, "connector_removed", now_ms, **removed.names("removed_"))
            self._after_change(sink, group, now_ms)
            response = admin_pb2.DeleteConnectorResponse(group_epoch=group.epoch)
        except ApiError as e:
            response = admin_pb2.DeleteConnectorResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def alter_configs(self, req: admin_pb2.AlterConfigsRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        try:
            validation.check_alter_configs(req, self.config)
            set_: dict[str, str] = {}
            for i, entry in enumerate(req.set):
                if entry.name in set_:
                    raise invalid(f"set[{i}].name '{clip(entry.name)}' is listed twice")
                set_[entry.name] = entry.value
            group = self.state.groups.get(req.group_id)
            if group is None and req.group_must_exist:
                raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{req.group_id}' does not exist")
            current = dict(group.configs) if group is not None else {}
            try:
                new = validate_group_configs(
                    self.config, current, set_, list(req.delete), self.service_assignors is not None
                )
            except GroupConfigError as e:
                raise invalid(str(e)) from None
            group = self._group_or_create(sink, req.group_id, now_ms)
            old_effective = self.group_configs(group)
            for name in sorted(set(current) | set(new)):
                if current.get(name) != new.get(name):
                    sink.emit(GroupConfig(group.group_id, name, new.get(name)))
            new_effective = self.group_configs(group)
            if old_effective[ASSIGNMENT_MODE] != new_effective[ASSIGNMENT_MODE] and group.process.in_flight is not None:
                self._abandon_assignment(sink, group, now_ms, "assignment.mode changed")
            if (
                group.members
                and old_effective[SCHEDULED_REBALANCE_MAX_DELAY] != new_effective[SCHEDULED_REBALANCE_MAX_DELAY]
            ):
                self._bump(sink, group, "config_changed")
            self._after_change(sink, group, now_ms)
            response = admin_pb2.AlterConfigsResponse()
        except ApiError as e:
            response = admin_pb2.AlterConfigsResponse(error_code=e.code, error_message=e.message)
        return sink.result(response)

    def delete_groups(self, req: admin_pb2.DeleteGroupsRequest, now_ms: int) -> Result:
        sink = Sink(self.state, now_ms)
        response = admin_pb2.DeleteGroupsResponse()
        try:
            validation.check_group_ids(req.group_ids, self.config)
        except ApiError as e:
            response.results.add(error_code=e.code, error_message=e.message)
            return sink.result(response)
        for gid in req.group_ids:
            error = self._group_id_error(gid)
            result = response.results.add(group_id=gid if error is None else clip(gid))
            group = self.state.groups.get(gid)
            if error is not None:
                result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, error
            elif group is None:
                result.error_code, result.error_message = ErrorCode.GROUP_ID_NOT_FOUND, f"group '{gid}' does not exist"
            elif group.members or (group.classic is not None and group.classic.members):
                members = len(group.members) + (len(group.classic.members) if group.classic is not None else 0)
                result.error_code = ErrorCode.NON_EMPTY_GROUP
                result.error_message = f"group '{gid}' has {members} members; only an empty group can be deleted"
            else:
                self._delete_group(sink, group)
        return sink.result(response)

    def remove_members(self, req: admin_pb2.RemoveMembersRequest, now_ms: int) -> Result:
        """Kafka's RemoveMembersFromConsumerGroup: remove members for good, by member_id or instance_id.

        Safety: a removed member that is still active (not at -2) may still be running its work -- an
        operator cannot know better than the coordinator -- so its items are held like a fenced
        member's, until its session would have expired (the worker SDK stops by then); its next
        heartbeat gets UNKNOWN_MEMBER_ID. A static member that left temporarily (-2) stopped its work
        before leaving, so its items are released at once."""
        sink = Sink(self.state, now_ms)
        response = admin_pb2.RemoveMembersResponse()
        try:
            validation.check_id(req.group_id, "group_id", cfg=self.config)
            if not req.members:
                raise invalid("members must name at least one member")
            validation.check_count(len(req.members), "members", self.config)
            for i, who in enumerate(req.members):
                if bool(who.member_id) == bool(who.instance_id):
                    raise invalid(f"members[{i}]: give exactly one of member_id and instance_id")
                validation.check_id(
                    who.member_id or who.instance_id,
                    f"members[{i}].{'member_id' if who.member_id else 'instance_id'}",
                    cfg=self.config,
                )
            group = self.state.groups.get(req.group_id)
            if group is None:
                raise ApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"group '{req.group_id}' does not exist")
            removed = False
            for who in req.members:
                result = response.results.add(member_id=who.member_id, instance_id=who.instance_id)
                mid = group.static_members.get(who.instance_id) if who.instance_id else who.member_id
                member = group.members.get(mid) if mid else None
                if member is None:
                    name = f"instance_id '{who.instance_id}'" if who.instance_id else f"member '{who.member_id}'"
                    result.error_code = ErrorCode.UNKNOWN_MEMBER_ID
                    result.error_message = f"{name} is not a member of group '{group.group_id}'"
                    continue
                result.member_id, result.instance_id = member.member_id, member.meta.instance_id or ""
                hold = member.member_epoch != STATIC_LEAVE_EPOCH
                self._remove_member(sink, group, member, now_ms, reason=EventType.MEMBER_REMOVED, hold=hold)
                removed = True
            if removed:
                self._after_change(sink, group, now_ms)
            response.group_epoch = group.epoch
        except ApiError as e:
            del response.results[:]
            response.error_code, response.error_message = e.code, e.message
        return sink.result(response)

    def _group_id_error(self, gid: str) -> str | None:
        try:
            validation.check_id(gid, "group_ids: a group id", cfg=self.config)
        except ApiError as e:
            return e.message
        return None

    def _delete_group(self, sink: Sink, group: Group) -> None:
        sink.event(group, EventType.GROUP_DELETED, **all_items(group.connectors).names("removed_"))
        sink.emit(GroupMetadata(group.group_id, None))
        kinds = (
            TimerKind.RETENTION,
            TimerKind.SCHEDULED,
            TimerKind.ASSIGNMENT,
            TimerKind.CLASSIC_JOIN,
            TimerKind.CLASSIC_SYNC,
            TimerKind.LOAD,
        )
        for kind in kinds:
            self.timer.cancel(TimerKey(kind, group.group_id))
        for mid in group.held:
            self.timer.cancel(TimerKey(TimerKind.HELD, group.group_id, mid))

    def list_groups(self, req: admin_pb2.ListGroupsRequest) -> admin_pb2.ListGroupsResponse:
        try:
            validation.check_list_groups(req, self.config)
        except ApiError as e:
            return admin_pb2.ListGroupsResponse(error_code=e.code)  # the response has no message field
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        response = admin_pb2.ListGroupsResponse()
        for gid in sorted(self.state.groups):
            group = self.state.groups[gid]
            state = explain.group_state(group)
            if (states and state.lower() not in states) or (types and group.meta.group_type not in types):
                continue
            response.groups.add(group_id=gid, group_state=state, group_type=group.meta.group_type)
        return response

    def describe_groups(self, req: admin_pb2.DescribeGroupsRequest) -> admin_pb2.DescribeGroupsResponse:
        return self._describe(req, None)

    def describe_groups_serialized(self, req: admin_pb2.DescribeGroupsRequest) -> Serialized:
        """`describe_groups(req)`, serialized member by member: what the runtime sends. Each member is
        built in a message of its own and serialized at once, so the answer's upb messages (~55
        bytes a task, assignment and target: 26 MB at 10,000 members / 100,000 tasks) never exist
        together; only the serialized answer does (3 MB there). Parses to the same message."""
        segments: list[list[bytes]] = []
        response = self._describe(req, segments)
        first_error = next((g.error_code for g in response.groups if g.error_code), 0)
        if len(segments) != len(response.groups):  # refused as a whole before any group was read
            return Serialized(response.SerializeToString(), first_error)
        parts: list[bytes] = []
        for described, members in zip(response.groups, segments, strict=True):
            head = described.SerializeToString()
            size = len(head) + sum(map(len, members))
            parts += (_GROUPS_TAG, _varint(size), head, *members)
            members.clear()  # (each member's bytes once: the joined answer takes their place)
        return Serialized(b"".join(parts), first_error)

    def _describe(
        self, req: admin_pb2.DescribeGroupsRequest, segments: list[list[bytes]] | None
    ) -> admin_pb2.DescribeGroupsResponse:
        """DescribeGroups; with `segments`, the members of each group (a `connect` group's) are not
        in its `DescribedGroup` but appended to `segments` (one list per group of the response, in
        order) serialized, each with its field tag and length: see `describe_groups_serialized`."""
        response = admin_pb2.DescribeGroupsResponse()
        try:
            validation.check_group_ids(req.group_ids, self.config)
        except ApiError as e:
            response.groups.add(error_code=e.code, error_message=e.message, group_state="Dead")
            return response
        # Capped before any id is read (reading 200,000 ids alone takes ~80 ms), then each group once,
        # in the order first named: one request naming a group 200,000 times built a 66 MB answer and
        # held the loop for seconds.
        limit = self.config.max_describe_group_ids
        if len(req.group_ids) > limit:
            response.groups.add(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"group_ids: {len(req.group_ids)} ids; group.connect.max.describe.group.ids is {limit}",
                group_state="Dead",
            )
            return response
        group_ids = list(dict.fromkeys(req.group_ids))
        budget = DESCRIBE_ANSWER_BYTES
        for gid in group_ids:
            error = self._group_id_error(gid)
            described = response.groups.add(group_id=gid if error is None else clip(gid))
            members_out: list[bytes] = []
            if segments is not None:
                segments.append(members_out)
            group = self.state.groups.get(gid) if error is None else None
            if error is not None:
                described.error_code, described.error_message = ErrorCode.INVALID_REQUEST, error
                described.group_state = "Dead"
                continue
            if group is None:
                described.error_code = ErrorCode.GROUP_ID_NOT_FOUND
                described.error_message = f"group '{gid}' does not exist"
                described.group_state = "Dead"
                continue
            # Sized before it is built (a generous estimate), and counted as built: the answer stays
            # under the send limit whatever the groups hold; the groups past it say so.
            classic = group.classic
            views = [explain.classic_view(classic, m) for m in ordered_members(classic)] if classic else []
            estimate = _describe_estimate(group, req.accept_task_ranges) + explain.classic_estimate(views)
            if estimate > budget:
                described.error_code = ErrorCode.INVALID_REQUEST
                described.error_message = (
                    f"the answer would pass {DESCRIBE_ANSWER_BYTES} bytes with this group: describe it on its own"
                    + ("" if req.accept_task_ranges else ", with accept_task_ranges")
                )
                described.group_state = "Dead"
                continue
            described.group_type = group.meta.group_type
            described.group_state = explain.group_state(group)
            described.config_offset = group.meta.config_offset
            described.group_epoch = group.epoch
            described.assignment_epoch = group.assignment_epoch
            described.assignor_name = self._safe_assignor(group)
            described.target_computed_by = group.target.computed_by
            weights = group.task_weights
            for name in sorted(group.connectors):
                spec = described.connectors.add(name=name, task_count=group.connectors[name])
                if name in weights:
                    spec.task_weight = weights[name]
            members_load = loads.group_loads(group) if group.item_loads else {}
            described.load_ratio = loads.load_ratio(members_load)
            # A classic group's members are all listed by `describe_classic` (SPEC §12): in the message.
            segmented = segments is not None and classic is None
            members_size = 0
            for mid, m in group.members.items():
                dm = (_DESCRIBED_MEMBER if segmented else described.members.add)(
                    member_id=mid,
                    instance_id=m.meta.instance_id or "",
                    url=m.meta.url,
                    client_id=m.meta.client_id,
                    member_epoch=m.member_epoch,
                    member_state=m.current.state,
                    member_type=m.meta.member_type,
                    load=members_load[mid][0] if mid in members_load else 0.0,
                    capacity=m.meta.capacity,
                    rack=m.meta.rack,
                )
                compact_tasks = req.accept_task_ranges  # only for a caller that reads them
                m.owned.to_proto(dm.assignment, compact_tasks=compact_tasks)
                group.target_of(mid).to_proto(dm.target_assignment, compact_tasks=compact_tasks)
                group.pending_of(m).to_proto(dm.pending, compact_tasks=compact_tasks)
                explain.describe_member(dm, group, m, self.timer)
                if segmented:
                    data = dm.SerializeToString()
                    members_out.append(_MEMBERS_TAG + _varint(len(data)) + data)
                    members_size += len(members_out[-1])
            explain.describe_group(described, group, self.timer)
            if classic is not None:
                explain.describe_classic(described, group, views, req.accept_task_ranges)
                for dm in described.members:  # (every member of a classic group: SPEC §12 rule 7)
                    dm.member_type = MEMBER_TYPE_CLASSIC
            budget -= described.ByteSize() + members_size
        return response

    def describe_configs(self, req: admin_pb2.DescribeConfigsRequest) -> admin_pb2.DescribeConfigsResponse:
        error = self._group_id_error(req.group_id)
        if error is not None:
            return admin_pb2.DescribeConfigsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=error)
        group = self.state.groups.get(req.group_id)
        if group is None:
            return admin_pb2.DescribeConfigsResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"group '{req.group_id}' does not exist"
            )
        response = admin_pb2.DescribeConfigsResponse()
        for name, value in sorted(self.group_configs(group).items()):
            response.configs.add(name=name, value=value, source="group" if name in group.configs else "default")
        return response

    def _safe_assignor(self, group: Group) -> str:
        try:
            return self._selected_assignor(group)
        except AssignorSelectionError:
            return ""

    # ---- timers ---------------------------------------------------------------------------------

    def _on_retention_deadline(self, sink: Sink, group: Group, key: TimerKey, now: int) -> bool:
        """An empty group (no members, no connectors) is deleted after group.connect.empty.retention
        (one session timeout if nobody configured it: `_empty_retention_ms`)."""
        if group.members or group.connectors:
            return False
        self._delete_group(sink, group)
        return True
