"""Request validation: every INVALID_REQUEST rule of seed 001/KIP-848, each message naming the field.

Validation runs before a handler touches any state, so a bad request never changes anything.
"""

from __future__ import annotations

from connect.coordinator.v1 import common_pb2, coordinator_pb2
from services.coordinator.errors import invalid

MAX_ID_LENGTH = 255
INT16_MAX = 2**15 - 1
INT8_MIN, INT8_MAX = -(2**7), 2**7 - 1


def check_id(value: str, field: str, *, required: bool = True) -> None:
    if not value:
        if required:
            raise invalid(f"{field} must be non-empty")
        return
    if len(value) > MAX_ID_LENGTH:
        raise invalid(f"{field} must be at most {MAX_ID_LENGTH} characters, got {len(value)}")


def check_items(msg: common_pb2.ConnectorsAndTasks, field: str) -> None:
    seen: set[str] = set()
    for i, c in enumerate(msg.connectors):
        check_id(c, f"{field}.connectors[{i}]")
        if c in seen:
            raise invalid(f"{field}.connectors[{i}] '{c}' is listed twice")
        seen.add(c)
    tasks: set[tuple[str, int]] = set()
    for i, t in enumerate(msg.tasks):
        check_id(t.connector, f"{field}.tasks[{i}].connector")
        if t.task < 0:
            raise invalid(f"{field}.tasks[{i}].task must be >= 0, got {t.task}")
        key = (t.connector, t.task)
        if key in tasks:
            raise invalid(f"{field}.tasks[{i}] {t.connector}-{t.task} is listed twice")
        tasks.add(key)


def check_assignors(assignors: common_pb2.ClientAssignors, field: str) -> None:
    names: set[str] = set()
    items = list(assignors.assignors)
    if not items:
        raise invalid(f"{field} must list at least one assignor")
    for i, a in enumerate(items):
        f = f"{field}[{i}]"
        check_id(a.name, f"{f}.name")
        if a.name in names:
            raise invalid(f"{f}.name '{a.name}' is listed twice")
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


def check_heartbeat(req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> None:
    check_id(req.group_id, "group_id")
    joining = req.member_epoch == 0
    check_id(req.member_id, "member_id", required=not joining)
    if req.member_epoch < -2:
        raise invalid(f"member_epoch must be >= -2 (0 joins, -1 leaves, -2 leaves temporarily), got {req.member_epoch}")
    if req.HasField("instance_id"):
        check_id(req.instance_id, "instance_id")
    if req.HasField("url") and len(req.url) > 4096:
        raise invalid("url must be at most 4096 characters")
    if req.HasField("client_id") and len(req.client_id) > MAX_ID_LENGTH:
        raise invalid(f"client_id must be at most {MAX_ID_LENGTH} characters")
    if req.HasField("rebalance_timeout_ms") and req.rebalance_timeout_ms <= 0:
        raise invalid(f"rebalance_timeout_ms must be > 0, got {req.rebalance_timeout_ms}")
    if req.HasField("client_assignors"):
        check_assignors(req.client_assignors, "client_assignors.assignors")
    if req.HasField("owned"):
        check_items(req.owned, "owned")


def check_member_request(group_id: str, member_id: str, member_epoch: int) -> None:
    check_id(group_id, "group_id")
    check_id(member_id, "member_id")
    if member_epoch < 0:
        raise invalid(f"member_epoch must be >= 0, got {member_epoch}")


def check_install(req: coordinator_pb2.ConnectGroupInstallAssignmentRequest) -> None:
    check_member_request(req.group_id, req.member_id, req.member_epoch)
    if req.group_epoch < 0:
        raise invalid(f"group_epoch must be >= 0, got {req.group_epoch}")
    if req.rebalance_delay_ms < 0:
        raise invalid(f"rebalance_delay_ms must be >= 0, got {req.rebalance_delay_ms}")
    if req.error == 0:
        for i, m in enumerate(req.members):
            check_id(m.member_id, f"members[{i}].member_id")
            check_items(m.connectors_and_tasks, f"members[{i}].connectors_and_tasks")


def check_join(req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> None:
    """What a new member's first heartbeat must carry. (A known member may heartbeat at epoch 0:
    in client-side mode it stays there until the first target is installed.)"""
    if not req.HasField("rebalance_timeout_ms"):
        raise invalid("rebalance_timeout_ms must be set (> 0) when joining (member_epoch 0)")
    if not req.HasField("client_assignors"):
        raise invalid("client_assignors must be set when joining (member_epoch 0)")
