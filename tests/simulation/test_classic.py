"""Classic groups in the simulator (SPEC §12): seeds pick a connect or a classic group; classic
workers (`ClassicMember`) run under the same faults and invariants; a planted bug in the classic
path is found, and the same seeds hold without it."""

from __future__ import annotations

import random
from collections import Counter

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from simulator.engine import run_scenario
from simulator.planted import planted
from simulator.scenario import CLASSIC, CLASSIC_MODES, CONNECT, Scenario, generate
from tests.simulation.helpers import first_failure
from worker_sdk import ClassicConfig, ClassicMember
from worker_sdk._classic import RequestKind


def classic_seeds(count: int, start: int = 0) -> list[int]:
    """The first `count` seeds from `start` that pick a classic group by themselves."""
    out: list[int] = []
    seed = start
    while len(out) < count:
        if generate(seed).classic:
            out.append(seed)
        seed += 1
    return out


def test_seeds_pick_connect_or_classic_groups_and_classic_modes() -> None:
    scenarios = [generate(seed) for seed in range(200)]
    classic = [s for s in scenarios if s.classic]
    assert 30 <= len(classic) <= 90, len(classic)
    assert {s.classic for s in classic} == set(CLASSIC_MODES)
    # A classic scenario has no static members, no assignor service, no group configs and no
    # adversarial requests (they speak the connect protocol).
    for s in classic:
        assert not s.service and not any(w.static for w in s.workers)
        assert not {e.kind for e in s.events} & {"alter_config", "bad_request", "assignor_fault", "slow_compute"}
    # A seed left connect is the scenario it always was: forcing the protocol changes nothing.
    for s in scenarios:
        if not s.classic and not s.migration:  # (migration scenarios: tests/simulation/test_migration.py)
            assert generate(s.seed, protocol=CONNECT) == s
    assert generate(3, protocol=CLASSIC).classic in CLASSIC_MODES


def test_every_classic_worker_can_learn_of_a_rebalance_within_its_rebalance_timeout() -> None:
    """A member hears of a rebalance from its next heartbeat: a rebalance timeout not above the
    interval rebalanced for ever (seed 119219). Every classic and migration scenario is a valid
    `ClassicConfig` (the generator draws twice the interval instead)."""
    for seed in range(600):
        for protocol in (CLASSIC, "mixed"):
            s = generate(seed, protocol=protocol)
            for w in s.workers:
                assert w.rebalance_timeout_ms > s.heartbeat_interval_ms, (seed, protocol, w)
                ClassicConfig(
                    "g",
                    session_timeout_ms=s.session_timeout_ms,
                    heartbeat_interval_ms=s.heartbeat_interval_ms,
                    rebalance_timeout_ms=w.rebalance_timeout_ms,
                )


def test_a_classic_scenario_survives_its_token_and_replays_exactly() -> None:
    s = generate(classic_seeds(1, start=40)[0])
    assert Scenario.from_token(s.token()) == s
    a = run_scenario(s, keep_trace=True)
    b = run_scenario(Scenario.from_token(s.token()))
    assert a.trace_hash == b.trace_hash and a.steps == b.steps
    assert any("classic" in line for line in a.trace)


def test_classic_seeds_hold_every_invariant_under_faults() -> None:
    seen: Counter[str] = Counter()
    parked = failed_calls = crashes = generations = 0
    for seed in classic_seeds(60):
        result = run_scenario(generate(seed))
        assert result.ok, f"seed {seed}: {result.violation}"
        seen[result.scenario.classic] += 1
        parked += result.stats.parked
        failed_calls += result.stats.parked_failed
        crashes += result.stats.coordinator_crashes
        generations += result.stats.generation
    assert set(seen) == set(CLASSIC_MODES), seen
    # Calls were parked and answered later; some were parked when the coordinator crashed (they
    # failed, the members called again); the coordinator crashed and recovered from SQLite.
    assert parked > 100 and failed_calls > 0 and crashes > 10 and generations > 60


def test_the_simulator_finds_a_forgotten_classic_assignment() -> None:
    seeds = classic_seeds(40)
    with planted(["forget-classic-assignment"]):
        failure, _, _ = first_failure(seeds)
    assert failure is not None, "forget-classic-assignment was not found"
    assert failure.violation is not None and failure.violation.invariant == "d-recovery"
    assert "classic" in failure.violation.message
    # The same seeds hold without the plant.
    clean, _, _ = first_failure(seeds[: seeds.index(failure.scenario.seed) + 1])
    assert clean is None


def test_a_classic_worker_never_asks_to_be_woken_in_the_past() -> None:
    """Found by the simulator (seed 1, a livelock): a JoinGroup's retry time that passed while the
    config read it waits for was itself backing off stayed the member's next wake-up, so its driver
    spun without virtual time moving."""
    m = ClassicMember(ClassicConfig("g", retry_backoff_ms=100, retry_jitter=0.0), rng=random.Random(1))
    m.join(0)
    config = m.poll_request(0)
    assert config is not None and config.kind == RequestKind.CONFIG
    missing = admin_pb2.DescribeGroupsResponse()
    missing.groups.add(group_id="g", error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    m.on_response(config.seq, missing, 0)
    join = m.poll_request(0)
    assert join is not None and join.kind == RequestKind.JOIN
    m.on_failure(join.seq, 950, "unavailable")  # the JoinGroup retries after its backoff (~1050)
    now = 950
    for _ in range(20):
        while (req := m.poll_request(now)) is not None:
            m.on_failure(req.seq, now, "unavailable")  # the config read (stale by then) fails too
        wake = m.next_wakeup_ms()
        assert wake is None or wake > now, f"at {now} the member asks to be woken at {wake}"
        now = wake if wake is not None else now + 1
