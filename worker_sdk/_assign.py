"""Client-side assignment (seed 001): the worker the coordinator chose calls Prepare, runs the
assignor locally, and calls Install.

Response handling, per seed 001 and SPEC §3: STALE_MEMBER_EPOCH (and FENCED_MEMBER_EPOCH, the
seed's name for it) means "retry after the next heartbeat"; any other error abandons this attempt
(the coordinator picks an executor again). Transport errors and COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS are retried with exponential backoff and jitter within the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from worker_sdk._member import AssignmentOutcome, AssignmentTask

log = logging.getLogger("worker_sdk.assign")

AssignFn = Callable[[assignor_pb2.AssignRequest], assignor_pb2.AssignResponse]

RETRIABLE_CODES = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
RETRY_LATER_CODES = frozenset({ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH})
RETRIABLE_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class CoordinatorStub(Protocol):
    def ConnectGroupPrepareAssignment(self, request: Any, *, timeout: float | None = None) -> Awaitable[Any]: ...

    def ConnectGroupInstallAssignment(self, request: Any, *, timeout: float | None = None) -> Awaitable[Any]: ...


def assign_request(
    group_id: str, prepared: coordinator_pb2.ConnectGroupPrepareAssignmentResponse
) -> assignor_pb2.AssignRequest:
    """The assignor's input: a Prepare response carries the same fields as an AssignRequest."""
    return assignor_pb2.AssignRequest(
        assignor_name=prepared.assignor_name,
        group_id=group_id,
        group_epoch=prepared.group_epoch,
        members=prepared.members,
        connectors=prepared.connectors,
        current_target=prepared.current_target,
        assignor_state=prepared.assignor_state,
        now_ms=prepared.now_ms,
        group_configs=prepared.group_configs,
    )


def install_request(
    task: AssignmentTask, group_epoch: int, result: assignor_pb2.AssignResponse
) -> coordinator_pb2.ConnectGroupInstallAssignmentRequest:
    req = coordinator_pb2.ConnectGroupInstallAssignmentRequest(
        group_id=task.group_id,
        member_id=task.member_id,
        member_epoch=task.member_epoch,
        group_epoch=group_epoch,
        error=result.error,
    )
    if result.error == 0:
        req.members.extend(result.members)
        req.assignor_state = result.assignor_state
        req.rebalance_delay_ms = result.rebalance_delay_ms
    return req


def run_assignor(assign_fn: AssignFn, request: assignor_pb2.AssignRequest) -> assignor_pb2.AssignResponse:
    """Run the assignor; a crash becomes an in-band error (installed as such: the target is kept)."""
    try:
        return assign_fn(request)
    except Exception as e:
        log.exception("assignor %r failed on group %s", request.assignor_name, request.group_id)
        return assignor_pb2.AssignResponse(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=f"assignor crashed: {e}")


@dataclass
class Retry:
    """Exponential backoff with jitter, bounded by a deadline (seconds on `clock`)."""

    deadline_s: float
    rng: random.Random
    clock: Callable[[], float] = time.monotonic
    base_s: float = 0.1
    max_s: float = 1.0
    jitter: float = 0.2
    attempt: int = 0

    def next_delay(self) -> float | None:
        self.attempt += 1
        delay = min(self.base_s * 2 ** min(self.attempt - 1, 30), self.max_s)
        delay *= self.rng.uniform(1 - self.jitter, 1 + self.jitter)
        return delay if self.clock() + delay < self.deadline_s else None


async def _call(
    method: Callable[..., Awaitable[Any]], request: Any, what: str, retry: Retry, timeout_s: float
) -> Any | None:
    """One RPC with retries on transport errors and "not available"; None when the deadline passes."""
    while True:
        remaining = retry.deadline_s - retry.clock()
        if remaining <= 0:
            return None
        try:
            response = await method(request, timeout=min(timeout_s, remaining))
        except grpc.aio.AioRpcError as e:
            if e.code() not in RETRIABLE_STATUS:
                log.error("%s failed: %s %s", what, e.code().name, e.details())
                return None
            why = f"{e.code().name} {e.details()}"
        else:
            if response.error_code not in RETRIABLE_CODES:
                return response
            why = f"{ErrorCode.Name(response.error_code)} {response.error_message}"
        delay = retry.next_delay()
        if delay is None:
            log.warning("%s: giving up (%s)", what, why)
            return None
        log.info("%s: %s; retrying in %.0f ms", what, why, delay * 1000)
        await asyncio.sleep(delay)


def _outcome(code: int, what: str, message: str) -> AssignmentOutcome:
    if code in RETRY_LATER_CODES:
        log.info("%s: %s (%s); retrying after the next heartbeat", what, ErrorCode.Name(code), message)
        return AssignmentOutcome.RETRY
    name = ErrorCode.Name(code) if code in ErrorCode.values() else str(code)
    log.warning("%s failed: %s (%s); abandoning this assignment", what, name, message)
    return AssignmentOutcome.ABANDONED


async def compute_and_install(
    stub: CoordinatorStub,
    task: AssignmentTask,
    *,
    assign_fn: AssignFn,
    deadline_s: float,
    rpc_timeout_s: float,
    rng: random.Random,
    clock: Callable[[], float] = time.monotonic,
) -> AssignmentOutcome:
    """Prepare, compute with the local assignor (in a thread: it may be heavy), Install."""
    retry = Retry(deadline_s, rng, clock)
    prepare = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
        group_id=task.group_id, member_id=task.member_id, member_epoch=task.member_epoch
    )
    prepared = await _call(
        stub.ConnectGroupPrepareAssignment, prepare, "ConnectGroupPrepareAssignment", retry, rpc_timeout_s
    )
    if prepared is None:
        return AssignmentOutcome.ABANDONED
    if prepared.error_code != ErrorCode.NONE:
        return _outcome(prepared.error_code, "ConnectGroupPrepareAssignment", prepared.error_message)
    request = assign_request(task.group_id, prepared)
    result = await asyncio.to_thread(run_assignor, assign_fn, request)
    if result.error == ErrorCode.UNSUPPORTED_ASSIGNOR:
        log.error(
            "this worker cannot compute with assignor %r for group %s (client-side mode): %s; refusing "
            "(the coordinator keeps the current target): use an assignor service serving %r "
            "(assignment.mode=service) or an assignor this worker implements",
            request.assignor_name,
            task.group_id,
            result.error_message,
            request.assignor_name,
        )
    elif result.error:
        log.error(
            "assignor %r failed for group %s epoch %d: %d %s (installing the error: the current target is kept)",
            request.assignor_name,
            task.group_id,
            prepared.group_epoch,
            result.error,
            result.error_message,
        )
    install = install_request(task, prepared.group_epoch, result)
    installed = await _call(
        stub.ConnectGroupInstallAssignment, install, "ConnectGroupInstallAssignment", retry, rpc_timeout_s
    )
    if installed is None:
        return AssignmentOutcome.ABANDONED
    if installed.error_code != ErrorCode.NONE:
        return _outcome(installed.error_code, "ConnectGroupInstallAssignment", installed.error_message)
    log.info(
        "installed the target assignment of group %s for group epoch %d (%d members, delay %d ms)",
        task.group_id,
        prepared.group_epoch,
        len(install.members),
        install.rebalance_delay_ms,
    )
    return AssignmentOutcome.INSTALLED if result.error == 0 else AssignmentOutcome.ABANDONED
