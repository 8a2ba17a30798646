"""The load watch's `load_sampled` events (SPEC §13, issue 37 "Visible"): the ratio over time in the
event log for the analytics job -- logged by the watch's timer when a sample is the watch's first,
moved by more than the report threshold or crossed the goal; never by a heartbeat, never for a group
without loads, and not on every sample while the ratio holds still."""

from __future__ import annotations

from typing import Any

from services.common.items import TaskId
from services.coordinator.core import loads
from services.coordinator.core.state import LoadWatch
from tests.coordinator.test_load_trigger import COOLDOWN, World, skewed_world


def samples(w: World) -> list[dict[str, Any]]:
    return [e.details for e in w.ctx.events("load_sampled")]


def test_a_skewed_group_logs_its_ratio_then_the_crossing_of_the_goal_and_stays_quiet_after() -> None:
    w, _ = skewed_world()
    w.run(2_000 + COOLDOWN // 4)  # every worker reports; the watch's first sample is logged
    first = samples(w)
    assert len(first) == 1
    assert first[0]["load_ratio"] == round(loads.load_ratio(loads.group_loads(w.ctx.group())), 4) > 2
    assert first[0]["goal"] == 1.1 and first[0]["members"] == 3 and first[0]["members_with_load"] == 3
    w.run(10 * COOLDOWN)
    assert w.ratio_ok() and w.bumps()
    logged = samples(w)
    assert logged[-1]["load_ratio"] <= 1.1  # the crossing back under the goal is in the log
    # Bounded: far fewer than one per sample (every cooldown / 4 over ten cooldowns and more).
    assert len(logged) < 10
    quiet = len(logged)
    w.run(3 * COOLDOWN)  # fixed loads, converged: nothing more to log
    assert len(samples(w)) == quiet


def test_heartbeats_alone_never_log_a_sample() -> None:
    w, _ = skewed_world()
    before = len(samples(w))
    # Heartbeats with a load report, no time passing for the watch's timer.
    for mid in sorted(w.ctx.group().members):
        w.beat(mid)
    assert len(samples(w)) == before == 0
    w.ctx.sleep(COOLDOWN // 4)  # the watch's timer: now it logs
    assert len(samples(w)) == 1


def test_a_group_without_loads_never_logs_a_sample() -> None:
    w, _ = skewed_world()
    w.run(2 * COOLDOWN, report=False)
    assert samples(w) == []


def test_a_load_change_beyond_the_threshold_is_logged_a_small_one_is_not() -> None:
    w, _ = skewed_world()
    w.task_load = {TaskId("c", i): 1.0 for i in range(9)}  # balanced: 3 tasks of 1 each
    w.run(COOLDOWN)
    assert len(samples(w)) == 1 and samples(w)[0]["load_ratio"] == 1.0
    w.task_load[TaskId("c", 0)] = 1.05  # a ratio move under the 10 % threshold (workers do not even report it)
    w.run(COOLDOWN)
    assert len(samples(w)) == 1
    w.task_load[TaskId("c", 0)] = 4.0  # (4 + 2) / 14 * 3 = 1.29: beyond the threshold and the goal
    w.run(COOLDOWN // 2)
    assert len(samples(w)) == 2 and samples(w)[1]["load_ratio"] > 1.1


def test_sample_logged_rules() -> None:
    watch = LoadWatch(ratio=1.5)
    assert loads.sample_logged(watch, True, 0.1)  # the first
    watch.ratio = 1.6
    assert not loads.sample_logged(watch, True, 0.1)  # 6.7 % moved
    watch.ratio = 1.7
    assert loads.sample_logged(watch, True, 0.1)  # 13 % from the last logged (1.5)
    watch.ratio = 1.69
    assert loads.sample_logged(watch, False, 0.1)  # the goal crossed (the assignor's rule says met)
    assert watch.logged_ratio == 1.69 and watch.logged_missed is False
