"""The asyncio driver against a scripted gRPC server: answers a real coordinator never gives (unknown
error codes, malformed assignments, transport errors), client-side assignment outcomes, callback
exceptions, fatal errors and leaving -- over a real grpc.aio channel on loopback."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2, coordinator_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from tests.worker.helpers import error, items, response
from worker_sdk import CallbackError, ConnectWorkerClient, FatalError, MemberState, WorkerMetrics

pytestmark = pytest.mark.timeout(30)

Reply = (
    coordinator_pb2.ConnectGroupHeartbeatResponse
    | grpc.StatusCode
    | Callable[[coordinator_pb2.ConnectGroupHeartbeatRequest], coordinator_pb2.ConnectGroupHeartbeatResponse]
)


class Scripted(coordinator_pb2_grpc.ConnectGroupCoordinatorServicer):
    """Answers heartbeats from a script (then with `steady`); records every request."""

    def __init__(self, script: list[Reply], steady: Reply | None = None) -> None:
        self.script = list(script)
        self.steady = steady or response(interval=100, session=3_000)
        self.heartbeats: list[coordinator_pb2.ConnectGroupHeartbeatRequest] = []
        self.prepares: list[Any] = []
        self.installs: list[coordinator_pb2.ConnectGroupInstallAssignmentRequest] = []
        self.prepare_replies: list[coordinator_pb2.ConnectGroupPrepareAssignmentResponse] = []
        self.install_replies: list[coordinator_pb2.ConnectGroupInstallAssignmentResponse] = []

    async def ConnectGroupHeartbeat(self, request: Any, context: Any) -> Any:
        self.heartbeats.append(request)
        reply = self.script.pop(0) if self.script else self.steady
        if isinstance(reply, grpc.StatusCode):
            await context.abort(reply, "scripted transport failure")
        if callable(reply):
            return reply(request)
        return reply

    async def ConnectGroupPrepareAssignment(self, request: Any, context: Any) -> Any:
        self.prepares.append(request)
        return self.prepare_replies.pop(0)

    async def ConnectGroupInstallAssignment(self, request: Any, context: Any) -> Any:
        self.installs.append(request)
        return (
            self.install_replies.pop(0)
            if self.install_replies
            else coordinator_pb2.ConnectGroupInstallAssignmentResponse()
        )


class Recorder:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple[str, Items]] = []
        self.fail_on = fail_on

    async def _record(self, name: str, its: Items) -> None:
        self.calls.append((name, its))
        if name == self.fail_on:
            raise RuntimeError(f"{name} failed on purpose")

    async def on_assigned(self, its: Items) -> None:
        await self._record("assigned", its)

    async def on_revoked(self, its: Items) -> None:
        await self._record("revoked", its)

    async def on_lost(self, its: Items) -> None:
        await self._record("lost", its)


async def serve(servicer: Scripted) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    coordinator_pb2_grpc.add_ConnectGroupCoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def eventually(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 25))


def is_full(req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> bool:
    return all(req.HasField(f) for f in ("rebalance_timeout_ms", "client_assignors", "owned"))


def test_not_understood_answers_and_transport_errors_are_survived() -> None:
    async def body() -> None:
        s = Scripted(
            [
                error(4242, "a code from the future"),
                response(assigned=items("a"), pending=items("a")),  # malformed: both
                grpc.StatusCode.UNAVAILABLE,
                error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                grpc.StatusCode.INTERNAL,
                response(interval=100, session=3_000, assigned=items("a", "a-0")),
            ]
        )
        server, address = await serve(s)
        listener = Recorder()
        client = ConnectWorkerClient(address, "g", listener, rng=random.Random(1), metrics=False)
        await client.start()
        await eventually(lambda: client.running == items("a", "a-0"), "the work to start")
        assert listener.calls == [("assigned", items("a", "a-0"))]
        assert all(is_full(r) for r in s.heartbeats[:6]), "every retry after an error is a full request"
        assert all(r.member_epoch == 0 and r.member_id == "" for r in s.heartbeats[:6])
        await client.close()
        assert s.heartbeats[-1].member_epoch == -1 and s.heartbeats[-1].member_id == "m1"
        assert listener.calls[-1] == ("revoked", items("a", "a-0"))
        await server.stop(None)

    run(body)


def test_heartbeat_deadline_is_a_failure_and_the_next_request_is_full() -> None:
    async def body() -> None:
        class Slow(Scripted):
            async def ConnectGroupHeartbeat(self, request: Any, context: Any) -> Any:
                self.heartbeats.append(request)
                if len(self.heartbeats) == 2:
                    await asyncio.sleep(1.0)  # longer than the request timeout
                return response(interval=100, session=3_000)

        s = Slow([])
        server, address = await serve(s)
        client = ConnectWorkerClient(address, "g", Recorder(), request_timeout_ms=300, metrics=False)
        await client.start()
        await eventually(lambda: len(s.heartbeats) >= 3, "a retry")
        assert not is_full(s.heartbeats[1]) and is_full(s.heartbeats[2])
        await client.close()
        await server.stop(None)

    run(body)


def test_callback_exceptions_are_surfaced_and_the_effect_counts_as_done() -> None:
    async def body() -> None:
        s = Scripted(
            [
                response(interval=100, session=3_000, assigned=items("a", "b")),
                response(interval=100, session=3_000, assigned=items("a")),
            ]
        )
        server, address = await serve(s)
        errors: list[CallbackError] = []
        listener = Recorder(fail_on="assigned")
        metrics = WorkerMetrics()
        client = ConnectWorkerClient(
            address, "g", listener, metrics=metrics, on_callback_error=errors.append, rng=random.Random(2)
        )
        await client.start()
        # on_assigned raised, yet the items count as running and the revocation that follows proceeds.
        await eventually(lambda: ("revoked", items("b")) in listener.calls, "the revocation")
        await eventually(lambda: client.running == items("a"), "the acknowledgement")
        assert len(errors) == 1 and errors[0].callback == "assigned"
        assert isinstance(errors[0].__cause__, RuntimeError)
        assert client.last_callback_error is errors[0]
        await eventually(
            lambda: any(r.HasField("owned") and Items.from_proto(r.owned) == items("a") for r in s.heartbeats),
            "the revocation acknowledged with owned = what still runs",
        )
        assert metrics.registry.get_sample_value("connect_worker_callback_errors_total", {"callback": "assigned"}) == 1
        await client.close()
        await server.stop(None)

    run(body)


def test_fatal_error_stops_the_work_and_ends_run() -> None:
    async def body() -> None:
        s = Scripted(
            [
                response(interval=100, session=3_000, assigned=items("a")),
                error(ErrorCode.FENCED_INSTANCE_ID, "someone else is i1 now"),
            ],
            steady=response(interval=100, session=3_000),
        )
        server, address = await serve(s)
        listener = Recorder()
        client = ConnectWorkerClient(address, "g", listener, instance_id="i1", metrics=False)
        with pytest.raises(FatalError) as err:
            await client.run()
        assert err.value.code == ErrorCode.FENCED_INSTANCE_ID
        assert listener.calls == [("assigned", items("a")), ("lost", items("a"))]
        assert client.state == MemberState.FATAL and client.running == Items()
        await server.stop(None)

    run(body)


def test_fenced_loses_the_work_then_rejoins_with_the_same_member_id() -> None:
    async def body() -> None:
        s = Scripted(
            [
                response("m7", 3, interval=100, session=3_000, assigned=items("a", "a-0")),
                response("m7", 3, interval=100, session=3_000),
                error(ErrorCode.FENCED_MEMBER_EPOCH),
            ],
            steady=response("m7", 5, interval=100, session=3_000, assigned=items("a")),
        )
        server, address = await serve(s)
        listener = Recorder()
        client = ConnectWorkerClient(address, "g", listener, metrics=False)
        await client.start()
        await eventually(lambda: ("lost", items("a", "a-0")) in listener.calls, "the loss")
        await eventually(lambda: client.running == items("a") and client.member_epoch == 5, "the rejoin")
        lost_at = listener.calls.index(("lost", items("a", "a-0")))
        rejoin = next(r for r in s.heartbeats[3:] if r.member_epoch == 0)
        assert rejoin.member_id == "m7" and Items.from_proto(rejoin.owned) == Items()
        assert listener.calls[lost_at + 1] == ("assigned", items("a"))
        await client.close()
        await server.stop(None)

    run(body)


def _prepared(epoch: int) -> coordinator_pb2.ConnectGroupPrepareAssignmentResponse:
    p = coordinator_pb2.ConnectGroupPrepareAssignmentResponse(
        group_epoch=epoch, assignor_name="incremental-cooperative", now_ms=1_000, assignor_state=b"s0"
    )
    p.members.add(member_id="m1", member_epoch=1)
    p.connectors.add(name="a", task_count=2)
    p.group_configs["scheduled.rebalance.max.delay.ms"] = "0"
    return p


def test_compute_assignment_prepares_runs_the_local_assignor_and_installs() -> None:
    async def body() -> None:
        s = Scripted([response(interval=100, session=3_000, code=ErrorCode.COMPUTE_ASSIGNMENT)])
        s.prepare_replies = [_prepared(7)]
        seen: list[assignor_pb2.AssignRequest] = []

        def assign_fn(req: assignor_pb2.AssignRequest) -> assignor_pb2.AssignResponse:
            seen.append(req)
            out = assignor_pb2.AssignResponse(assignor_state=b"s1", rebalance_delay_ms=250)
            items("a", "a-0", "a-1").to_proto(out.members.add(member_id="m1", version=2).connectors_and_tasks)
            return out

        server, address = await serve(s)
        client = ConnectWorkerClient(address, "g", Recorder(), assign_fn=assign_fn, metrics=False)
        await client.start()
        await eventually(lambda: bool(s.installs), "the install")
        req = seen[0]
        assert (req.assignor_name, req.group_id, req.group_epoch, req.now_ms) == (
            "incremental-cooperative",
            "g",
            7,
            1_000,
        )
        assert req.assignor_state == b"s0" and req.group_configs["scheduled.rebalance.max.delay.ms"] == "0"
        install = s.installs[0]
        assert (install.member_id, install.member_epoch, install.group_epoch, install.error) == ("m1", 1, 7, 0)
        assert install.assignor_state == b"s1" and install.rebalance_delay_ms == 250
        assert Items.from_proto(install.members[0].connectors_and_tasks) == items("a", "a-0", "a-1")
        await client.close()
        await server.stop(None)

    run(body)


def test_a_failing_assignor_installs_an_error() -> None:
    async def body() -> None:
        s = Scripted([response(interval=100, session=3_000, code=ErrorCode.COMPUTE_ASSIGNMENT)])
        s.prepare_replies = [_prepared(4)]

        def assign_fn(req: assignor_pb2.AssignRequest) -> assignor_pb2.AssignResponse:
            raise ZeroDivisionError("assignor bug")

        server, address = await serve(s)
        client = ConnectWorkerClient(address, "g", Recorder(), assign_fn=assign_fn, metrics=False)
        await client.start()
        await eventually(lambda: bool(s.installs), "the install")
        assert s.installs[0].error != 0 and s.installs[0].group_epoch == 4 and not s.installs[0].members
        await client.close()
        await server.stop(None)

    run(body)


def test_stale_epoch_on_prepare_is_retried_after_the_next_heartbeat() -> None:
    async def body() -> None:
        s = Scripted(
            [
                response("m1", 1, interval=100, session=3_000, code=ErrorCode.COMPUTE_ASSIGNMENT),
                response("m1", 2, interval=100, session=3_000),
            ],
            steady=response("m1", 2, interval=100, session=3_000),
        )
        s.prepare_replies = [
            coordinator_pb2.ConnectGroupPrepareAssignmentResponse(error_code=ErrorCode.STALE_MEMBER_EPOCH),
            _prepared(5),
        ]
        server, address = await serve(s)
        client = ConnectWorkerClient(address, "g", Recorder(), metrics=False)
        await client.start()
        await eventually(lambda: bool(s.installs), "the install")
        assert [p.member_epoch for p in s.prepares] == [1, 2]
        assert s.installs[0].member_epoch == 2
        await client.close()
        await server.stop(None)

    run(body)


def test_static_restart_leaves_with_minus_two() -> None:
    async def body() -> None:
        s = Scripted([response(interval=100, session=3_000, assigned=items("a"))])
        server, address = await serve(s)
        listener = Recorder()
        client = ConnectWorkerClient(address, "g", listener, instance_id="i1", metrics=False)
        await client.start()
        await eventually(lambda: client.running == items("a"), "the work")
        await client.restart_leave()
        last = s.heartbeats[-1]
        assert (last.member_id, last.member_epoch, last.instance_id) == ("m1", -2, "i1")
        assert listener.calls == [("assigned", items("a")), ("revoked", items("a"))]
        assert client.state == MemberState.UNSUBSCRIBED
        await server.stop(None)

    run(body)
