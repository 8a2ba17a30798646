"""End to end with real processes on loopback: the coordinator (client-side mode: the workers
compute the assignments) and `connect-worker` subprocesses. What runs where is read from the
workers' own status files, and every observation checks that nothing runs on two workers."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.items import Items
from tests.fixtures.processes import ManagedProcess, Processes
from tests.worker.observe import Admin, Fleet, Snapshot, coordinator_agrees, settled

pytestmark = pytest.mark.timeout(60)

GROUP = "g"
SESSION_S = 3.0  # tests.fixtures.processes.WORKER_TEST_SETTINGS


@pytest.fixture
def admin(worker_coordinator: ManagedProcess) -> Iterator[Admin]:
    a = Admin(worker_coordinator.address, GROUP)
    yield a
    a.close()


def start(
    processes: Processes, coordinator: ManagedProcess, fleet: Fleet, tmp: Path, name: str, *extra: str
) -> tuple[ManagedProcess, Path]:
    status = fleet.add(tmp / f"{name}.json")
    instance = None
    args = list(extra)
    if "--instance-id" in args:
        i = args.index("--instance-id")
        instance = args[i + 1]
        del args[i : i + 2]
    proc = processes.start_worker(
        coordinator.address, GROUP, name=name, status_file=status, instance_id=instance, extra=args
    )
    return proc, status


def test_three_workers_share_the_work_and_follow_connector_changes(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.put("a", 2)
    admin.put("b", 3)
    fleet = Fleet()
    for i in range(3):
        start(processes, worker_coordinator, fleet, tmp_path, f"w{i}")
    snap = fleet.wait_for("three workers sharing a and b", settled(admin, 3))
    coordinator_agrees(admin, snap)
    # Spread as Connect spreads: connectors and tasks are balanced separately.
    by_worker = snap.running_by_worker().values()
    for kind in ("connectors", "tasks"):
        counts = [len(getattr(items, kind)) for items in by_worker]
        assert max(counts) - min(counts) <= 1, f"{kind} not balanced: {counts}"

    for change in (
        lambda: admin.put("c", 4),
        lambda: admin.delete("a"),
        lambda: admin.put("b", 1),
        lambda: admin.put("b", 6),
    ):
        change()
        snap = fleet.wait_for(f"the fleet to follow {admin.connectors}", settled(admin, 3))
        coordinator_agrees(admin, snap)
    assert fleet.observations > 10


def test_sigkilled_worker_work_is_held_for_the_delay_then_reassigned(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    delay_s = 1.5
    admin.set_config("scheduled.rebalance.max.delay.ms", str(int(delay_s * 1000)))
    admin.put("a", 3)
    admin.put("b", 3)
    fleet = Fleet()
    procs = [start(processes, worker_coordinator, fleet, tmp_path, f"w{i}") for i in range(3)]
    snap = fleet.wait_for("three workers settled", settled(admin, 3))
    victim, victim_status = procs[1]
    lost = snap.running(victim_status)
    assert lost
    survivors_before = {p: snap.running(p) for p in snap.docs if p != victim_status}

    victim.kill()
    killed_at = time.monotonic()
    fleet.drop(victim_status)

    def unchanged_and_not_reassigned(s: Snapshot) -> None:
        if time.monotonic() - killed_at < SESSION_S:
            # Before its session can have expired nobody may take its work, and nobody else is disturbed.
            assert s.union().isdisjoint(lost), "the dead worker's work was given away before its session expired"
            assert {p: s.running(p) for p in s.docs} == survivors_before

    fleet.watch(SESSION_S - 0.3, unchanged_and_not_reassigned)
    snap = fleet.wait_for("the lost work back on the survivors", settled(admin, 2), timeout_s=20)
    took_s = time.monotonic() - killed_at
    assert took_s >= SESSION_S, f"reassigned after {took_s:.1f} s: before the session timeout"
    coordinator_agrees(admin, snap)
    assert len(admin.describe().members) == 2


def test_graceful_close_leaves_at_once_and_the_work_moves(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.set_config("scheduled.rebalance.max.delay.ms", "500")
    admin.put("a", 4)
    fleet = Fleet()
    procs = [start(processes, worker_coordinator, fleet, tmp_path, f"w{i}") for i in range(3)]
    snap = fleet.wait_for("three workers settled", settled(admin, 3))
    proc, status = procs[0]
    member_id = snap.docs[status]["member_id"]

    t0 = time.monotonic()
    assert proc.stop(signal.SIGTERM, timeout_s=10) == 0
    assert time.monotonic() - t0 < SESSION_S, "a graceful close does not wait for anything slow"
    final = json.loads(status.read_text())
    assert final["state"] == "unsubscribed" and Items.from_json(final["running"]) == Items()
    # Left (-1): gone from the group at once, not after its session.
    assert member_id not in {m.member_id for m in admin.describe().members}
    fleet.drop(status)
    snap = fleet.wait_for("the work on the two others", settled(admin, 2), timeout_s=15)
    coordinator_agrees(admin, snap)
    assert "leave" in proc.log() or "left" in proc.log()


# SIGTERM is what Kubernetes sends on a rolling restart; SIGUSR1 is the explicit planned restart.
@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM], ids=["SIGUSR1", "SIGTERM"])
def test_static_member_bounce_gets_its_work_back_without_a_rebalance(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path, sig: signal.Signals
) -> None:
    # Room for a slow interpreter start: the -2 member is kept until its session expires.
    admin.set_config("session.timeout.ms", "10000")
    admin.put("a", 3)
    admin.put("b", 3)
    fleet = Fleet()
    start(processes, worker_coordinator, fleet, tmp_path, "s0", "--instance-id", "s0")
    proc, status = start(processes, worker_coordinator, fleet, tmp_path, "s1", "--instance-id", "s1")
    start(processes, worker_coordinator, fleet, tmp_path, "d2")
    snap = fleet.wait_for("three workers settled", settled(admin, 3))
    mine = snap.running(status)
    others = {p: snap.running(p) for p in snap.docs if p != status}
    epoch = admin.describe().group_epoch
    assert mine

    proc.send_signal(sig)  # planned restart: stop, leave with -2, exit
    assert proc.wait(10) == 0
    final = json.loads(status.read_text())
    assert final["state"] == "unsubscribed" and Items.from_json(final["running"]) == Items()
    assert admin.describe().group_epoch == epoch, "a temporary leave is not a rebalance"
    assert {m.member_id: m.member_epoch for m in admin.describe().members}[snap.docs[status]["member_id"]] == -2

    def nobody_else_moves(s: Snapshot) -> None:
        assert {p: s.running(p) for p in s.docs if p != status} == others
        assert s.union().isdisjoint(mine)

    fleet.watch(0.6, nobody_else_moves)
    # The new incarnation (same instance id) takes the old one's place and its work.
    start(processes, worker_coordinator, fleet, tmp_path, "s1", "--instance-id", "s1")
    snap = fleet.wait_for("s1 back with its work", lambda s: s.running(status) == mine and settled(admin, 3)(s))
    nobody_else_moves(Snapshot({p: d for p, d in snap.docs.items() if p != status}))
    assert admin.describe().group_epoch == epoch, "the bounce caused no rebalance"
    coordinator_agrees(admin, snap)


def test_simulated_workers_in_one_process_with_slow_stops(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.set_config("scheduled.rebalance.max.delay.ms", "0")
    admin.put("a", 4)
    admin.put("b", 4)
    fleet = Fleet()
    paths = [fleet.add(tmp_path / f"sim-{i}.json") for i in range(4)]
    sim = processes.start_worker(
        worker_coordinator.address,
        GROUP,
        name="sim",
        status_file=tmp_path / "sim-{i}.json",
        simulate=4,
        extra=["--stop-delay-ms", "150", "--metrics-listen", "127.0.0.1:0"],
    )
    start(processes, worker_coordinator, fleet, tmp_path, "solo")
    snap = fleet.wait_for("five workers settled", settled(admin, 5))
    assert len({snap.docs[p]["pid"] for p in paths}) == 1, "the four simulated workers share one process"
    assert len({d["member_id"] for d in snap.docs.values()}) == 5

    admin.put("c", 6)  # moves work around; every stop takes 150 ms
    fleet.wait_for("the fleet to take c", settled(admin, 5))

    assert sim.stop(signal.SIGTERM, timeout_s=15) == 0  # all four leave gracefully
    for p in paths:
        fleet.drop(p)
    snap = fleet.wait_for("everything on the solo worker", settled(admin, 1), timeout_s=15)
    assert snap.union() == admin.expected()
