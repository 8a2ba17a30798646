"""Proof that the simulator catches bugs: known faults planted in the real core (or in the node's
order of handle / store / respond) are found within a bounded number of seeds, and the shrunk
reproduction fails with the plant and holds without it."""

from __future__ import annotations

import pytest

from simulator.engine import run_scenario
from simulator.planted import PLANTS, planted
from simulator.shrink import shrink
from tests.simulation.helpers import first_failure

# Every plant is found well within this many seeds (the first finds are at seeds 0-40).
SEED_BOUND = 300

EXPECTED = {
    # Revoked work released before the worker confirms: another worker is given what it still runs.
    "skip-revocation-wait": {"a-cross", "a-workers", "a-coordinator"},
    # A replayed heartbeat at an old epoch is accepted instead of fenced (the adversarial replays
    # expect FENCED_MEMBER_EPOCH), and its stale `owned` can confirm a revocation.
    "accept-stale-epoch": {"bad-input", "a-cross", "a-workers"},
    # A fenced zombie's work goes to another worker at once, before its session would have expired.
    "release-held-on-fence": {"a-cross", "a-workers"},
    # A worker acts on a response whose records a crash then loses.
    "respond-before-write": {"a-cross", "a-workers", "d-durability", "b-epochs"},
    # Replicas: a replica woken after its lease was taken over commits a write anyway.
    "skip-fence": {"e-fencing"},
    # Classic groups: a loaded classic group's members lost their stored assignments.
    "forget-classic-assignment": {"d-recovery"},
    # The quiet epoch advance moves members whose work changes too: each gets its target at once,
    # without a revocation first or its items' previous owners releasing them.
    "quiet-advance-moves-work": {"a-cross", "a-workers", "a-coordinator"},
}
# The online-migration plants show only in migration seeds (a fifth of them): tests/simulation/
# test_migration.py runs them over those seeds, and shrinks a reproduction.
MIGRATION_PLANTS = {"upgrade-without-assignments", "downgrade-releasing-held"}
# The load plants show only in load scenarios: tests/simulation/test_loads.py runs them over those.
LOAD_PLANTS = {"ignore-futile-load-bumps", "assignor-ignores-racks", "report-unowned-loads"}


def test_every_plant_is_proven() -> None:
    assert set(EXPECTED) | MIGRATION_PLANTS | LOAD_PLANTS == set(PLANTS)


@pytest.mark.parametrize("plant", sorted(EXPECTED))
def test_the_simulator_finds_the_planted_bug(plant: str) -> None:
    with planted([plant]):
        failure, scenarios, steps = first_failure(range(SEED_BOUND))
    assert failure is not None, f"{plant}: not found in {SEED_BOUND} seeds ({steps} steps)"
    assert failure.violation is not None
    print(f"{plant}: found at seed {failure.scenario.seed} after {scenarios} scenarios: {failure.violation}")
    assert failure.violation.invariant in EXPECTED[plant], failure.violation

    with planted([plant]):
        small, _ = shrink(failure, max_runs=120)
        again = run_scenario(small.scenario)
    assert again.violation is not None and again.violation.invariant == failure.violation.invariant
    assert len(small.scenario.events) <= len(failure.scenario.events)
    assert run_scenario(small.scenario).ok, "the reproduction fails only because of the plant"


def test_plants_are_undone() -> None:
    with planted(sorted(PLANTS)):
        pass
    failure, _, _ = first_failure(range(20))
    assert failure is None
