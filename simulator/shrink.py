"""Shrinking a failing scenario to a minimal reproduction.

Runs are deterministic, so a candidate "still fails" if re-running it violates the same invariant.
In order: drop the network faults one rate at a time, drop every event after the violation, then
delta-debug (ddmin) the event schedule, then drop workers nothing refers to any more. The result is
a scenario (with a replay token) that usually has a handful of events instead of dozens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace

from simulator.engine import RunResult, run_scenario
from simulator.scenario import Event, NetSpec, Scenario


class Shrinker:
    def __init__(self, failing: RunResult, *, max_runs: int = 300, max_seconds: float = 120.0) -> None:
        assert failing.violation is not None
        self.best = failing
        self.invariant = failing.violation.invariant
        self.runs = 0
        self.max_runs = max_runs
        self.deadline = time.monotonic() + max_seconds

    def _budget_left(self) -> bool:
        return self.runs < self.max_runs and time.monotonic() < self.deadline

    def _try(self, candidate: Scenario) -> bool:
        if not self._budget_left():
            return False
        self.runs += 1
        result = run_scenario(candidate)
        if result.violation is not None and result.violation.invariant == self.invariant:
            self.best = result
            return True
        return False

    @property
    def scenario(self) -> Scenario:
        return self.best.scenario

    def shrink(self) -> RunResult:
        self._network()
        self._after_violation()
        self._ddmin()
        self._unused_workers()
        self._network()
        return self.best

    def _network(self) -> None:
        for name in ("duplicate", "delay", "loss_request", "loss_response"):
            net = self.scenario.net
            if getattr(net, name) > 0:
                quieter = NetSpec(**{**asdict(net), name: 0.0})
                self._try(replace(self.scenario, net=quieter))

    def _after_violation(self) -> None:
        at = self.best.virtual_ms
        keep = [e for e in self.scenario.events if e.at_ms <= at]
        if len(keep) < len(self.scenario.events):
            self._try(replace(self.scenario, events=tuple(keep)))

    def _ddmin(self) -> None:
        """Zeller's delta debugging: remove chunks (then complements) while the failure persists."""
        n = 2
        while len(self.scenario.events) >= 2 and self._budget_left():
            events = list(self.scenario.events)
            chunks = _split(events, n)
            reduced = False
            for i in range(len(chunks)):
                complement = [e for j, c in enumerate(chunks) if j != i for e in c]
                if self._try(replace(self.scenario, events=tuple(complement))):
                    n = max(n - 1, 2)
                    reduced = True
                    break
            if not reduced:
                if n >= len(events):
                    break
                n = min(len(events), 2 * n)
        if len(self.scenario.events) == 1:
            self._try(replace(self.scenario, events=()))

    def _unused_workers(self) -> None:
        """Renumber the workers so that only those some event refers to remain."""
        s = self.scenario
        used = sorted({e.w for e in s.events if e.w >= 0}) or [0]  # a group needs one worker to converge
        if len(used) == len(s.workers):
            return
        index = {old: new for new, old in enumerate(used)}
        events = tuple(Event(e.at_ms, e.kind, index[e.w] if e.w >= 0 else -1, e.args) for e in s.events)
        protocols = tuple(s.protocols[i] for i in used) if s.protocols else ()
        self._try(replace(s, workers=tuple(s.workers[i] for i in used), protocols=protocols, events=events))


def _split(items: list[Event], n: int) -> list[list[Event]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def shrink(
    failing: RunResult,
    *,
    max_runs: int = 300,
    max_seconds: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> tuple[RunResult, int]:
    """The smallest failing variant found, and how many runs it took."""
    shrinker = Shrinker(failing, max_runs=max_runs, max_seconds=max_seconds)
    result = shrinker.shrink()
    if progress is not None:
        progress(
            f"shrunk {len(failing.scenario.events)} -> {len(result.scenario.events)} events in {shrinker.runs} runs"
        )
    return result, shrinker.runs
