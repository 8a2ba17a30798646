"""Deterministic simulation with fault injection of the whole protocol (see docs/simulation.md).

The real coordinator core, the real worker SDK state machine and the real assignors run on a virtual
clock, driven from a seed, with lost / duplicated / delayed messages, crashes (workers and the
coordinator, which recovers from a real SQLite file), partitions, slow revocations, connector and
configuration changes and adversarial requests; the safety and liveness invariants are checked
after every step.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.engine import RunResult, Simulation, Violation, run_scenario
    from simulator.scenario import DEFAULT_STEPS, Event, NetSpec, Scenario, WorkerSpec, generate
    from simulator.shrink import shrink

# Imported when first used, so that `python -m simulator` run by an interpreter without the
# project's dependencies reaches simulator/__main__.py, which says how to run it.
_EXPORTS = {
    **dict.fromkeys(["RunResult", "Simulation", "Violation", "run_scenario"], "simulator.engine"),
    **dict.fromkeys(["DEFAULT_STEPS", "Event", "NetSpec", "Scenario", "WorkerSpec", "generate"], "simulator.scenario"),
    "shrink": "simulator.shrink",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)


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
