"""Small builders shared by the worker tests."""

from __future__ import annotations

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId


def items(*names: str) -> Items:
    """'a' is connector a; 'a-1' is task 1 of a."""
    connectors: set[str] = set()
    tasks: set[TaskId] = set()
    for n in names:
        if "-" in n:
            c, t = n.rsplit("-", 1)
            tasks.add(TaskId(c, int(t)))
        else:
            connectors.add(n)
    return Items(frozenset(connectors), frozenset(tasks))


def response(
    member_id: str = "m1",
    epoch: int = 1,
    *,
    interval: int = 1_000,
    session: int = 10_000,
    assigned: Items | None = None,
    pending: Items | None = None,
    code: int = ErrorCode.NONE,
    message: str = "",
) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    r = coordinator_pb2.ConnectGroupHeartbeatResponse(
        error_code=code,  # type: ignore[arg-type]
        error_message=message,
        member_id=member_id,
        member_epoch=epoch,
        heartbeat_interval_ms=interval,
        session_timeout_ms=session,
    )
    if assigned is not None or pending is not None:
        (assigned or Items()).to_proto(r.assignment.assigned)
        (pending or Items()).to_proto(r.assignment.pending)
    return r


def error(code: int, message: str = "") -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    return coordinator_pb2.ConnectGroupHeartbeatResponse(error_code=code, error_message=message)  # type: ignore[arg-type]
