"""Same seed, same run: the trace (every step, hashed) is identical -- in the same process, with or
without the trace kept, and in fresh processes with different string-hash seeds."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from simulator.engine import run_scenario
from simulator.scenario import Scenario, generate


def test_same_seed_same_trace() -> None:
    for seed in (3, 17, 101):
        a = run_scenario(generate(seed), keep_trace=True)
        b = run_scenario(generate(seed))
        assert (a.trace_hash, a.steps, a.virtual_ms) == (b.trace_hash, b.steps, b.virtual_ms)
        assert a.stats == b.stats


def test_different_seeds_differ() -> None:
    hashes = {run_scenario(generate(seed)).trace_hash for seed in range(10)}
    assert len(hashes) == 10


def test_a_scenario_survives_its_token() -> None:
    s = generate(42)
    assert Scenario.from_token(s.token()) == s
    assert run_scenario(Scenario.from_token(s.token())).trace_hash == run_scenario(s).trace_hash


def test_same_trace_in_fresh_processes_whatever_the_hash_seed() -> None:
    expected = run_scenario(generate(9)).trace_hash
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-m", "simulator", "replay", "--seed", "9"],
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
