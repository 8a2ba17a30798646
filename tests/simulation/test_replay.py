"""The command line: a failing seed prints a shrunk reproduction and the one-line command that
replays it; replay re-runs exactly and prints the trace."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from simulator.engine import run_scenario
from simulator.scenario import generate


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_replay_prints_the_whole_trace() -> None:
    out = sim("replay", "--seed", "5")
    assert out.returncode == 0, out.stderr
    expected = run_scenario(generate(5), keep_trace=True)
    assert out.stdout.count("\n") > len(expected.trace)
    assert expected.trace[-1] in out.stdout
    assert f"trace {expected.trace_hash}" in out.stdout
    assert "every invariant held" in out.stdout


def test_a_failing_seed_prints_a_shrunk_reproduction_that_replays_with_one_command() -> None:
    out = sim("run", "--seed", "31", "--protocol", "connect", "--plant", "respond-before-write")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED seed 31" in out.stdout
    assert (
        "replay the original: python -m simulator replay --seed 31 --plant respond-before-write --protocol connect"
        in out.stdout
    )
    assert "minimal reproduction:" in out.stdout
    violation = re.search(r"violation: (\[[a-z-]+\])", out.stdout)
    assert violation is not None
    command = re.search(r"replay the minimal reproduction: (python -m simulator replay .*)", out.stdout)
    assert command is not None
    argv = shlex.split(command.group(1))[3:]  # after "python -m simulator"

    again = sim(*argv)
    assert again.returncode == 1
    assert f"VIOLATION {violation.group(1)}" in again.stdout

    without_plant = [a for a in argv if a not in ("--plant", "respond-before-write")]
    assert sim(*without_plant).returncode == 0


def test_soak() -> None:
    out = sim("soak", "--scenarios", "12", "--start-seed", "500", "--jobs", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"12 scenarios \(seeds 500\.\.511\), \d+ steps", out.stdout)
