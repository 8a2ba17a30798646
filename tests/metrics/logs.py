"""Event logs produced by the real system for the metrics job's tests.

- `seed_case_studies()`: seed 001's case studies through the real core (the coordinator test
  harness, service mode with the real incremental-cooperative assignor): workers join (work moves
  by revocation), a worker is killed (its work held for the delayed rebalance, then reassigned), a
  static worker bounces, a worker leaves, one is fenced for not revoking in time, task counts
  change, a connector is deleted, and a second group is emptied and deleted.
- `simulator_scenarios(seeds)`: the simulator's seeded scenarios (real core, SDK, assignors, storage,
  with crashes and network faults); each one's log under its own group-id prefix.
- `bad_rows()`: the bad input the job must count, not crash on (written as rows, on purpose).
- `load_rows()`: a group with loads (SPEC §13), as the load watch logs it: `load_sampled` events
  over two hours, its ratio falling under the goal after a `load_imbalance` rebalance.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from connect.coordinator.v1 import admin_pb2
from services import assignor
from services.common.items import Items
from services.coordinator.core.records import RebalanceEvent
from services.storage import Storage
from simulator.engine import Simulation, quiet_logs
from simulator.scenario import generate
from tests.coordinator.harness import Context, items

SERVICE = {a.name: (a.minimum_version, a.maximum_version) for a in assignor.list_assignors()}
# A connector name longer than any chart label used to be (the report must not cut it off).
LONG_CONNECTOR = "connect-metrics-a-very-long-connector-name-that-goes-on-and-on"
T0 = 1_795_000_000_000  # 2026-11-18T...Z: the harness clock starts here (several hours are crossed)


class _Cluster:
    """Workers that behave like the SDK over the harness: run what they are told, acknowledge at once."""

    def __init__(self) -> None:
        self.ctx = Context(service_assignors=SERVICE)
        self.ctx.now = T0
        self.silent: set[str] = set()
        # Members that keep running what they were told to give up (never acknowledge a revocation).
        self.stubborn: set[str] = set()

    def settle(self, gid: str = "g", ms: int = 0) -> None:
        """Answer the assignor calls and heartbeat every live member until nothing changes; then let
        `ms` pass in heartbeat steps, heartbeating the live members."""
        for _ in range(20):
            before = self.ctx.durable()
            self._answer()
            group = self.ctx.coordinator.state.groups.get(gid)
            for mid, m in list(group.members.items()) if group else []:
                if mid not in self.silent and m.member_epoch >= 0:
                    self._beat(gid, mid)
            self._answer()
            if self.ctx.durable() == before:
                break
        left = ms
        while left > 0:
            step = min(1_000, left)
            self.ctx.sleep(step)
            left -= step
            self._answer()
            group = self.ctx.coordinator.state.groups.get(gid)
            for mid, m in list(group.members.items()) if group else []:
                if mid not in self.silent and m.member_epoch >= 0:
                    self._beat(gid, mid)

    def _beat(self, gid: str, mid: str) -> None:
        m = self.ctx.coordinator.state.groups[gid].members[mid]
        owned = m.current.assigned | (m.current.revoking if mid in self.stubborn else Items())
        self.ctx.heartbeat(mid, m.member_epoch, gid, owned=owned)

    def _answer(self) -> None:
        for call in self.ctx.take_all_service_calls():
            resp = assignor.assign(call.request)
            self.ctx._apply(
                self.ctx.coordinator.complete_service_assignment(call.group_id, call.group_epoch, resp, self.ctx.now)
            )

    def join(self, mid: str, gid: str = "g", **kw: Any) -> None:
        kw.setdefault("url", f"http://{mid.lower()}.workers.example:8083")  # (what the report names)
        self.ctx.join(mid, gid, assignors=None, **kw)
        self.settle(gid)

    def events(self) -> list[RebalanceEvent]:
        return self.ctx.events()


def seed_case_studies() -> list[RebalanceEvent]:
    c = _Cluster()
    ctx = c.ctx
    ctx.put_connector("A", 3)
    ctx.put_connector("B", 2)
    ctx.alter_configs("g", scheduled_rebalance_max_delay_ms="60000")
    c.join("W1")
    c.settle(ms=2_000)
    c.join("W2")  # work moves from W1 to W2: revocation first, then assignment
    c.settle(ms=2_000)
    c.join("W3")
    c.settle(ms=5_000)
    # W2 is killed: its session expires, its work is held for the delayed rebalance, then reassigned.
    c.silent.add("W2")
    c.settle(ms=50_000)
    c.settle(ms=65_000)
    assert "W2" not in ctx.group().members
    # A static worker joins, bounces (-2) and comes back: same work, no rebalance.
    c.join("S1", instance_id="s-1")
    c.settle(ms=3_000)
    ctx.heartbeat("S1", -2)
    c.settle(ms=4_000)
    ctx.join("", "g", instance_id="s-1", owned=Items(), url="http://s1.workers.example:8083")
    c.settle(ms=3_000)
    # The group's configuration changes; tasks are added, then a connector deleted.
    ctx.put_connector("B", 5)
    c.settle(ms=3_000)
    ctx.delete_connector("A")
    c.settle(ms=3_000)
    # W3 leaves; W4 joins.
    ctx.heartbeat("W3", -1)
    c.settle(ms=2_000)
    c.join("W4")
    c.settle(ms=70_000)
    # W5 joins while the others hold on to what they are told to give up: whoever must give work
    # to W5 is fenced by the rebalance timeout; its work is held until its session would have
    # expired, then released and reassigned.
    c.stubborn = set(ctx.group().members)
    c.join("W5")
    c.settle(ms=40_000)
    assert any(e.event == "member_fenced" for e in c.events())
    c.stubborn.clear()
    c.settle(ms=60_000)
    ctx.put_connector("C", 2)
    ctx.put_connector(LONG_CONNECTOR, 2)
    c.settle(ms=3_600_000 // 2)  # half an hour of steady state: the next events are in another hour

    # A second group: built, emptied and deleted (its connectors' downtime ends as `deleted`).
    ctx.put_connector("X", 2, group_id="h")
    c.join("H1", gid="h")
    c.settle("h", 2_000)
    ctx.heartbeat("H1", -1, "h")
    c.settle("h", 5_000)
    ctx.call("delete_groups", admin_pb2.DeleteGroupsRequest(group_ids=["h"]))
    c.settle(ms=2_000)
    return c.events()


def simulator_scenarios(seeds: list[int], steps: int = 150, protocol: str = "connect") -> list[RebalanceEvent]:
    """`protocol`: connect (the connect seeds were chosen before classic ones existed) or classic
    (classic groups: generations, their rebalances, connector changes through the connect side)."""
    out: list[RebalanceEvent] = []
    for seed in seeds:
        with quiet_logs():
            sim = Simulation(generate(seed, steps, protocol=protocol), keep_trace=False)
            result = sim.run()
        assert result.violation is None, result.violation
        for stored in sim.node.storage.read_events():
            ev = stored.record
            details = dict(ev.details)
            if details.get("last_heartbeat_ms") is not None:
                details["last_heartbeat_ms"] += T0  # the same clock as the event times
            out.append(
                dataclasses.replace(
                    ev, group_id=f"sim{protocol}{seed}-{ev.group_id}", time_ms=T0 + ev.time_ms, details=details
                )
            )
    return out


def bad_rows(t: int) -> list[RebalanceEvent]:
    """Unknown event type, malformed details (not an object), a clock going backwards, and a group
    deleted in the middle of a rebalance."""
    return [
        RebalanceEvent("bad", t, "group_created"),
        RebalanceEvent("bad", t + 10, "connector_teleported", details={"items": 1}),
        RebalanceEvent("bad", t + 20, "group_epoch_bumped", group_epoch=1, details="{not json"),  # type: ignore[arg-type]
        RebalanceEvent("bad", t + 30, "member_joined", "B1", group_epoch=1),
        RebalanceEvent("bad", t + 5, "assignment_requested", "", 1, details={"executor": "service"}),
        RebalanceEvent("bad", t + 40, "items_assigned", "B1", 1, 1, 1, {"items": 2}),
        RebalanceEvent("bad", t + 50, "group_deleted"),
    ]


def load_rows(t: int) -> list[RebalanceEvent]:
    """A skewed group's logged load samples (the ratio over time), written as the core writes them."""

    def sample(at: int, ratio: float, with_load: int = 3) -> RebalanceEvent:
        details = {"load_ratio": ratio, "goal": 1.1, "members": 3, "members_with_load": with_load}
        return RebalanceEvent("loaded", at, "load_sampled", group_epoch=1, assignment_epoch=1, details=details)

    return [
        RebalanceEvent("loaded", t, "group_created"),
        sample(t + 75_000, 2.5),
        sample(t + 300_000, 2.5 * 0.8, 2),
        RebalanceEvent(
            "loaded", t + 375_000, "group_epoch_bumped", "L1", 2, 1, details={"reason": "load_imbalance", "goal": 1.1}
        ),
        sample(t + 450_000, 1.05),
        sample(t + 3_600_000 + 150_000, 1.3),  # the next hour: a load changed
        sample(t + 3_600_000 + 600_000, 1),  # (an integer in the JSON)
    ]


def write_events(url: str, events: list[RebalanceEvent]) -> None:
    """Append events to the database's rebalance_events (migrating it first) in order."""
    with Storage(url) as storage:
        for i in range(0, len(events), 2_000):
            storage.write(events[i : i + 2_000])


def read_rows(url: str) -> list[dict[str, Any]]:
    with Storage(url) as storage:
        return [
            {
                "id": e.id,
                "group_id": e.record.group_id,
                "time_ms": e.record.time_ms,
                "event": e.record.event,
                "member_id": e.record.member_id,
                "group_epoch": e.record.group_epoch,
                "assignment_epoch": e.record.assignment_epoch,
                "member_epoch": e.record.member_epoch,
                "details": e.record.details,
            }
            for e in storage.read_events()
        ]


__all__ = [
    "LONG_CONNECTOR",
    "T0",
    "bad_rows",
    "items",
    "load_rows",
    "read_rows",
    "seed_case_studies",
    "simulator_scenarios",
    "write_events",
]
