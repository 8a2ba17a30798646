"""Request validation: every INVALID_REQUEST rule of seed 001/KIP-848, each message naming the field.

Validation runs before a handler touches any state, so a bad request never changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from connect.coordinator.v1 import admin_pb2, common_pb2, coordinator_pb2
from services.common import compact
from services.common.load_limits import CAPACITY_RANGE, LOAD_RANGE, capacity_ok, load_ok
from services.common.logsafe import first_control
from services.coordinator.core.config import ServerConfig
from services.coordinator.core.errors import clip, invalid
from services.coordinator.core.state import HandedOut

MAX_ID_LENGTH = ServerConfig.max_id_length
MAX_URL_LENGTH = 4096
INT16_MAX = 2**15 - 1
INT8_MIN, INT8_MAX = -(2**7), 2**7 - 1
DEFAULTS = ServerConfig()


def check_text(value: str, field: str, max_length: int, what: str = "") -> None:
    """A string the database will store: bounded, no NUL (PostgreSQL refuses it in text and JSON) nor
    other control character (`logsafe.CONTROL_CATEGORIES`), encodable as UTF-8 (no lone surrogates)."""
    if len(value) > max_length:
        raise invalid(f"{field} must be at most {max_length} characters{what}, got {len(value)}")
    if "\x00" in value:
        raise invalid(f"{field} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid(f"{field} is not valid UTF-8 (it contains a lone surrogate)") from None
    at = first_control(value)
    if at >= 0:  # a newline forged log lines, an ESC repainted the terminal of `connect-groups list`
        raise invalid(
            f"{field} must not contain control characters (U+{ord(value[at]):04X} at position {at}: "
            "newlines, ESC, other C0/C1 controls, Unicode format characters and line separators)"
        )


def check_id(value: str, field: str, *, required: bool = True, cfg: ServerConfig = DEFAULTS) -> None:
    if not value:
        if required:
            raise invalid(f"{field} must be non-empty")
        return
    check_text(value, field, cfg.max_id_length, " (group.connect.max.id.length)")


def check_count(count: int, field: str, cfg: ServerConfig) -> None:
    if count > cfg.max_items_per_request:
        raise invalid(
            f"{field} lists {count} items, more than group.connect.max.items.per.request = {cfg.max_items_per_request}"
        )


def check_items(msg: common_pb2.ConnectorsAndTasks, field: str, cfg: ServerConfig = DEFAULTS) -> None:
    check_count(len(msg.connectors) + len(msg.tasks), field, cfg)
    if compact.has_ranges(msg):
        # Checked before anything is expanded: their counts add up against the same bound.
        try:
            compact.check_ranges(
                msg,
                field,
                max_items=cfg.max_items_per_request,
                max_tasks_per_connector=cfg.max_tasks_per_connector,
                max_items_name=" (group.connect.max.items.per.request)",
            )
        except compact.InvalidItems as e:
            raise invalid(str(e)) from None
        for i, connector in enumerate(msg.task_range_connectors):
            check_id(connector, f"{field}.task_range_connectors[{i}]", cfg=cfg)
    seen: set[str] = set()
    for i, c in enumerate(msg.connectors):
        check_id(c, f"{field}.connectors[{i}]", cfg=cfg)
        if c in seen:
            raise invalid(f"{field}.connectors[{i}] '{clip(c)}' is listed twice")
        seen.add(c)
    tasks: set[tuple[str, int]] = set()
    for i, t in enumerate(msg.tasks):
        check_id(t.connector, f"{field}.tasks[{i}].connector", cfg=cfg)
        if t.task < 0:
            raise invalid(f"{field}.tasks[{i}].task must be >= 0, got {t.task}")
        key = (t.connector, t.task)
        if key in tasks:
            raise invalid(f"{field}.tasks[{i}] {clip(t.connector)}-{t.task} is listed twice")
        tasks.add(key)


def check_assignors(assignors: common_pb2.ClientAssignors, field: str, cfg: ServerConfig = DEFAULTS) -> None:
    names: set[str] = set()
    items = list(assignors.assignors)
    if not items:
        raise invalid(f"{field} must list at least one assignor")
    check_count(len(items), field, cfg)
    for i, a in enumerate(items):
        f = f"{field}[{i}]"
        check_id(a.name, f"{f}.name", cfg=cfg)
        if a.name in names:
            raise invalid(f"{f}.name '{clip(a.name)}' is listed twice")
        names.add(a.name)
        if not -1 <= a.minimum_version <= INT16_MAX:
            raise invalid(f"{f}.minimum_version must be >= -1 (and fit int16), got {a.minimum_version}")
        if not 0 <= a.maximum_version <= INT16_MAX:
            raise invalid(f"{f}.maximum_version must be >= 0 (and fit int16), got {a.maximum_version}")
        if a.maximum_version < a.minimum_version:
            raise invalid(f"{f}.maximum_version ({a.maximum_version}) must be >= minimum_version ({a.minimum_version})")
        if not a.minimum_version <= a.version <= a.maximum_version:
            raise invalid(
                f"{f}.version ({a.version}) must be within [minimum_version, maximum_version] = [{a.minimum_version}, {a.maximum_version}]"
            )
        if not INT8_MIN <= a.reason <= INT8_MAX:
            raise invalid(f"{f}.reason must fit int8, got {a.reason}")


def check_heartbeat(req: coordinator_pb2.ConnectGroupHeartbeatRequest, cfg: ServerConfig = DEFAULTS) -> None:
    check_id(req.group_id, "group_id", cfg=cfg)
    joining = req.member_epoch == 0
    check_id(req.member_id, "member_id", required=not joining, cfg=cfg)
    if req.member_epoch < -2:
        raise invalid(f"member_epoch must be >= -2 (0 joins, -1 leaves, -2 leaves temporarily), got {req.member_epoch}")
    if req.HasField("instance_id"):
        check_id(req.instance_id, "instance_id", cfg=cfg)
    if req.HasField("url"):
        check_text(req.url, "url", MAX_URL_LENGTH)
    if req.HasField("client_id"):
        check_text(req.client_id, "client_id", cfg.max_id_length, " (group.connect.max.id.length)")
    if req.HasField("rebalance_timeout_ms") and not 0 < req.rebalance_timeout_ms <= cfg.max_rebalance_timeout_ms:
        raise invalid(
            f"rebalance_timeout_ms must be > 0 and at most {cfg.max_rebalance_timeout_ms} "
            f"(group.connect.max.rebalance.timeout.ms), got {req.rebalance_timeout_ms}"
        )
    if req.HasField("request_sequence") and req.request_sequence < 0:
        raise invalid(f"request_sequence must be >= 0, got {req.request_sequence}")
    if req.HasField("client_assignors"):
        check_assignors(req.client_assignors, "client_assignors.assignors", cfg)
    if req.HasField("owned"):
        check_items(req.owned, "owned", cfg)
    check_load_report(req, cfg)


MAX_RACK_BYTES = 255


def check_load_report(req: coordinator_pb2.ConnectGroupHeartbeatRequest, cfg: ServerConfig = DEFAULTS) -> None:
    """SPEC §13: loads from 0 to MAX_LOAD, each naming an item well (which items the member owns is
    the membership's check, `loads.check_owned`); capacity from MIN_CAPACITY to MAX_CAPACITY
    (`services.common.load_limits`: every sum and ratio of them stays finite); rack at most 255 bytes."""
    if req.HasField("capacity") and not capacity_ok(req.capacity):
        raise invalid(f"capacity must be {CAPACITY_RANGE} (default 1.0), got {req.capacity}")
    if req.HasField("rack"):
        size = len(req.rack.encode("utf-8", "surrogatepass"))
        if size > MAX_RACK_BYTES:
            raise invalid(f"rack must be at most {MAX_RACK_BYTES} bytes, got {size}")
        check_text(req.rack, "rack", MAX_RACK_BYTES)
    if not req.HasField("item_loads"):
        return
    loads = req.item_loads.loads
    check_count(len(loads), "item_loads", cfg)
    for i, entry in enumerate(loads):
        check_id(entry.connector, f"item_loads[{i}].connector", cfg=cfg)
        name = clip(entry.connector)
        if entry.HasField("task"):
            if entry.task < 0:
                raise invalid(f"item_loads[{name}-{entry.task}].task must be >= 0")
            name = f"{name}-{entry.task}"
        if not load_ok(entry.load):
            raise invalid(f"item_loads[{name}].load must be {LOAD_RANGE}, got {entry.load}")


def check_member_request(group_id: str, member_id: str, member_epoch: int, cfg: ServerConfig = DEFAULTS) -> None:
    check_id(group_id, "group_id", cfg=cfg)
    check_id(member_id, "member_id", cfg=cfg)
    if member_epoch < 0:
        raise invalid(f"member_epoch must be >= 0, got {member_epoch}")


def check_install(
    req: coordinator_pb2.ConnectGroupInstallAssignmentRequest,
    cfg: ServerConfig = DEFAULTS,
    handed_out: Mapping[str, HandedOut] | None = None,
) -> None:
    """``handed_out``: entries the coordinator built itself (Prepare's current target, by member); a
    member entry equal to its own is not checked item by item again."""
    check_member_request(req.group_id, req.member_id, req.member_epoch, cfg)
    if req.group_epoch < 0:
        raise invalid(f"group_epoch must be >= 0, got {req.group_epoch}")
    if req.rebalance_delay_ms < 0:
        raise invalid(f"rebalance_delay_ms must be >= 0, got {req.rebalance_delay_ms}")
    if req.error == 0:
        check_count(len(req.members), "members", cfg)
        total = sum(
            len(m.connectors_and_tasks.connectors)
            + len(m.connectors_and_tasks.tasks)
            + sum(max(n, 0) for n in m.connectors_and_tasks.task_range_counts)
            for m in req.members
        )
        check_count(total, "members[].connectors_and_tasks", cfg)
        handed_out = handed_out or {}
        for i, m in enumerate(req.members):
            check_id(m.member_id, f"members[{i}].member_id", cfg=cfg)
            own = handed_out.get(m.member_id)
            if own is None or own.entry != m:
                check_items(m.connectors_and_tasks, f"members[{i}].connectors_and_tasks", cfg)


def check_group_ids(group_ids: list[str] | object, cfg: ServerConfig) -> None:
    """DescribeGroups / DeleteGroups: how many ids one request may carry (each id is checked per group)."""
    check_count(len(group_ids), "group_ids", cfg)  # type: ignore[arg-type]


def check_alter_configs(req: admin_pb2.AlterConfigsRequest, cfg: ServerConfig) -> None:
    check_id(req.group_id, "group_id", cfg=cfg)
    check_count(len(req.set) + len(req.delete), "set + delete", cfg)
    for i, entry in enumerate(req.set):
        check_id(entry.name, f"set[{i}].name", cfg=cfg)
        check_text(entry.value, f"set[{i}].value ({entry.name})", cfg.max_id_length, " (group.connect.max.id.length)")
    for i, name in enumerate(req.delete):
        check_id(name, f"delete[{i}]", cfg=cfg)


def check_list_groups(req: admin_pb2.ListGroupsRequest, cfg: ServerConfig) -> None:
    check_count(len(req.states_filter), "states_filter", cfg)
    check_count(len(req.types_filter), "types_filter", cfg)


def check_join(req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> None:
    """What a new member's first heartbeat must carry. (A known member may heartbeat at epoch 0:
    in client-side mode it stays there until the first target is installed.)"""
    if not req.HasField("rebalance_timeout_ms"):
        raise invalid("rebalance_timeout_ms must be set (> 0) when joining (member_epoch 0)")
    if not req.HasField("client_assignors"):
        raise invalid("client_assignors must be set when joining (member_epoch 0)")
