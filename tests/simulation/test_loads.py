"""Load scenarios (SPEC §13, issue 37): workers report per-item loads (skewed, changed during the
faults, fixed after), some declare capacities and racks, most prefer the `load-balanced` assignor.
The same invariants as every scenario, plus: no rebalance loop (with fixed loads and members the
`load_imbalance` bumps are bounded, and none in the final stretch), the rack spread at convergence,
and no load report refused without a fault to explain it; a plant for each proves it is found."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest

from simulator.base import load_bump_bound
from simulator.engine import run_scenario
from simulator.planted import planted
from simulator.scenario import LOAD_CHANGE, PUT_CONNECTOR, WORKER_START, NetSpec, Scenario, generate
from simulator.shrink import shrink
from tests.simulation.helpers import reproduction

SEEDS = range(10_000, 10_150)  # ~30 s; the soak (docs/simulation.md) runs thousands


@pytest.mark.slow
def test_load_scenarios_hold_every_invariant(record_property: Callable[[str, object], None]) -> None:
    started = time.perf_counter()
    seen: Counter[str] = Counter()
    for seed in SEEDS:
        result = run_scenario(generate(seed, loads=True))
        if not result.ok:
            pytest.fail(reproduction(result), pytrace=False)
        st = result.stats
        seen.update(
            runs=st.load_runs,
            steps=result.steps,
            changes=st.load_changes,
            bumps=st.load_bumps,
            bumps_after_faults=st.load_bumps_quiet,
            rack_checks=st.rack_checks,
            refused=st.load_refused,
        )
    elapsed = time.perf_counter() - started
    record_property("seconds", round(elapsed, 1))
    print(f"{len(SEEDS)} load scenarios in {elapsed:.1f} s: {dict(seen)}")
    assert seen["runs"] == len(SEEDS)
    # They exercise what they are for: load changes, the trigger (also with fixed loads, after the
    # faults), and the rack spread checked at convergence.
    assert seen["changes"] >= len(SEEDS)
    assert seen["bumps"] >= 30 and seen["bumps_after_faults"] >= 15, seen
    assert seen["rack_checks"] >= 40, seen


def _fault_free(seed: int) -> Scenario:
    """A load scenario without faults: its connectors, its workers' starts and its load changes only."""
    s = generate(seed, loads=True)
    keep = (PUT_CONNECTOR, WORKER_START, LOAD_CHANGE)
    return replace(s, net=NetSpec(), events=tuple(e for e in s.events if e.kind in keep))


def test_without_faults_no_load_report_is_refused() -> None:
    """The SDK reports only the items its member owns: the coordinator refuses none (a refusal
    after the faults stopped is the `load-report` violation; here there are no faults at all)."""
    refused = bumps = 0
    for seed in range(20_000, 20_030):
        result = run_scenario(_fault_free(seed))
        assert result.ok, reproduction(result)
        refused += result.stats.load_refused
        bumps += result.stats.load_bumps
    assert refused == 0
    assert bumps > 0  # (the trigger fires in fault-free runs too)


def test_a_seed_without_loads_is_the_scenario_it_was() -> None:
    """The load draws come from their own generator (seed/loads): a seed whose draw leaves loads
    off is exactly the scenario it was before load scenarios, and forcing loads on adds the loads,
    the load changes and the preferred assignor, nothing else."""
    off = [seed for seed in range(40) if generate(seed, protocol="connect").loads is None]
    assert len(off) > 15
    for seed in off:
        assert generate(seed, protocol="connect") == generate(seed, protocol="connect", loads=False)
    for seed in range(10):
        base, on = generate(seed, protocol="connect", loads=False), generate(seed, loads=True)
        assert on.loads is not None and base.loads is None
        assert [e for e in on.events if e.kind != LOAD_CHANGE] == list(base.events)
        assert replace(on, loads=None, events=base.events, workers=base.workers) == base
        assert {w.assignors for w in on.workers} <= {"load-balanced", "default"}
        assert Scenario.from_token(on.token()) == on


def test_load_balanced_without_loads_is_held_to_incremental_cooperatives_rack_rule() -> None:
    """Found by the first load soak (seed 3227, the checker's own bug): a target computed before any
    load was known is incremental-cooperative's answer, whose count balance may leave no room for
    the spread over unequal racks (two workers in r1, one in r2; 4 tasks of b and of c need two each
    in r2, whose one worker holds 3) -- held to the any-racks rule only with loads known."""
    result = run_scenario(generate(3227, loads=True))
    assert result.ok, reproduction(result)
    assert result.stats.rack_checks >= 1


def test_the_bump_bound_is_the_property_tests() -> None:
    s = generate(1, loads=True)
    assert s.loads is not None
    for max_moves, items, bound in ((-1, 7, 9), (-1, 36, 14), (1, 7, 9), (2, 7, 6), (3, 36, 14)):
        assert load_bump_bound(replace(s, loads=replace(s.loads, max_moves=max_moves)), items) == bound


@pytest.mark.parametrize(
    ("plant", "invariant"),
    [
        # The watch forgets that its last bump moved nothing: an imbalance no placement cures (a task
        # heavier than the mean) brings a bump every cooldown -- a rebalance loop.
        ("ignore-futile-load-bumps", "c-load-loop"),
        # The assignor is not told the racks: a connector's tasks pile up in one rack.
        ("assignor-ignores-racks", "c-racks"),
        # The SDK reports the loads of items it stopped: the coordinator refuses the report.
        ("report-unowned-loads", "load-report"),
    ],
)
def test_the_load_plants_are_found_and_shrunk(plant: str, invariant: str) -> None:
    with planted([plant]):
        failure = next(
            (r for seed in range(60) if not (r := run_scenario(generate(seed, loads=True))).ok),
            None,
        )
        assert failure is not None and failure.violation is not None
        assert failure.violation.invariant == invariant, failure.violation
        small, _ = shrink(failure, max_runs=80)
        again = run_scenario(small.scenario)
    assert again.violation is not None and again.violation.invariant == invariant
    assert run_scenario(small.scenario).ok, "the reproduction fails only because of the plant"
