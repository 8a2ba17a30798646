"""ListGroupEvents: the rebalance event log of a group, served from storage.

Events are read from the ``rebalance_events`` table in a thread (never on the event loop), after a
barrier: an event is shown only once the change it records is durable, like every response.
Paged by event id (ids only grow), at most ``MAX_EVENTS`` per call.
"""

from __future__ import annotations

import asyncio
import json

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core import validation
from services.coordinator.core.errors import ApiError, invalid
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime, NotAvailable

DEFAULT_MAX_EVENTS = 100
MAX_EVENTS = 1000


def _check(req: admin_pb2.ListGroupEventsRequest) -> int:
    validation.check_id(req.group_id, "group_id")
    if req.after_event_id < 0:
        raise invalid(f"after_event_id must be >= 0, got {req.after_event_id}")
    if req.HasField("since_ms") and req.since_ms < 0:
        raise invalid(f"since_ms must be >= 0, got {req.since_ms}")
    if req.max_events < 0:
        raise invalid(f"max_events must be >= 0, got {req.max_events}")
    return min(req.max_events or DEFAULT_MAX_EVENTS, MAX_EVENTS)


async def list_group_events(
    runtime: CoordinatorRuntime, req: admin_pb2.ListGroupEventsRequest
) -> admin_pb2.ListGroupEventsResponse:
    try:
        limit = _check(req)
    except ApiError as e:
        return admin_pb2.ListGroupEventsResponse(error_code=e.code, error_message=e.message)
    if not runtime.loaded:
        raise NotAvailable(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the coordinator is loading its state")
    try:
        await runtime.barrier()  # what is in the table from here on includes every change shown so far
    except Exception:
        raise NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, "a storage write failed; retry") from None
    gid = req.group_id
    since_ms = req.since_ms if req.HasField("since_ms") else None
    storage = runtime.storage
    try:
        stored = await asyncio.to_thread(storage.read_events, gid, req.after_event_id, limit, since_ms)
        # A group that does not exist and never did (its history survives a deletion) is an error.
        known = bool(stored) or gid in runtime.coordinator.state.groups
        if not known:
            known = bool(await asyncio.to_thread(storage.read_events, gid, 0, 1))
    except Exception as e:
        raise NotAvailable(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"reading the event log failed: {e}") from None
    if not known:
        return admin_pb2.ListGroupEventsResponse(
            error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"group '{gid}' does not exist and has no events"
        )
    response = admin_pb2.ListGroupEventsResponse(next_event_id=stored[-1].id if stored else req.after_event_id)
    for s in stored:
        r = s.record
        response.events.add(
            event_id=s.id,
            time_ms=r.time_ms,
            event=r.event,
            member_id=r.member_id,
            group_epoch=r.group_epoch,
            assignment_epoch=r.assignment_epoch,
            member_epoch=r.member_epoch,
            details_json=json.dumps(r.details, sort_keys=True, separators=(",", ":")),
        )
    return response
