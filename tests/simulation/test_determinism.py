"""Same seed, same run: the trace (every step, hashed) is identical -- in the same process, with or
without the trace kept, and in fresh processes with different string-hash seeds."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from simulator.engine import run_scenario
from simulator.scenario import Scenario, generate


def test_same_seed_same_trace() -> None:
    for seed, loads in ((3, None), (17, None), (101, None), (11, True)):
        assert generate(11, loads=True).loads is not None
        a = run_scenario(generate(seed, loads=loads), keep_trace=True)
        b = run_scenario(generate(seed, loads=loads))
        assert (a.trace_hash, a.steps, a.virtual_ms) == (b.trace_hash, b.steps, b.virtual_ms)
        assert a.stats == b.stats


def test_different_seeds_differ() -> None:
    hashes = {run_scenario(generate(seed)).trace_hash for seed in range(10)}
    assert len(hashes) == 10


def test_a_scenario_survives_its_token() -> None:
    s = generate(42)
    assert Scenario.from_token(s.token()) == s
    assert run_scenario(Scenario.from_token(s.token())).trace_hash == run_scenario(s).trace_hash


# Seed 9 picks a load scenario itself; seed 5 (a classic seed) is one with --loads on.
@pytest.mark.parametrize(("seed", "loads"), [(9, None), (2, None), (5, "on")])
def test_same_trace_in_fresh_processes_whatever_the_hash_seed(seed: int, loads: str | None) -> None:
    scenario = generate(seed, loads=True if loads else None)
    assert (scenario.loads is not None) == (seed != 2)
    expected = run_scenario(scenario).trace_hash
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-m", "simulator", "replay", "--seed", str(seed), *(["--loads", loads] if loads else [])],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        match = re.search(r"trace ([0-9a-f]{64})", out.stdout)
        assert match is not None, out.stdout[-500:]
        assert match.group(1) == expected


# Runs each scenario with its whole trace and prints one line per seed: the seed, the steps, and the
# full trace (as repr, so a first differing line can be shown). Driven in fresh processes below.
_DRIVER = """
import sys
from dataclasses import replace
from simulator.engine import run_scenario
from simulator.scenario import generate
for spec in sys.argv[1:]:
    seed, unordered, duplicate_joins = spec.split(":")
    s = generate(int(seed))
    s = replace(s, net=replace(s.net, unordered_requests=unordered == "1", duplicate_joins=duplicate_joins == "1"))
    r = run_scenario(s, keep_trace=True)
    print(repr((int(seed), r.steps, r.violation is None, r.trace)))
"""

# Seeds 23 and 29 (among others) once ran differently under PYTHONHASHSEED 0 and 2: the members a
# release nudged came in the order of a set of items. Seeds 3, 22, 100 and 102 are migration scenarios
# (classic and connect workers rolled both ways), several others classic groups.
_SEEDS = [f"{seed}:0:0" for seed in range(30)] + [f"{seed}:1:1" for seed in range(100, 106)]


def _generated(spec: str) -> Scenario:
    return generate(int(spec.split(":")[0]))


def _traces(hash_seed: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _DRIVER, *_SEEDS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )


def test_three_dozen_seeds_give_the_same_full_trace_under_several_hash_seeds() -> None:
    import ast

    # They cover every kind of scenario: connect, classic and migration (mixed) groups, and load
    # scenarios (SPEC §13: seeds 0, 4, 6... report loads, declare capacities and racks).
    kinds = {
        ("mixed" if s.migration else "classic" if s.classic else "loads" if s.loads else "connect")
        for s in map(_generated, _SEEDS)
    }
    assert kinds == {"connect", "classic", "mixed", "loads"}, kinds

    runs = {h: _traces(h) for h in ("0", "2", "5")}  # two at a time would do; the machine has two cores
    outputs = {}
    for h, proc in runs.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        outputs[h] = [ast.literal_eval(line) for line in out.splitlines()]
    reference = outputs["0"]
    assert len(reference) == len(_SEEDS)
    for h, runs_h in outputs.items():
        for ref, got in zip(reference, runs_h, strict=True):
            if ref != got:
                first = next(
                    (i for i, (a, b) in enumerate(zip(ref[3], got[3], strict=False)) if a != b),
                    min(len(ref[3]), len(got[3])),
                )
                raise AssertionError(
                    f"seed {ref[0]}: PYTHONHASHSEED=0 and ={h} differ at trace line {first}: "
                    f"{ref[3][first : first + 2]} vs {got[3][first : first + 2]}"
                )
