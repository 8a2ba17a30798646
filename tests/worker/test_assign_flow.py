"""The client-side assignment flow (`worker_sdk._assign_flow.AssignmentFlow`), the sans-I/O machine
that the asyncio client and the simulator both drive: every answer -> the next action, the backoff's
bounds, the deadline; then the asyncio driver over a real gRPC server answering "loading" and
refusing the call."""

from __future__ import annotations

import random
from typing import Any

import grpc
import pytest

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.worker.helpers import items, response
from tests.worker.test_client_fake_server import Recorder, Scripted, _prepared, eventually, run, serve
from worker_sdk import ConnectWorkerClient
from worker_sdk._assign_flow import (
    AssignmentFlow,
    Compute,
    Done,
    SendInstall,
    SendPrepare,
    Wait,
    backoff_ms,
)
from worker_sdk._member import AssignmentOutcome, AssignmentTask

TASK = AssignmentTask(seq=3, group_id="g", member_id="m1", member_epoch=4)
RPC_TIMEOUT = 500
ABANDONING = (
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.UNKNOWN_SERVER_ERROR,
    4242,  # a code from the future
)


class Extreme(random.Random):
    """An rng whose jitter is always the low (or high) end of its range."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


def flow(deadline: int = 10_000, rng: random.Random | None = None) -> AssignmentFlow:
    return AssignmentFlow(TASK, deadline_ms=deadline, rpc_timeout_ms=RPC_TIMEOUT, rng=rng or random.Random(1))


def prepare_answer(code: int = ErrorCode.NONE, epoch: int = 9) -> coordinator_pb2.ConnectGroupPrepareAssignmentResponse:
    if code != ErrorCode.NONE:
        return coordinator_pb2.ConnectGroupPrepareAssignmentResponse(error_code=code, error_message="scripted")  # type: ignore[arg-type]
    return _prepared(epoch)


def install_answer(code: int = ErrorCode.NONE) -> coordinator_pb2.ConnectGroupInstallAssignmentResponse:
    return coordinator_pb2.ConnectGroupInstallAssignmentResponse(error_code=code, error_message="scripted")  # type: ignore[arg-type]


def assigned() -> assignor_pb2.AssignResponse:
    out = assignor_pb2.AssignResponse(assignor_state=b"s1", rebalance_delay_ms=250)
    items("a", "a-0").to_proto(out.members.add(member_id="m1", version=2).connectors_and_tasks)
    return out


def at_install(f: AssignmentFlow, now: int = 0, result: assignor_pb2.AssignResponse | None = None) -> SendInstall:
    """Drive `f` from the start to its first Install."""
    assert isinstance(f.next_action(now), SendPrepare)
    assert f.on_prepare_response(prepare_answer(), now)
    assert isinstance(f.next_action(now), Compute)
    assert f.on_computed(result or assigned(), now)
    action = f.next_action(now)
    assert isinstance(action, SendInstall)
    return action


# ---- the sequence ----------------------------------------------------------------------------------


def test_prepare_compute_install_in_order_and_nothing_while_an_answer_is_outstanding() -> None:
    f = flow()
    prepare = f.next_action(0)
    assert isinstance(prepare, SendPrepare)
    assert (prepare.request.group_id, prepare.request.member_id, prepare.request.member_epoch) == ("g", "m1", 4)
    assert prepare.timeout_ms == RPC_TIMEOUT
    assert f.next_action(100) is None, "the Prepare is outstanding"

    assert f.on_prepare_response(prepare_answer(epoch=9), 120)
    compute = f.next_action(120)
    assert isinstance(compute, Compute)
    req = compute.request
    assert (req.assignor_name, req.group_id, req.group_epoch, req.now_ms) == ("incremental-cooperative", "g", 9, 1_000)
    assert req.assignor_state == b"s0" and [m.member_id for m in req.members] == ["m1"]
    assert compute.group_epoch == 9
    assert f.next_action(130) is None, "the computation is outstanding"

    assert f.on_computed(assigned(), 150)
    install = f.next_action(150)
    assert isinstance(install, SendInstall)
    r = install.request
    assert (r.group_id, r.member_id, r.member_epoch, r.group_epoch, r.error) == ("g", "m1", 4, 9, 0)
    assert r.assignor_state == b"s1" and r.rebalance_delay_ms == 250 and len(r.members) == 1
    assert f.next_action(160) is None

    assert f.on_install_response(install_answer(), 170)
    done = f.next_action(170)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.INSTALLED
    assert f.next_action(10**9) == done, "done stays done"


def computed_from(**prepared: bool) -> assignor_pb2.AssignRequest:
    """The assignor's request made from a Prepare answer with these fields set."""
    f = flow()
    f.next_action(0)
    answer = prepare_answer(epoch=9)
    for name, value in prepared.items():
        setattr(answer, name, value)
    assert f.on_prepare_response(answer, 10)
    compute = f.next_action(10)
    assert isinstance(compute, Compute)
    return compute.request


