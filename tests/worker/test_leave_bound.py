"""A worker told to stop leaves within about a second, or gives up: when its coordinator is gone
(the local stack SIGKILLed), its graceful leave must not keep retrying for many seconds -- it stops
its work (always: the status file says nothing runs), tries to leave, and exits."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from services.common.items import Items
from tests.fixtures.processes import Processes
from tests.worker.helpers import items, response
from tests.worker.observe import Admin
from tests.worker.test_member import INTERVAL, joined, run_effect, send
from worker_sdk import MemberState

pytestmark = pytest.mark.timeout(60)

# The local stack's timeouts (scripts/local_stack.py): session 6 s, so a heartbeat's deadline is 3 s.
STACK_SETTINGS = (
    "group.connect.min.session.timeout.ms=3000",
    "group.connect.session.timeout.ms=6000",
    "group.connect.min.heartbeat.interval.ms=500",
    "group.connect.heartbeat.interval.ms=1000",
)


# ---- the member (sans-I/O): leave(..., timeout_ms) ------------------------------------------------


def test_a_bounded_leave_gives_up_on_a_coordinator_that_never_answers() -> None:
    m = joined(items("a", "a-0"))
    hb = send(m, INTERVAL)  # in flight when the stop comes; the coordinator is gone
    m.leave(INTERVAL + 100, timeout_ms=1_000)
    eff = m.poll_effect(INTERVAL + 100)
    assert eff is not None and eff.revoked == items("a", "a-0")
    m.effect_done(eff.seq, INTERVAL + 300)  # the work is stopped: the bound counts from here
    wake = m.next_wakeup_ms()
    assert wake is not None and wake <= INTERVAL + 1_300
    m.tick(INTERVAL + 1_300)
    assert m.state == MemberState.UNSUBSCRIBED and m.closed and m.in_flight is None
    m.on_heartbeat_failure(hb.seq, INTERVAL + 5_000, "late")  # a late outcome changes nothing
    assert m.closed


def test_a_bounded_leave_request_gets_only_what_is_left_of_the_bound() -> None:
    m = joined(items("a"), request_timeout_ms=5_000)
    m.leave(100, timeout_ms=1_000)
    run_effect(m, 400)
    out = send(m, 400)
    assert out.leave and out.timeout_ms == 1_000
    m.on_heartbeat_failure(out.seq, 900, "UNAVAILABLE")
    wake = m.next_wakeup_ms()
    assert wake is not None
    retry = send(m, wake)
    assert retry.leave and retry.timeout_ms <= 1_400 - wake
    m.tick(1_400)
    assert m.closed


def test_a_bounded_leave_that_is_answered_leaves_normally() -> None:
    m = joined(items("a"), instance_id="i1")
    m.leave(100, temporary=True, timeout_ms=1_000)
    run_effect(m, 300)
    out = send(m, 300)
    assert (out.request.member_epoch, out.request.instance_id) == (-2, "i1")
    m.on_heartbeat_response(out.seq, response("m1", -2), 320)
    assert m.closed


def test_a_bounded_leave_never_cuts_the_work_short() -> None:
    m = joined(items("a"))
    m.leave(0, timeout_ms=1_000)
    eff = m.poll_effect(0)
    assert eff is not None
    m.tick(5_000)  # stopping takes longer than the bound: it still waits for the work
    assert m.state == MemberState.LEAVING and not m.closed
    m.effect_done(eff.seq, 5_000)
    out = send(m, 5_000)  # and then still tries to leave, within the bound
    assert out.leave and out.timeout_ms <= 1_000


# ---- real processes ------------------------------------------------------------------------------


def _status(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("instance_id", [None, "worker-1"], ids=["dynamic", "static"])
def test_a_worker_stops_within_two_seconds_of_sigterm_when_its_coordinator_is_gone(
    processes: Processes, tmp_path: Path, instance_id: str | None
) -> None:
    coordinator = processes.start_coordinator(settings=STACK_SETTINGS)
    admin = Admin(coordinator.address, "g")
    try:
        admin.put("orders", 3)
    finally:
        admin.close()
    status = tmp_path / "w.json"
    worker = processes.start_worker(
        coordinator.address, "g", status_file=status, instance_id=instance_id, extra=["--stop-delay-ms", "200"]
    )
    deadline = time.monotonic() + 20
    while not Items.from_json(_status(status).get("running")):
        assert time.monotonic() < deadline, f"the worker never ran anything:\n{worker.log()}"
        time.sleep(0.1)

    coordinator.kill()  # SIGKILL: nothing answers any more
    time.sleep(0.5)  # a heartbeat or two now fail / hang against the dead address
    worker.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        code = worker.wait(10)
    finally:
        took = time.monotonic() - t0
    assert took < 2.0, f"the worker took {took:.1f} s to stop:\n{worker.log()[-3000:]}"
    assert code == 0, worker.log()[-3000:]
    final = _status(status)
    assert not Items.from_json(final["running"]), final  # it stopped its work
    assert final["stops"] == final["starts"] > 0, final
    assert final["state"] == "unsubscribed", final
