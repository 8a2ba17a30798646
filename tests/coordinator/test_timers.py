"""The timer heap (services/coordinator/core/timers.py) against a plain model: a dict of each key's
deadline and the order it was scheduled in. Rescheduling later pushes nothing (the key's anchor
stands for it), so the heap's answers must still be exactly the model's; and the earliest deadline
moves earlier only when `Timer.moved_earlier` counts, which the runtime relies on to skip looking."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.coordinator.core.timers import Timer, TimerKey, TimerKind

KEYS = [TimerKey(TimerKind.SESSION, g, m) for g in ("g1", "g2") for m in ("a", "b", "c", "")]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.sampled_from(KEYS), st.integers(-20, 60)),
        st.tuples(st.just("cancel"), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("cancel_group"), st.sampled_from(["g1", "g2"]), st.just(0)),
        st.tuples(st.just("next"), st.just(None), st.just(0)),
        st.tuples(st.just("pop"), st.just(None), st.integers(-20, 60)),
    ),
    max_size=80,
)


class Model:
    def __init__(self) -> None:
        self.deadlines: dict[TimerKey, tuple[int, int]] = {}
        self.seq = 0

    def schedule(self, key: TimerKey, deadline: int) -> None:
        if key in self.deadlines and self.deadlines[key][0] == deadline:
            return
        self.seq += 1
        self.deadlines[key] = (deadline, self.seq)

    def next_deadline(self) -> int | None:
        return min(self.deadlines.values())[0] if self.deadlines else None

    def pop_expired(self, now: int) -> list[TimerKey]:
        due = sorted((v, k) for k, v in self.deadlines.items() if v[0] <= now)
        for _, k in due:
            del self.deadlines[k]
        return [k for _, k in due]


@settings(max_examples=600, deadline=None)
@given(ops)
def test_the_heap_answers_as_the_model(script: list[tuple[str, object, int]]) -> None:
    timer, model = Timer(), Model()
    # `moved_earlier` promises: while it stays the same, the earliest deadline never moves earlier
    # (the runtime then skips looking for it). Checked after every step against the model's.
    seen_moved, seen_earliest = timer.moved_earlier, model.next_deadline()
    for op, arg, n in script:
        if op == "schedule":
            assert isinstance(arg, TimerKey)
            timer.schedule(arg, n)
            model.schedule(arg, n)
        elif op == "cancel":
            assert isinstance(arg, TimerKey)
            timer.cancel(arg)
            model.deadlines.pop(arg, None)
        elif op == "cancel_group":
            timer.cancel_group(str(arg))
            model.deadlines = {k: v for k, v in model.deadlines.items() if k.group_id != arg}
        elif op == "next":
            assert timer.next_deadline() == model.next_deadline()
        else:
            assert timer.pop_expired(n) == model.pop_expired(n)
        earliest = model.next_deadline()
        if timer.moved_earlier == seen_moved and seen_earliest is not None:
            assert earliest is None or earliest >= seen_earliest, (op, arg, n)
        seen_moved, seen_earliest = timer.moved_earlier, earliest
        assert len(timer) == len(model.deadlines)
        assert all(timer.deadline(k) == (model.deadlines[k][0] if k in model.deadlines else None) for k in KEYS)
        # The per-group index (what cancel_group walks) holds exactly each group's scheduled keys.
        by_group: dict[str, set[TimerKey]] = {}
        for k in model.deadlines:
            by_group.setdefault(k.group_id, set()).add(k)
        assert {g: set(keys) for g, keys in timer._by_group.items()} == by_group
    assert timer.pop_expired(10**9) == model.pop_expired(10**9)
    assert timer.next_deadline() is None


def test_a_heartbeat_that_moves_its_session_later_pushes_nothing() -> None:
    timer = Timer()
    keys = [TimerKey(TimerKind.SESSION, "g", f"m{i}") for i in range(100)]
    for i, key in enumerate(keys):
        timer.schedule(key, 1_000 + i)
    moved = timer.moved_earlier
    for beat in range(1, 50):
        for i, key in enumerate(keys):
            timer.schedule(key, 1_000 * beat + i)
    assert len(timer._heap) == len(keys)  # one entry per key: the anchors
    assert timer.moved_earlier == moved  # nothing for the runtime's timer check to look at
    assert timer.next_deadline() == 49_000  # the anchors moved up to the last deadlines
    assert timer.pop_expired(49_050) == keys[:51]


def test_cancelling_a_group_touches_only_that_groups_timers() -> None:
    """Reloading N groups one by one (each reload cancels its group's timers) costs O(N): counted as
    the keys `cancel_group` looks at, which must not grow with the number of other groups."""

    class CountingDict(dict[TimerKey, int]):
        looked = 0

        def __iter__(self):
            for k in super().__iter__():
                CountingDict.looked += 1
                yield k

    timer = Timer()
    timer._deadlines = CountingDict()
    for g in range(2_000):
        timer.schedule(TimerKey(TimerKind.SESSION, f"g{g}", "m"), 10_000 + g)
        timer.schedule(TimerKey(TimerKind.RETENTION, f"g{g}"), 20_000 + g)
    for g in range(2_000):
        timer.cancel_group(f"g{g}")
    assert CountingDict.looked == 0  # nothing scanned: the index names each group's keys
    assert len(timer) == 0 and timer.next_deadline() is None


def test_deadlines_of_the_wall_clock_keep_their_order_and_value() -> None:
    """A deadline and its schedule's sequence number are held as one int (the stamp): deadlines of
    a real clock (ms since 1970) come back as they were set, and keys due together fire in the order
    they were scheduled, not by key."""
    timer = Timer()
    now = 1_764_300_000_000
    keys = [TimerKey(TimerKind.SESSION, "g", m) for m in ("z", "a", "m")]
    for key in keys:
        timer.schedule(key, now + 45_000)
    timer.schedule(TimerKey(TimerKind.RETENTION, "g"), now + 44_999)
    assert timer.deadline(keys[0]) == now + 45_000
    assert timer.next_deadline() == now + 44_999
    assert timer.pop_expired(now + 44_999) == [TimerKey(TimerKind.RETENTION, "g")]
    assert timer.pop_expired(now + 45_000) == keys
    assert timer.next_deadline() is None
