"""Shared by the simulation tests: run seeds, and turn a failure into a readable reproduction."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from simulator.cli import report_failure
from simulator.engine import RunResult, run_scenario
from simulator.scenario import DEFAULT_STEPS, generate


def reproduction(result: RunResult, plants: Iterable[str] = (), shrink_runs: int = 150) -> str:
    """The shrunk reproduction of a failure and the commands that replay it (what `run` prints)."""
    args = argparse.Namespace(
        plant=list(plants),
        steps=DEFAULT_STEPS,
        unordered_requests=result.scenario.net.unordered_requests,
        no_shrink=False,
        shrink_runs=shrink_runs,
        trace_lines=60,
    )
    out: list[str] = []
    report_failure(result, args, out)
    return "\n".join(out)


def first_failure(seeds: Iterable[int], steps: int = DEFAULT_STEPS) -> tuple[RunResult | None, int, int]:
    """Run seeds until one fails: (the failure or None, scenarios run, steps run)."""
    count = total = 0
    for seed in seeds:
        result = run_scenario(generate(seed, steps))
        count += 1
        total += result.steps
        if not result.ok:
            return result, count, total
    return None, count, total
