"""A worker of a migration scenario (SPEC §12, online migration): one process slot whose every
incarnation runs either protocol -- the real SDK `Member` (`connect`, as `SimWorker`) or the real
`ClassicMember` (as `ClassicWorker`) -- the way an operator rolls a worker from
`--group-protocol classic` to `connect` and back: stop it (or it crashed), restart it with the other.

A start that names a protocol (a roll's WORKER_START) switches the worker to it: if the worker is up
with the other protocol, it shuts down gracefully first and restarts once it has exited. Messages of
an earlier incarnation never reach a later one (the network drops them), so one incarnation speaks
one protocol from its start to its exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.classic import ClassicWorker
from simulator.scenario import CLASSIC
from simulator.worker import SimWorker

if TYPE_CHECKING:
    from simulator.engine import Simulation


class MigratingWorker(ClassicWorker):
    """Dispatches every call to `ClassicWorker`'s or `SimWorker`'s behaviour by the protocol of the
    incarnation running now (`classic_now`)."""

    def __init__(self, sim: Simulation, index: int) -> None:
        super().__init__(sim, index)
        self.mode = sim.scenario.migration
        self.protocol = sim.scenario.protocols[index]  # the protocol of its next start
        self.classic_now = self.protocol == CLASSIC  # the protocol of the incarnation running (or last run)
        self.rolls = 0

    def start(self, now: int, protocol: str | None = None) -> None:
        if protocol is not None and protocol != self.protocol:
            self.protocol = protocol
            self.rolls += 1
            self.sim.stats.rolls += 1
            if self.up and self.classic_now != (protocol == CLASSIC):
                self.sim.trace(f"{self.name} rolls to {protocol}: shuts down first")
                self.stop(now, False)
                self.restart_after_exit = True
                return
        if self.up:
            SimWorker.start(self, now)  # (new_incarnation: only notes the restart wanted after the exit)
            return
        self.classic_now = self.protocol == CLASSIC
        if self.classic_now:
            ClassicWorker.start(self, now)
        else:
            SimWorker.start(self, now)

    def stop(self, now: int, temporary: bool) -> None:
        (ClassicWorker.stop if self.classic_now else SimWorker.stop)(self, now, temporary)

    def bump_reason(self, now: int) -> None:
        (ClassicWorker.bump_reason if self.classic_now else SimWorker.bump_reason)(self, now)

    def drive(self, now: int) -> None:
        (ClassicWorker.drive if self.classic_now else SimWorker.drive)(self, now)

    def on_response(self, kind: str, seq: int, response: Any, now: int) -> None:
        (ClassicWorker.on_response if self.classic_now else SimWorker.on_response)(self, kind, seq, response, now)

    def on_failure(self, kind: str, seq: int, now: int, why: str) -> None:
        (ClassicWorker.on_failure if self.classic_now else SimWorker.on_failure)(self, kind, seq, now, why)
