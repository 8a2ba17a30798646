"""Client-side assignment (seed 001) over grpc.aio: the worker the coordinator chose calls Prepare,
runs the assignor locally, and calls Install.

The sequence and its rules (which answers are retried, when, and which abandon the attempt) are
`worker_sdk._assign_flow.AssignmentFlow`'s, a sans-I/O machine the simulator drives too; this file
only does the I/O: the two RPCs, the assignor in a thread, the backoff sleeps, and the logs.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc

from connect.coordinator.v1 import assignor_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from worker_sdk._assign_flow import (
    RETRIABLE_CODES,
    RETRY_LATER_CODES,
    AssignmentFlow,
    Compute,
    Done,
    SendInstall,
    SendPrepare,
    Wait,
    assign_request,
    install_request,
)
from worker_sdk._member import AssignmentOutcome, AssignmentTask

__all__ = [
    "RETRIABLE_CODES",
    "RETRIABLE_STATUS",
    "RETRY_LATER_CODES",
    "AssignFn",
    "CoordinatorStub",
    "assign_request",
    "compute_and_install",
    "install_request",
    "run_assignor",
]

log = logging.getLogger("worker_sdk.assign")

AssignFn = Callable[[assignor_pb2.AssignRequest], assignor_pb2.AssignResponse]

RETRIABLE_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class CoordinatorStub(Protocol):
    def ConnectGroupPrepareAssignment(self, request: Any, *, timeout: float | None = None) -> Awaitable[Any]: ...

    def ConnectGroupInstallAssignment(self, request: Any, *, timeout: float | None = None) -> Awaitable[Any]: ...


def run_assignor(assign_fn: AssignFn, request: assignor_pb2.AssignRequest) -> assignor_pb2.AssignResponse:
    """Run the assignor; a crash becomes an in-band error (installed as such: the target is kept)."""
    try:
        return assign_fn(request)
    except Exception as e:
        log.exception("assignor %r failed on group %s", request.assignor_name, request.group_id)
        return assignor_pb2.AssignResponse(error=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=f"assignor crashed: {e}")


def _log_result(task: AssignmentTask, action: Compute, result: assignor_pb2.AssignResponse) -> None:
    name = action.request.assignor_name
    if result.error == ErrorCode.UNSUPPORTED_ASSIGNOR:
        log.error(
            "this worker cannot compute with assignor %r for group %s (client-side mode): %s; refusing "
            "(the coordinator keeps the current target): use an assignor service serving %r "
            "(assignment.mode=service) or an assignor this worker implements",
            name,
            task.group_id,
            result.error_message,
            name,
        )
    elif result.error:
        log.error(
            "assignor %r failed for group %s epoch %d: %d %s (installing the error: the current target is kept)",
            name,
            task.group_id,
            action.group_epoch,
            result.error,
            result.error_message,
        )


def _log_done(flow: AssignmentFlow, done: Done) -> None:
    if done.outcome == AssignmentOutcome.INSTALLED:
        install = flow.install
        assert install is not None
        log.info(
            "installed the target assignment of group %s for group epoch %d (%d members, delay %d ms)",
            flow.task.group_id,
            install.group_epoch,
            len(install.members),
            install.rebalance_delay_ms,
        )
    elif done.outcome == AssignmentOutcome.RETRY:
        log.info("%s", done.why)
    else:
        log.warning("%s", done.why)


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
    """Prepare, compute with the local assignor (in a thread: it may be heavy), Install, driving an
    `AssignmentFlow` (`clock` in seconds, like `deadline_s`)."""

    def now_ms() -> float:
        return clock() * 1000

    flow = AssignmentFlow(task, deadline_ms=deadline_s * 1000, rpc_timeout_ms=rpc_timeout_s * 1000, rng=rng)
    while True:
        action = flow.next_action(now_ms())
        if isinstance(action, Done):
            _log_done(flow, action)
            return action.outcome
        if isinstance(action, Wait):
            delay_ms = action.until_ms - now_ms()
            log.info("%s; retrying in %.0f ms", action.why, delay_ms)
            await asyncio.sleep(max(0.0, delay_ms / 1000))
        elif isinstance(action, Compute):
            result = await asyncio.to_thread(run_assignor, assign_fn, action.request)
            _log_result(task, action, result)
            flow.on_computed(result, now_ms())
        elif isinstance(action, SendPrepare | SendInstall):
            method = (
                stub.ConnectGroupPrepareAssignment
                if isinstance(action, SendPrepare)
                else stub.ConnectGroupInstallAssignment
            )
            try:
                response = await method(action.request, timeout=action.timeout_ms / 1000)
            except grpc.aio.AioRpcError as e:
                code = e.code()
                flow.on_transport_error(now_ms(), f"{code.name} {e.details()}", retriable=code in RETRIABLE_STATUS)
            else:
                if isinstance(action, SendPrepare):
                    flow.on_prepare_response(response, now_ms())
                else:
                    flow.on_install_response(response, now_ms())
        else:  # None: nothing is outstanding in this sequential driver, so this cannot happen
            raise AssertionError(f"assignment flow stalled in phase {flow.phase}")
