"""The CI batch: 2,000 seeded scenarios (>= 200,000 simulated steps) against the real coordinator
core, worker SDK, assignors and SQLite storage, every invariant checked after every step. The seeds
pick their group: `connect` (half), classic (30 %) or a migration scenario (20 %, about 400 of them:
classic and `connect` workers rolled both ways, the group upgraded and downgraded); 35 % of the
`connect` seeds are load scenarios (SPEC §13: loads, capacities, racks; more in test_loads.py).

Four chunks of 500 seeds, run one after the other in this process (no xdist). A failure is shrunk
and reported with the one-line command that replays it. The soak is `python -m simulator soak`.
"""

from __future__ import annotations

import time
from collections import Counter
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
    migrations: Counter[str] = Counter()
    seeds = range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK)
    for seed in seeds:
        result = run_scenario(generate(seed))
        steps += result.steps
        if not result.ok:
            pytest.fail(reproduction(result), pytrace=False)
        st = result.stats
        migrations.update(
            scenarios=st.migration_runs, upgrades=st.upgrades, downgrades=st.downgrades, loads=st.load_runs
        )
    elapsed = time.perf_counter() - started
    record_property("scenarios", len(seeds))
    record_property("steps", steps)
    record_property("seconds", round(elapsed, 1))
    record_property("migration_scenarios", migrations["scenarios"])
    print(f"seeds {seeds.start}..{seeds.stop - 1}: {steps} steps in {elapsed:.1f} s; migrations {dict(migrations)}")
    assert steps >= MIN_STEPS_PER_CHUNK
    # A fifth of the seeds are migration scenarios (SPEC §12): the group converted in both directions.
    assert migrations["scenarios"] >= SEEDS_PER_CHUNK // 10, migrations
    assert migrations["upgrades"] >= 20 and migrations["downgrades"] >= 20, migrations
    assert migrations["loads"] >= SEEDS_PER_CHUNK // 10, migrations  # (about 17 % of the seeds)
