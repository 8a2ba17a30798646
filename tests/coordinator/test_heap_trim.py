"""Freed heap memory goes back to the OS once a burst of work calms down (services.common.memory)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common import memory
from services.common.memory import HeapTrimmer


def test_this_platform_can_trim() -> None:
    # The images and the machines this runs on use glibc: trimming must really happen there.
    assert memory.trim_heap() is True


def test_asks_during_a_burst_share_a_trim_the_last_is_covered_and_an_idle_process_never_trims() -> None:
    timers: list[tuple[float, Callable[[], None]]] = []
    trimmer = HeapTrimmer(lambda delay_s, fn: timers.append((delay_s, fn)), delay_s=1.0)
    assert timers == [] and trimmer.trims == 0  # nothing happened: nothing scheduled
    trimmer.after_work()
    assert [d for d, _ in timers] == [1.0]
    timers.pop()[1]()
    assert trimmer.trims == 1 and trimmer.trim_seconds > 0
    assert timers == []  # nothing since: no second trim

    for _ in range(1000):  # a burst: one trim pending at a time
        trimmer.after_work()
    assert len(timers) == 1
    timers.pop()[1]()
    # Work came after that trim was scheduled, so what it freed may postdate it: one more follows.
    assert trimmer.trims == 2 and [d for d, _ in timers] == [1.0]
    timers.pop()[1]()
    assert trimmer.trims == 3 and timers == []  # then quiet: an idle process never trims


def test_on_an_event_loop_the_trim_runs_after_the_delay() -> None:
    async def run() -> int:
        loop = asyncio.get_running_loop()
        trimmer = HeapTrimmer(loop.call_later, delay_s=0.05)
        trimmer.after_work()
        assert trimmer.trims == 0  # not at once: the burst may go on
        await asyncio.sleep(0.3)
        return trimmer.trims

    assert asyncio.run(run()) == 1
