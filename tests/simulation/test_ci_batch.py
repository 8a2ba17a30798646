"""The CI batch: 2,000 seeded scenarios (>= 200,000 simulated steps) against the real coordinator
core, worker SDK, assignors and SQLite storage, every invariant checked after every step.

Four chunks of 500 seeds, run one after the other in this process (no xdist). A failure is shrunk
and reported with the one-line command that replays it. The soak is `python -m simulator soak`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from simulator.engine import run_scenario
from simulator.scenario import generate
from tests.simulation.helpers import reproduction

CHUNKS = 4
SEEDS_PER_CHUNK = 500
MIN_STEPS_PER_CHUNK = 50_000  # so >= 200,000 in all


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seeded_scenarios_hold_every_invariant(chunk: int, record_property: Callable[[str, object], None]) -> None:
    started = time.perf_counter()
    steps = 0
    seeds = range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK)
    for seed in seeds:
        result = run_scenario(generate(seed))
        steps += result.steps
        if not result.ok:
            pytest.fail(reproduction(result), pytrace=False)
    elapsed = time.perf_counter() - started
    record_property("scenarios", len(seeds))
    record_property("steps", steps)
    record_property("seconds", round(elapsed, 1))
    print(f"seeds {seeds.start}..{seeds.stop - 1}: {steps} steps in {elapsed:.1f} s")
    assert steps >= MIN_STEPS_PER_CHUNK
