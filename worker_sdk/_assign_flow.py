"""Client-side assignment (seed 001) as a sans-I/O state machine: no sockets, no asyncio, no clock.

The worker the coordinator chose (COMPUTE_ASSIGNMENT) calls Prepare, runs the assignor locally and
calls Install. `AssignmentFlow` holds that sequence and its rules; a driver does the I/O. Both
`worker_sdk._assign.compute_and_install` (grpc.aio) and the simulator (`simulator.worker`) drive it:

    flow = AssignmentFlow(task, deadline_ms=now + rebalance_timeout_ms, rpc_timeout_ms=..., rng=rng)
    while not isinstance(action := flow.next_action(now), Done):
        SendPrepare / SendInstall -> send it; report on_prepare_response / on_install_response,
                                     or on_transport_error (timeouts, refused connections...)
        Compute                   -> run the assignor on action.request; report on_computed
        Wait                      -> come back at action.until_ms
        None                      -> an answer (or the computation) is outstanding: wait for it

The rules, per seed 001 and SPEC §3:
* STALE_MEMBER_EPOCH (and FENCED_MEMBER_EPOCH, the seed's name for it): the outcome is RETRY,
  i.e. try again after the next heartbeat;
* COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS and retriable transport errors: the same
  request again after an exponential backoff with jitter (100 ms doubling up to 1 s, +-20 %; the
  attempt count is shared by Prepare and Install), as long as the retry starts before the deadline;
* no request is sent once the deadline has passed, and none waits beyond it (its timeout is
  min(rpc timeout, time left));
* any other error (or a transport error that is not retriable) abandons this attempt: the
  coordinator picks an executor again;
* an assignor failure is installed as an error (the coordinator keeps the current target); the
  outcome is then ABANDONED, not INSTALLED.

Times are milliseconds on the driver's clock (any origin; floats allowed); backoff delays are whole
milliseconds. The machine's only randomness is the injected `rng` (one `uniform` per retry).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from worker_sdk._member import AssignmentOutcome, AssignmentTask

RETRIABLE_CODES = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
RETRY_LATER_CODES = frozenset({ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH})

BACKOFF_BASE_MS = 100
BACKOFF_MAX_MS = 1_000
BACKOFF_JITTER = 0.2

PREPARE = "ConnectGroupPrepareAssignment"
INSTALL = "ConnectGroupInstallAssignment"


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
        # Compact results (hence a compact Install) only for a coordinator that reads them.
        accept_task_ranges=prepared.accept_task_ranges,
        # The coordinator vouches for its target (validated at install, no connector shrank since).
        current_target_checked=prepared.current_target_checked,
        # The coordinator keeps the entries it handed out: unchanged members may be left out.
        accept_unchanged_omitted=prepared.accept_unchanged_omitted,
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
        req.unchanged_omitted = result.unchanged_omitted
    return req


def backoff_ms(attempt: int, rng: random.Random) -> int:
    """The delay before retry number `attempt` (1-based): 100 ms doubling, at most 1 s, +-20 % jitter."""
    delay = min(BACKOFF_BASE_MS * 2 ** min(attempt - 1, 30), BACKOFF_MAX_MS)
    return round(delay * rng.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER))


def code_name(code: int) -> str:
    return ErrorCode.Name(code) if code in ErrorCode.values() else str(code)


# ---- actions: what the driver must do next ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendPrepare:
    request: coordinator_pb2.ConnectGroupPrepareAssignmentRequest
    timeout_ms: float


@dataclass(frozen=True, slots=True)
class Compute:
    """Run the assignor on `request` (a crash must come back as an in-band error), then `on_computed`."""

    request: assignor_pb2.AssignRequest
    group_epoch: int


@dataclass(frozen=True, slots=True)
class SendInstall:
    request: coordinator_pb2.ConnectGroupInstallAssignmentRequest
    timeout_ms: float


@dataclass(frozen=True, slots=True)
class Wait:
    """Backing off after a retriable failure (`why`): nothing to do before `until_ms`."""

    until_ms: float
    why: str


@dataclass(frozen=True, slots=True)
class Done:
    outcome: AssignmentOutcome
    why: str


Action = SendPrepare | Compute | SendInstall | Wait | Done


class Phase(enum.StrEnum):
    PREPARE = "prepare"
    COMPUTE = "compute"
    INSTALL = "install"
    DONE = "done"


class AssignmentFlow:
    """One client-side assignment task, from Prepare to its outcome (see the module docstring).

    `next_action(now)` says what to do; the `on_*` methods report what happened and return False
    (changing nothing) when the report does not answer what the flow is waiting for.
    """

    def __init__(self, task: AssignmentTask, *, deadline_ms: float, rpc_timeout_ms: float, rng: random.Random) -> None:
        self.task = task
        self.deadline_ms = deadline_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self.rng = rng
        self.phase = Phase.PREPARE
        self.attempts = 0  # retriable failures so far (Prepare and Install together)
        self.prepared: coordinator_pb2.ConnectGroupPrepareAssignmentResponse | None = None
        self.result: assignor_pb2.AssignResponse | None = None
        self.install: coordinator_pb2.ConnectGroupInstallAssignmentRequest | None = None
        self._outstanding = False  # a request or the computation is under way
        self._retry_at_ms: float | None = None
        self._retry_why = ""
        self._done: Done | None = None

    @property
    def done(self) -> Done | None:
        return self._done

    @property
    def outstanding(self) -> bool:
        """A request (or the computation) was handed to the driver and is not answered yet."""
        return self._outstanding

    def next_action(self, now_ms: float) -> Action | None:
        if self._done is not None:
            return self._done
        if self._outstanding:
            return None
        if self._retry_at_ms is not None:
            if now_ms < self._retry_at_ms:
                return Wait(self._retry_at_ms, self._retry_why)
            self._retry_at_ms = None
        if self.phase == Phase.COMPUTE:
            assert self.prepared is not None
            self._outstanding = True
            return Compute(assign_request(self.task.group_id, self.prepared), self.prepared.group_epoch)
        remaining = self.deadline_ms - now_ms
        if remaining <= 0:
            return self._finish(AssignmentOutcome.ABANDONED, f"{self._rpc_name()}: deadline passed")
        self._outstanding = True
        timeout = min(self.rpc_timeout_ms, remaining)
        if self.phase == Phase.PREPARE:
            task = self.task
            request = coordinator_pb2.ConnectGroupPrepareAssignmentRequest(
                group_id=task.group_id,
                member_id=task.member_id,
                member_epoch=task.member_epoch,
                accept_task_ranges=True,
            )
            return SendPrepare(request, timeout)
        assert self.install is not None
        return SendInstall(self.install, timeout)

    # ---- reports --------------------------------------------------------------------------------

    def on_prepare_response(
        self, response: coordinator_pb2.ConnectGroupPrepareAssignmentResponse, now_ms: float
    ) -> bool:
        if not self._awaiting(Phase.PREPARE):
            return False
        if self._settled_by_error(response.error_code, response.error_message, now_ms):
            return True
        self.prepared = response
        self.phase = Phase.COMPUTE
        return True

    def on_computed(self, result: assignor_pb2.AssignResponse, now_ms: float) -> bool:
        if not self._awaiting(Phase.COMPUTE):
            return False
        assert self.prepared is not None
        self.result = result
        self.install = install_request(self.task, self.prepared.group_epoch, result)
        self.phase = Phase.INSTALL
        return True

    def on_install_response(
        self, response: coordinator_pb2.ConnectGroupInstallAssignmentResponse, now_ms: float
    ) -> bool:
        if not self._awaiting(Phase.INSTALL):
            return False
        if self._settled_by_error(response.error_code, response.error_message, now_ms):
            return True
        assert self.result is not None
        if self.result.error == 0:
            self._finish(AssignmentOutcome.INSTALLED, f"{INSTALL}: installed")
        else:
            self._finish(AssignmentOutcome.ABANDONED, f"{INSTALL}: installed the assignor's error")
        return True

    def on_transport_error(self, now_ms: float, why: str, *, retriable: bool = True) -> bool:
        """The request failed without an answer (timeout, connection refused or reset...)."""
        if self.phase not in (Phase.PREPARE, Phase.INSTALL) or not self._outstanding:
            return False
        self._outstanding = False
        if retriable:
            self._back_off(why, now_ms)
        else:
            self._finish(AssignmentOutcome.ABANDONED, f"{self._rpc_name()} failed: {why}")
        return True

    # ---- rules ----------------------------------------------------------------------------------

    def _awaiting(self, phase: Phase) -> bool:
        if self.phase != phase or not self._outstanding:
            return False
        self._outstanding = False
        return True

    def _settled_by_error(self, code: int, message: str, now_ms: float) -> bool:
        """Apply the rule for an error answer; False if the answer is a success."""
        if code == ErrorCode.NONE:
            return False
        why = f"{code_name(code)} {message}".rstrip()
        if code in RETRIABLE_CODES:
            self._back_off(why, now_ms)
        elif code in RETRY_LATER_CODES:
            self._finish(AssignmentOutcome.RETRY, f"{self._rpc_name()}: {why}; retrying after the next heartbeat")
        else:
            self._finish(AssignmentOutcome.ABANDONED, f"{self._rpc_name()} failed: {why}; abandoning this assignment")
        return True

    def _back_off(self, why: str, now_ms: float) -> None:
        self.attempts += 1
        delay = backoff_ms(self.attempts, self.rng)
        if now_ms + delay >= self.deadline_ms:
            self._finish(AssignmentOutcome.ABANDONED, f"{self._rpc_name()}: giving up ({why})")
            return
        self._retry_at_ms = now_ms + delay
        self._retry_why = f"{self._rpc_name()}: {why}"

    def _rpc_name(self) -> str:
        return PREPARE if self.phase == Phase.PREPARE else INSTALL

    def _finish(self, outcome: AssignmentOutcome, why: str) -> Done:
        self.phase = Phase.DONE
        self._outstanding = False
        self._retry_at_ms = None
        self._done = Done(outcome, why)
        return self._done