def test_the_assignor_is_told_whether_the_coordinator_vouches_for_its_target() -> None:
    """Prepare's `current_target_checked` reaches the assignor as given (set only by the coordinator)."""
    for vouched in (True, False):
        assert computed_from(current_target_checked=vouched).current_target_checked is vouched


def test_unchanged_members_are_left_out_only_as_the_coordinator_and_the_assignor_say() -> None:
    """Prepare's `accept_unchanged_omitted` reaches the assignor; the assignor's `unchanged_omitted`
    reaches Install, which then lists only the members the assignor listed."""
    for accepted in (True, False):
        assert computed_from(accept_unchanged_omitted=accepted).accept_unchanged_omitted is accepted
    for omitted in (True, False):
        result = assigned()
        result.unchanged_omitted = omitted
        install = at_install(flow(), result=result)
        assert install.request.unchanged_omitted is omitted
        assert list(install.request.members) == list(result.members)


def test_an_assignor_error_is_installed_and_the_outcome_is_abandoned() -> None:
    f = flow()
    failed = assignor_pb2.AssignResponse(error=ErrorCode.UNSUPPORTED_ASSIGNOR, error_message="no such assignor")
    install = at_install(f, result=failed)
    assert install.request.error == ErrorCode.UNSUPPORTED_ASSIGNOR and not install.request.members
    assert f.on_install_response(install_answer(), 10)
    done = f.next_action(10)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.ABANDONED


# ---- each answer -> the next action ----------------------------------------------------------------


def answered(rpc: str, code: int | None, rng: random.Random | None = None) -> tuple[AssignmentFlow, Any]:
    """A flow whose first Prepare (or Install) got `code` at 5 ms (None: a transport error); and that request."""
    f = flow(rng=rng)
    sent: Any = f.next_action(0) if rpc == "prepare" else at_install(f)
    if code is None:
        assert f.on_transport_error(5, "UNAVAILABLE connection refused")
    elif rpc == "prepare":
        assert f.on_prepare_response(prepare_answer(code), 5)
    else:
        assert f.on_install_response(install_answer(code), 5)
    return f, sent


@pytest.mark.parametrize("code", [ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.FENCED_MEMBER_EPOCH])
@pytest.mark.parametrize("rpc", ["prepare", "install"])
def test_stale_or_fenced_epoch_means_retry_after_the_next_heartbeat(rpc: str, code: int) -> None:
    f, _ = answered(rpc, code)
    done = f.next_action(5)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.RETRY
    assert ErrorCode.Name(code) in done.why


@pytest.mark.parametrize("code", ABANDONING)
@pytest.mark.parametrize("rpc", ["prepare", "install"])
def test_any_other_error_abandons(rpc: str, code: int) -> None:
    f, _ = answered(rpc, code)
    done = f.next_action(5)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.ABANDONED
    assert f.attempts == 0, "no retry"


@pytest.mark.parametrize("code", [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None])
@pytest.mark.parametrize("rpc", ["prepare", "install"])
def test_not_available_loading_and_transport_errors_send_the_same_request_again_after_a_backoff(
    rpc: str, code: int | None
) -> None:
    f, first = answered(rpc, code, rng=Extreme(high=False))
    wait = f.next_action(5)
    assert isinstance(wait, Wait) and wait.until_ms == 5 + 80, wait  # 100 ms less 20 %
    assert f.next_action(84) == wait, "still backing off"
    again = f.next_action(85)
    assert isinstance(again, SendPrepare | SendInstall) and type(again) is type(first)
    assert again.request == first.request and again.timeout_ms == RPC_TIMEOUT


def test_a_transport_error_that_is_not_retriable_abandons() -> None:
    f = flow()
    f.next_action(0)
    assert f.on_transport_error(5, "INTERNAL boom", retriable=False)
    done = f.next_action(5)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.ABANDONED and "INTERNAL boom" in done.why


def test_reports_that_answer_nothing_outstanding_are_ignored() -> None:
    f = flow()
    assert not f.on_prepare_response(prepare_answer(), 0), "nothing sent yet"
    assert not f.on_transport_error(0, "timeout")
    f.next_action(0)
    assert not f.on_install_response(install_answer(), 1), "the Prepare is outstanding, not an Install"
    assert not f.on_computed(assigned(), 1)
    assert f.on_prepare_response(prepare_answer(), 2)
    assert not f.on_prepare_response(prepare_answer(ErrorCode.UNKNOWN_MEMBER_ID), 3), "a duplicate answer"
    assert not f.on_transport_error(3, "a late timeout of the answered Prepare")
    assert isinstance(f.next_action(3), Compute)
    f.on_computed(assigned(), 4)
    f.next_action(4)
    assert f.on_install_response(install_answer(), 5)
    assert not f.on_install_response(install_answer(ErrorCode.UNKNOWN_MEMBER_ID), 6)
    assert not f.on_transport_error(6, "timeout")
    done = f.next_action(6)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.INSTALLED


