"""The runtime's answer to a request the machine answers at once (services/coordinator/runtime/asyncio_runtime.py,
`handle`): an idle heartbeat only re-arms a timer, but an answer with effects and no records
(released at once, nothing to store) still has its effects carried out before the caller hears it.
And the steady heartbeat's lane (`answer_at_once`, outside `handle`): it declines while a change is
being stored, and a bug in it is handled as in `handle`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.coordinator import GroupCoordinator
from services.coordinator.core.handler import Nudge, Result
from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime
from services.coordinator.runtime.server import CoordinatorServicer
from services.storage import Storage


@contextlib.asynccontextmanager
async def started(tmp_path: Path) -> AsyncIterator[CoordinatorRuntime]:
    """A runtime over a fresh SQLite database, started (no server), stopped afterwards."""
    storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
    storage.open()
    runtime = CoordinatorRuntime(GroupCoordinator(), storage)
    await runtime.start("127.0.0.1:1")
    try:
        yield runtime
    finally:
        await runtime.stop()
        storage.close()


def test_effects_of_an_answer_given_at_once_are_carried_out_before_it_returns(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with started(tmp_path) as runtime:
            stream = runtime.nudges.open("g", "m")

            def quiet(_request: Any, _now: int) -> Result:
                return Result([], "quiet")

            def nudging(_request: Any, _now: int) -> Result:
                return Result([], "nudged", [Nudge("g", ("m",), "test-reason")])

            assert await runtime.handle(quiet, None) == "quiet"
            assert stream.reason is None
            assert await runtime.handle(nudging, None) == "nudged"
            assert stream.reason == "test-reason"  # pushed already, no other request needed

    asyncio.run(scenario())


def test_the_hot_path_answers_only_while_nothing_is_being_stored(tmp_path: Path) -> None:
    """`answer_at_once` (the steady heartbeat's lane) must not overtake records it could have seen:
    with a change still waiting to be stored it declines, and the caller takes `handle`."""

    async def scenario() -> None:
        async with started(tmp_path) as runtime:
            request = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=1)
            assert runtime.answer_at_once(lambda _r, _now: "steady", request) == "steady"
            put = admin_pb2.PutConnectorRequest(group_id="g", connector="A", task_count=1)
            ticket = runtime.machine.submit(runtime.coordinator.put_connector, put, runtime.clock())
            assert not ticket.answered  # its record is not stored yet
            assert runtime.answer_at_once(lambda _r, _now: "steady", request) is None
            await runtime.barrier()  # stored
            assert runtime.answer_at_once(lambda _r, _now: "steady", request) == "steady"

    asyncio.run(scenario())


def test_a_bug_in_the_hot_path_reloads_the_state_and_answers_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The steady heartbeat's lane runs outside `handle`, so its handler failing must still do what
    `handle` does: answer UNKNOWN_SERVER_ERROR, log it, and reload the state before serving again."""

    async def scenario() -> None:
        async with started(tmp_path) as runtime:
            servicer = CoordinatorServicer(runtime)
            await runtime.handle(
                runtime.coordinator.put_connector,
                admin_pb2.PutConnectorRequest(group_id="g", connector="A", task_count=1),
            )

            def broken(_self: Any, _request: Any, _now: int) -> Any:
                raise RuntimeError("boom")

            request = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=1)
            with monkeypatch.context() as patch:
                patch.setattr(GroupCoordinator, "steady_heartbeat", broken)
                response = await servicer.ConnectGroupHeartbeat(request, None)
            assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR, response
            assert "reloaded its state" in response.error_message
            assert any("a handler failed" in r.getMessage() and r.exc_info for r in caplog.records)
            assert runtime.machine.loaded  # reloaded from storage, serving again
            assert "A" in runtime.coordinator.state.groups["g"].connectors
            # The same request on the (now working) lane: an unknown member, answered as such.
            response = await servicer.ConnectGroupHeartbeat(request, None)
            assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID, response

    asyncio.run(scenario())


def test_a_nudged_members_next_heartbeat_measures_the_nudge_on_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`connect_coordinator_nudge_to_heartbeat_seconds`: the member's next heartbeat after a nudge
    went out is measured once, whether the steady lane or the full path answers it."""

    async def scenario() -> None:
        async with started(tmp_path) as runtime:
            servicer = CoordinatorServicer(runtime)

            def measured() -> float | None:
                return runtime.metrics.registry.get_sample_value("connect_coordinator_nudge_to_heartbeat_seconds_count")

            request = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=1)
            other = coordinator_pb2.ConnectGroupHeartbeatRequest(group_id="g", member_id="x", member_epoch=1)
            runtime.nudges.sent(("g", "m"))
            await servicer.ConnectGroupHeartbeat(other, None)  # another member's: not this nudge
            assert measured() == 0
            response = await servicer.ConnectGroupHeartbeat(request, None)  # the full path (unknown member)
            assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            assert measured() == 1
            await servicer.ConnectGroupHeartbeat(request, None)
            assert measured() == 1  # once per nudge

            def steady(_self: Any, _request: Any, _now: int) -> Any:
                return coordinator_pb2.ConnectGroupHeartbeatResponse(member_id="m", member_epoch=1)

            with monkeypatch.context() as patch:
                patch.setattr(GroupCoordinator, "steady_heartbeat", steady)
                runtime.nudges.sent(("g", "m"))
                response = await servicer.ConnectGroupHeartbeat(request, None)  # the lane
            assert response.error_code == ErrorCode.NONE and response.member_epoch == 1
            assert measured() == 2

    asyncio.run(scenario())
