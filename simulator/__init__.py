"""Deterministic simulation with fault injection of the whole protocol (see docs/simulation.md).

The real coordinator core, the real worker SDK state machine and the real assignors run on a virtual
clock, driven from a seed, with lost / duplicated / delayed messages, crashes (workers and the
coordinator, which recovers from a real SQLite file), partitions, slow revocations, connector and
configuration changes and adversarial requests; the safety and liveness invariants are checked
after every step.
"""

from simulator.engine import RunResult, Simulation, Violation, run_scenario
from simulator.scenario import DEFAULT_STEPS, Event, NetSpec, Scenario, WorkerSpec, generate
from simulator.shrink import shrink

__all__ = [
    "DEFAULT_STEPS",
    "Event",
    "NetSpec",
    "RunResult",
    "Scenario",
    "Simulation",
    "Violation",
    "WorkerSpec",
    "generate",
    "run_scenario",
    "shrink",
]
