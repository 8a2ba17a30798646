"""Classic workers end to end: a real coordinator serving ConnectClassicGroup and real
`connect-worker --group-protocol classic` processes on loopback. The worker elected leader computes
the assignment with Connect's rules; what runs where is read from the workers' own status files, and
every observation checks that nothing runs on two workers (tests.worker.observe.Fleet)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.items import Items
from tests.fixtures.processes import WORKER_TEST_SETTINGS, ManagedProcess, Processes
from tests.worker.observe import Admin, Fleet, Snapshot

pytestmark = pytest.mark.timeout(120)

GROUP = "g"
SESSION_MS = 3_000
HEARTBEAT_MS = 300
CLASSIC_SETTINGS = (
    *WORKER_TEST_SETTINGS,
    "group.classic.initial.rebalance.delay.ms=300",
    "group.classic.min.session.timeout.ms=1000",
)


@pytest.fixture
def coordinator(processes: Processes) -> ManagedProcess:
    return processes.start_coordinator(settings=CLASSIC_SETTINGS)


@pytest.fixture
def admin(coordinator: ManagedProcess) -> Iterator[Admin]:
    a = Admin(coordinator.address, GROUP)
    yield a
    a.close()


def start(
    processes: Processes, coordinator: ManagedProcess, fleet: Fleet, tmp: Path, name: str, mode: str, delay_ms: int
) -> tuple[ManagedProcess, Path]:
    status = fleet.add(tmp / f"{name}.json")
    extra = [
        "--group-protocol",
        "classic",
        "--connect-protocol",
        mode,
        "--scheduled-rebalance-max-delay-ms",
        str(delay_ms),
        "--session-timeout-ms",
        str(SESSION_MS),
        "--heartbeat-interval-ms",
        str(HEARTBEAT_MS),
        "--rebalance-timeout-ms",
        "10000",
        "--url",
        f"http://{name}:8083",
    ]
    proc = processes.start_worker(coordinator.address, GROUP, name=name, status_file=status, extra=extra)
    return proc, status


def settled(admin: Admin, n_workers: int) -> Callable[[Snapshot], bool]:
    """`n_workers` classic workers, each stable at one generation (the group's), running exactly its
    assignment; together exactly the group's connectors and tasks."""

    def pred(snap: Snapshot) -> bool:
        if len(snap.docs) != n_workers:
            return False
        generations = set()
        for doc in snap.docs.values():
            if doc.get("group_protocol") != "classic" or doc.get("state") != "stable":
                return False
            if Items.from_json(doc["running"]) != Items.from_json(doc.get("assigned")):
                return False
            generations.add(doc.get("generation"))
        if len(generations) != 1 or snap.union() != admin.expected():
            return False
        return sum(len(snap.running(p)) for p in snap.docs) == len(admin.expected())

    return pred


def balanced(snap: Snapshot) -> bool:
    by_worker = snap.running_by_worker().values()
    for kind in ("connectors", "tasks"):
        counts = [len(getattr(items, kind)) for items in by_worker]
        if max(counts) - min(counts) > 1:
            return False
    return True


def stops(path: Path) -> int:
    return int(json.loads(path.read_text())["stops"])


def test_cooperative_join_scale_out_and_a_killed_worker_held_for_the_delay(
    processes: Processes, coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    delay_ms = 2_000
    admin.put("a", 2)
    admin.put("b", 3)
    fleet = Fleet()
    procs = [start(processes, coordinator, fleet, tmp_path, f"w{i}", "sessioned", delay_ms) for i in range(2)]
    snap = fleet.wait_for("two classic workers sharing a and b", settled(admin, 2), timeout_s=30)
    assert balanced(snap)
    leaders = {d["leader"] for d in snap.docs.values()}
    assert len(leaders) == 1 and {d["protocol"] for d in snap.docs.values()} == {"sessioned"}
    described = admin.describe()
    assert described.group_type == "classic" and described.protocol_name == "sessioned"

    # Scale out: the two keep what they keep, only what moves is stopped (cooperative).
    before = {p: snap.running(p) for p in snap.docs}
    procs.append(start(processes, coordinator, fleet, tmp_path, "w2", "sessioned", delay_ms))
    snap = fleet.wait_for("three workers balanced", lambda s: settled(admin, 3)(s) and balanced(s), timeout_s=30)
    moved = sum(len(before[p] - snap.running(p)) for p in before)
    assert moved == len(snap.running(procs[2][1])), "only the new worker's share moved"
    assert all(stops(p) == len(before[p] - snap.running(p)) for p in before)

    # A worker SIGKILLed: its work is held for the session and the delay, then reassigned. (Not the
    # leader: a new leader does not know the previous assignment, so in Connect the work of a dead
    # leader is reassigned as soon as its session expires.)
    victim, victim_status = next((pr, st) for pr, st in procs if snap.docs[st]["member_id"] != snap.docs[st]["leader"])
    procs.remove((victim, victim_status))
    lost = snap.running(victim_status)
    assert lost
    survivors_before = {p: snap.running(p) for p in snap.docs if p != victim_status}
    victim.kill()
    killed_at = time.monotonic()
    fleet.drop(victim_status)
    hold_s = (SESSION_MS + delay_ms) / 1000

    def held(s: Snapshot) -> None:
        if time.monotonic() - killed_at < hold_s - 0.5:
            assert s.union().isdisjoint(lost), "the dead worker's work was given away before the delay"
            for p, items in survivors_before.items():
                assert items.issubset(s.running(p)), f"{p.name} was disturbed"

    fleet.watch(hold_s - 0.5, held)
    snap = fleet.wait_for("the lost work back on the survivors", settled(admin, 2), timeout_s=30)
    assert time.monotonic() - killed_at >= hold_s - 0.5
    for p, items in survivors_before.items():
        assert items.issubset(snap.running(p))

    # Graceful SIGTERM: the work is stopped, the worker leaves and exits 0.
    proc, status = procs[0]
    assert proc.stop(signal.SIGTERM, timeout_s=15) == 0
    final = json.loads(status.read_text())
    assert final["state"] == "unsubscribed" and Items.from_json(final["running"]) == Items()
    fleet.drop(status)
    fleet.wait_for("everything on the last worker", settled(admin, 1), timeout_s=30)
    assert fleet.observations > 10


def test_eager_revokes_everything_on_every_rebalance(
    processes: Processes, coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.put("a", 3)
    admin.put("b", 2)
    fleet = Fleet()
    procs = [start(processes, coordinator, fleet, tmp_path, f"w{i}", "eager", 0) for i in range(2)]
    snap = fleet.wait_for("two eager workers", settled(admin, 2), timeout_s=30)
    assert {d["protocol"] for d in snap.docs.values()} == {"default"}
    before = {p: (snap.running(p), stops(p)) for p in snap.docs}

    procs.append(start(processes, coordinator, fleet, tmp_path, "w2", "eager", 0))
    snap = fleet.wait_for("three eager workers balanced", lambda s: settled(admin, 3)(s) and balanced(s), timeout_s=30)
    for p, (ran, stopped) in before.items():
        # Everything it ran was stopped at the rebalance, kept or not.
        assert stops(p) - stopped >= len(ran), f"{p.name} did not revoke everything"

    # A connector change is a rebalance too (the leader sees the config move): everything stops again.
    before = {p: (snap.running(p), stops(p)) for p in snap.docs}
    admin.put("c", 1)
    snap = fleet.wait_for("the fleet to follow the new connector", settled(admin, 3), timeout_s=30)
    for p, (ran, stopped) in before.items():
        assert stops(p) - stopped >= len(ran)
