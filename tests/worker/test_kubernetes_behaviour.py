"""What a rolling restart on Kubernetes does to a group, with real processes: SIGTERM is what the
kubelet sends. A static worker (--instance-id) leaves temporarily (-2), so its restart moves
nothing (test_e2e_processes.py::test_static_member_bounce_gets_its_work_back_without_a_rebalance
[SIGTERM]); a dynamic one leaves (-1). `connect-groups members remove` removes a member for good."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.processes import ManagedProcess, Processes
from tests.worker.observe import Admin, Fleet, coordinator_agrees, settled
from tests.worker.test_e2e_processes import GROUP, start

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def admin(worker_coordinator: ManagedProcess) -> Iterator[Admin]:
    with contextlib.closing(Admin(worker_coordinator.address, GROUP)) as a:
        yield a


def connect_groups(coordinator: ManagedProcess, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "connect-groups"
    return subprocess.run(
        [str(script), "--coordinator", coordinator.address, *args], capture_output=True, text=True, timeout=30
    )


def test_sigterm_on_a_dynamic_worker_leaves_for_good(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.put("a", 2)
    fleet = Fleet()
    start(processes, worker_coordinator, fleet, tmp_path, "d0")
    proc, status = start(processes, worker_coordinator, fleet, tmp_path, "d1")
    snap = fleet.wait_for("two workers settled", settled(admin, 2))
    member_id, epoch = snap.docs[status]["member_id"], admin.describe().group_epoch
    assert proc.stop(signal.SIGTERM, timeout_s=10) == 0
    g = admin.describe()
    assert member_id not in {m.member_id for m in g.members} and g.group_epoch == epoch + 1


def test_members_remove_takes_a_static_member_out_for_good_and_refuses_an_unknown_one(
    processes: Processes, worker_coordinator: ManagedProcess, admin: Admin, tmp_path: Path
) -> None:
    admin.set_config("session.timeout.ms", "60000")  # only the removal can end the -2 member
    admin.set_config("scheduled.rebalance.max.delay.ms", "0")
    admin.put("a", 4)
    fleet = Fleet()
    start(processes, worker_coordinator, fleet, tmp_path, "s0", "--instance-id", "s0")
    proc, status = start(processes, worker_coordinator, fleet, tmp_path, "s1", "--instance-id", "s1")
    snap = fleet.wait_for("two workers settled", settled(admin, 2))
    epoch = admin.describe().group_epoch
    assert proc.stop(signal.SIGTERM, timeout_s=10) == 0  # scaled down: s1 will not come back
    fleet.drop(status)
    assert admin.describe().group_epoch == epoch

    unknown = connect_groups(worker_coordinator, "members", "remove", GROUP, "--instance-id", "s9")
    assert unknown.returncode == 1, unknown
    assert "UNKNOWN_MEMBER_ID" in unknown.stderr and "s9" in unknown.stderr
    assert admin.describe().group_epoch == epoch, "a refused removal changes nothing"

    done = connect_groups(worker_coordinator, "members", "remove", GROUP, "--instance-id", "s1")
    assert done.returncode == 0, done
    assert "removed member" in done.stdout
    g = admin.describe()
    assert [m.instance_id for m in g.members] == ["s0"] and g.group_epoch == epoch + 1
    # s1 stopped its work when it left, so its work goes to s0 at once.
    snap = fleet.wait_for("everything on s0", settled(admin, 1), timeout_s=20)
    assert snap.union() == admin.expected()
    coordinator_agrees(admin, snap)

    again = connect_groups(worker_coordinator, "members", "remove", GROUP, "--instance-id", "s1")
    assert again.returncode == 1 and "UNKNOWN_MEMBER_ID" in again.stderr
    usage = connect_groups(worker_coordinator, "members", "remove", GROUP)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
