"""Request quotas (services/coordinator/runtime/quotas.py) on a fake clock: a burst of one second's
worth at once, then the rate; over it, answers wait their turn up to MAX_DELAY_S, further over they
are refused without counting; keys are independent."""

from __future__ import annotations

import pytest

from services.coordinator.runtime.quotas import MAX_DELAY_S, RequestQuotas


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_of_one_seconds_worth_then_the_rate() -> None:
    clock = Clock()
    q = RequestQuotas(100, clock)
    assert [q.admit("a") for _ in range(100)] == [0.0] * 100  # the burst
    waits = [q.admit("a") for _ in range(100)]  # each one 10 ms after the previous
    assert waits[0] == pytest.approx(0.01) and waits[-1] == pytest.approx(1.0)
    assert q.admit("a") is None  # 1.01 s over: refused, not counted
    assert q.refused == 1 and q.throttled == 100
    clock.t += 1.0  # a second later the queue has drained by 100 requests
    assert q.admit("a") == pytest.approx(0.01)


def test_keys_are_independent_and_an_idle_key_gets_its_burst_back() -> None:
    clock = Clock()
    q = RequestQuotas(10, clock)
    for _ in range(10):
        q.admit("flood")
    assert q.admit("flood") == pytest.approx(0.1)
    assert q.admit("worker") == 0.0  # another principal is not slowed
    clock.t += 5
    assert [q.admit("flood") for _ in range(10)] == [0.0] * 10


def test_a_steady_client_under_its_rate_is_never_throttled() -> None:
    clock = Clock()
    q = RequestQuotas(50, clock)
    for _ in range(1_000):
        assert q.admit("w") == 0.0
        clock.t += 0.021  # ~48 per second
    assert q.throttled == 0


def test_zero_means_no_quota() -> None:
    q = RequestQuotas(0, Clock())
    assert all(q.admit("x") == 0.0 for _ in range(100_000))


def test_the_longest_wait_is_max_delay() -> None:
    q = RequestQuotas(1_000, Clock())
    waits = [q.admit("x") for _ in range(3_000)]
    admitted = [w for w in waits if w is not None]
    assert max(admitted) <= MAX_DELAY_S + 1e-9
    assert len(admitted) == 2_000  # the burst, then one second's worth of waiting
