"""What a large group holds once rather than per member (issue 13, memory): equal assignor lists are
one object, whether they came from a heartbeat or from SQL; the timer heap does not grow with the
number of heartbeats, only with the number of timers."""

from __future__ import annotations

from services.coordinator.core import records
from services.coordinator.core.records import AssignorSpec, shared_assignors
from services.coordinator.core.timers import Timer, TimerKey, TimerKind
from services.storage.codec import assignors_from_json, assignors_to_json
from tests.coordinator.harness import Context


def test_members_advertising_the_same_assignors_share_one_list_also_after_a_load() -> None:
    ctx = Context()
    a = ctx.join().member_id
    b = ctx.join().member_id
    group = ctx.group()
    first, second = group.members[a].meta.assignors, group.members[b].meta.assignors
    assert first and first == second
    assert first is second  # one object for the group, not one per member
    loaded = assignors_from_json(assignors_to_json(first))
    assert loaded == first and loaded is first


def test_different_lists_stay_different_and_the_table_is_bounded() -> None:
    one = (AssignorSpec("seen-first-here", 1, 2, version=2),)
    other = (AssignorSpec("seen-first-here", 1, 2, version=1),)
    assert shared_assignors(one) is one
    assert shared_assignors((AssignorSpec("seen-first-here", 1, 2, version=2),)) is one
    assert shared_assignors(other) is other and shared_assignors(other) != one
    # Clients choose these lists: many distinct ones must not grow the table without bound.
    for n in range(records._SHARED_ASSIGNOR_LISTS_MAX * 3):
        spec = (AssignorSpec(f"a{n}", 0, n),)
        assert shared_assignors(spec) == spec
        assert len(records._SHARED_ASSIGNOR_LISTS) <= records._SHARED_ASSIGNOR_LISTS_MAX


def test_rescheduling_keeps_the_heap_within_twice_the_timers_and_fires_only_the_last_deadline() -> None:
    timer = Timer()
    keys = [TimerKey(TimerKind.SESSION, "g", f"m{i}") for i in range(3_000)]
    for beat in range(20):  # every member heartbeats 20 times: each moves its session deadline
        for i, key in enumerate(keys):
            timer.schedule(key, 1_000 * beat + i)
        assert len(timer._heap) <= 2 * len(keys) + 1024
    assert len(timer) == len(keys)
    assert timer.pop_expired(18_999) == []  # only stale deadlines are that early
    fired = timer.pop_expired(19_000 + len(keys))
    assert fired == keys  # each once, at its last deadline, in deadline order
    assert len(timer) == 0 and timer.next_deadline() is None
