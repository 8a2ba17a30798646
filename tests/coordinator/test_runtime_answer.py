"""The runtime's answer to a request the machine answers at once (services/coordinator/runtime.py,
`handle`): an idle heartbeat only re-arms a timer, but an answer with effects and no records
(released at once, nothing to store) still has its effects carried out before the caller hears it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from services.coordinator.core import GroupCoordinator
from services.coordinator.handler import Nudge, Result
from services.coordinator.runtime import CoordinatorRuntime
from services.storage import Storage


def test_effects_of_an_answer_given_at_once_are_carried_out_before_it_returns(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
        storage.open()
        runtime = CoordinatorRuntime(GroupCoordinator(), storage)
        await runtime.start("127.0.0.1:1")
        try:
            stream = runtime.nudges.open("g", "m")

            def quiet(_request: Any, _now: int) -> Result:
                return Result([], "quiet")

            def nudging(_request: Any, _now: int) -> Result:
                return Result([], "nudged", [Nudge("g", ("m",), "test-reason")])

            assert await runtime.handle(quiet, None) == "quiet"
            assert stream.reason is None
            assert await runtime.handle(nudging, None) == "nudged"
            assert stream.reason == "test-reason"  # pushed already, no other request needed
        finally:
            await runtime.stop()
            storage.close()

    asyncio.run(scenario())