# ---- backoff and deadline --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("high", "expected"), [(False, [80, 160, 320, 640, 800, 800]), (True, [120, 240, 480, 960, 1200, 1200])]
)
def test_backoff_doubles_from_100_ms_to_1_s_with_20_percent_jitter_across_prepare_and_install(
    high: bool, expected: list[int]
) -> None:
    f = flow(deadline=10**9, rng=Extreme(high))
    now, delays = 0, []
    f.next_action(now)
    for i in range(6):
        if i == 3:  # the attempt count goes on from Prepare to Install
            assert f.on_prepare_response(prepare_answer(), now)
            f.next_action(now)
            f.on_computed(assigned(), now)
            assert isinstance(f.next_action(now), SendInstall)
        assert f.on_transport_error(now, "DEADLINE_EXCEEDED")
        wait = f.next_action(now)
        assert isinstance(wait, Wait)
        delays.append(int(wait.until_ms) - now)
        now = int(wait.until_ms)
        assert isinstance(f.next_action(now), SendPrepare if i < 3 else SendInstall)
    assert delays == expected


def test_backoff_stays_within_its_bounds_for_any_seed() -> None:
    for seed in range(50):
        rng = random.Random(seed)
        for attempt in range(1, 12):
            nominal = min(100 * 2 ** (attempt - 1), 1_000)
            assert round(nominal * 0.8) <= backoff_ms(attempt, rng) <= round(nominal * 1.2)


def test_a_retry_that_would_start_at_or_after_the_deadline_abandons() -> None:
    f = flow(deadline=1_000, rng=Extreme(high=True))
    f.next_action(0)
    assert f.on_transport_error(879, "UNAVAILABLE")  # 879 + 120 < 1000: one more try
    wait = f.next_action(879)
    assert isinstance(wait, Wait) and wait.until_ms == 999
    assert isinstance(f.next_action(999), SendPrepare)
    assert f.on_prepare_response(prepare_answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), 999)  # 999 + 240 >= 1000
    done = f.next_action(999)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.ABANDONED and "giving up" in done.why


def test_no_request_waits_beyond_or_starts_after_the_deadline() -> None:
    f = flow(deadline=1_000)
    prepare = f.next_action(800)
    assert isinstance(prepare, SendPrepare) and prepare.timeout_ms == 200, "timeout: min(rpc timeout, time left)"
    assert f.on_prepare_response(prepare_answer(), 900)
    assert isinstance(f.next_action(900), Compute)
    assert f.on_computed(assigned(), 1_000), "the assignor took until the deadline"
    done = f.next_action(1_000)
    assert isinstance(done, Done) and done.outcome == AssignmentOutcome.ABANDONED and "deadline" in done.why


def test_the_same_rng_seed_gives_the_same_actions() -> None:
    def actions(seed: int) -> list[object]:
        f = flow(deadline=5_000, rng=random.Random(seed))
        out: list[object] = []
        now = 0
        while not isinstance(action := f.next_action(now), Done):
            out.append(action)
            if isinstance(action, Wait):
                now = int(action.until_ms)
            else:
                f.on_transport_error(now, "UNAVAILABLE")
        out.append(action)
        return out

    assert actions(7) == actions(7)
    assert actions(7) != actions(8)


# ---- the asyncio driver ----------------------------------------------------------------------------


class Flaky(Scripted):
    """Refuses the first Prepare at the transport level (UNAVAILABLE), then answers from the script."""

    refused = False

    async def ConnectGroupPrepareAssignment(self, request: Any, context: Any) -> Any:
        if not self.refused:
            self.refused = True
            self.prepares.append(request)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted transport failure")
        return await super().ConnectGroupPrepareAssignment(request, context)


def test_the_client_retries_a_refused_prepare_and_a_loading_coordinator_then_installs() -> None:
    async def body() -> None:
        s = Flaky([response(interval=100, session=3_000, code=ErrorCode.COMPUTE_ASSIGNMENT)])
        s.prepare_replies = [prepare_answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), _prepared(6)]
        s.install_replies = [install_answer(ErrorCode.COORDINATOR_NOT_AVAILABLE), install_answer()]
        server, address = await serve(s)
        client = ConnectWorkerClient(address, "g", Recorder(), rng=random.Random(1), metrics=False)
        await client.start()
        await eventually(lambda: len(s.installs) == 2, "the second install")
        assert [p.member_epoch for p in s.prepares] == [1, 1, 1], "the same Prepare, three times"
        assert s.installs[0] == s.installs[1] and s.installs[1].group_epoch == 6
        await client.close()
        await server.stop(None)

    run(body)
