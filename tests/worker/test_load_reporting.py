"""SPEC §13 on the worker: the load table, the meter, and when the heartbeat carries item_loads,
capacity and rack (the sans-I/O member, virtual time: no sleeps)."""

from __future__ import annotations

import math
import random
import re

import pytest

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId
from tests.worker.helpers import error, items, response
from worker_sdk import LoadMeter, LoadReporter, LoadTable, Member, MemberConfig, MemberState, OutgoingHeartbeat

INTERVAL = 1_000  # the heartbeat interval the helpers' responses carry
REPORT_MS = 30_000


def member(**overrides: object) -> Member:
    return Member(MemberConfig(group_id="g", **overrides), rng=random.Random(3))  # type: ignore[arg-type]


def send(m: Member, now: int) -> OutgoingHeartbeat:
    out = m.poll_heartbeat(now)
    assert out is not None, f"expected a heartbeat at {now} ({m.state})"
    return out


def ok(m: Member, out: OutgoingHeartbeat, now: int, assigned: Items | None = None) -> None:
    m.on_heartbeat_response(out.seq, response(assigned=assigned), now)


def run_effects(m: Member, now: int) -> None:
    while (eff := m.poll_effect(now)) is not None:
        m.effect_done(eff.seq, now)


def loads_of(req: coordinator_pb2.ConnectGroupHeartbeatRequest) -> dict[str, float] | None:
    if not req.HasField("item_loads"):
        return None
    return {(f"{e.connector}-{e.task}" if e.HasField("task") else e.connector): e.load for e in req.item_loads.loads}


def joined_running(assigned: Items, loads: dict[object, float], **overrides: object) -> Member:
    """Joined at t=0, runs `assigned` with `loads` set as the items start, acknowledged at t=0."""
    m = member(**overrides)
    m.join(0)
    join = send(m, 0)
    assert loads_of(join.request) is None, "a joining member owns nothing: no loads on the join"
    ok(m, join, 0, assigned)
    eff = m.poll_effect(0)
    assert eff is not None
    m.loads.update(loads)  # type: ignore[arg-type]  # (what on_assigned does)
    m.effect_done(eff.seq, 0)
    return m


def heartbeat(m: Member, now: int) -> coordinator_pb2.ConnectGroupHeartbeatRequest:
    out = send(m, now)
    ok(m, out, now)
    return out.request


def steady(m: Member, start: int, end: int) -> None:
    """Heartbeats every interval in [start, end): none carries loads."""
    for t in range(start, end, INTERVAL):
        assert loads_of(heartbeat(m, t)) is None, f"loads went out at {t}"


# ---- the reporting rules ------------------------------------------------------------------------


def test_first_report_after_join_is_full_and_immediate_then_steady_heartbeats_carry_none() -> None:
    m = joined_running(items("a", "a-0", "a-1"), {"a": 1.0, TaskId("a", 0): 10.0, TaskId("a", 1): 2.5})
    first = heartbeat(m, 0)  # the acknowledgement of the assignment
    assert loads_of(first) == {"a": 1.0, "a-0": 10.0, "a-1": 2.5}
    assert m.load_reporter.reports == 1
    for t in range(INTERVAL, 3 * REPORT_MS, INTERVAL):
        req = heartbeat(m, t)
        assert not req.HasField("item_loads"), f"unchanged loads went out at {t}"
        assert req.ByteSize() < 40, "the steady heartbeat stays minimal"


def test_a_move_beyond_the_threshold_waits_for_the_interval_then_goes_once() -> None:
    m = joined_running(items("a-0", "a-1"), {TaskId("a", 0): 100.0, TaskId("a", 1): 100.0})
    heartbeat(m, 0)
    m.loads.set(TaskId("a", 0), 150.0)  # +50 %
    for t in range(INTERVAL, REPORT_MS, INTERVAL):
        assert loads_of(heartbeat(m, t)) is None, f"reported before the interval, at {t}"
    assert loads_of(heartbeat(m, REPORT_MS)) == {"a-0": 150.0, "a-1": 100.0}, "the full snapshot, not a delta"
    assert loads_of(heartbeat(m, REPORT_MS + INTERVAL)) is None


def test_moves_within_the_threshold_are_never_reported() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 100.0})
    heartbeat(m, 0)
    for i, t in enumerate(range(INTERVAL, 10 * REPORT_MS, INTERVAL)):
        m.loads.set(TaskId("a", 0), 100.0 + (9.9 if i % 2 else -9.9))
        assert loads_of(heartbeat(m, t)) is None
    m.loads.set(TaskId("a", 0), 110.5)
    assert loads_of(heartbeat(m, 10 * REPORT_MS)) == {"a-0": 110.5}


def test_the_threshold_is_measured_from_the_last_report_not_the_last_value() -> None:
    """A slow drift of 5 % per interval is reported once it adds up past 10 %."""
    m = joined_running(items("a-0"), {TaskId("a", 0): 100.0})
    heartbeat(m, 0)
    m.loads.set(TaskId("a", 0), 105.0)
    steady(m, INTERVAL, REPORT_MS + INTERVAL)
    m.loads.set(TaskId("a", 0), 110.25)
    assert loads_of(heartbeat(m, REPORT_MS + INTERVAL)) == {"a-0": 110.25}


def test_threshold_and_interval_are_configurable() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 100.0}, load_report_threshold=0.5, load_report_interval_ms=5_000)
    heartbeat(m, 0)
    m.loads.set(TaskId("a", 0), 140.0)
    assert loads_of(heartbeat(m, 5_000)) is None, "40 % is within a 50 % threshold"
    m.loads.set(TaskId("a", 0), 151.0)
    assert loads_of(heartbeat(m, 6_000)) == {"a-0": 151.0}


def test_a_new_item_with_a_load_is_a_change_revoked_items_are_dropped_and_not_a_reason() -> None:
    m = joined_running(items("a-0", "a-1"), {TaskId("a", 0): 5.0, TaskId("a", 1): 7.0})
    heartbeat(m, 0)
    # The coordinator revokes a-1: it is stopped, its load dropped from the table.
    out = send(m, INTERVAL)
    ok(m, out, INTERVAL, items("a-0"))
    run_effects(m, INTERVAL)
    assert TaskId("a", 1) not in m.loads
    ack = send(m, INTERVAL)
    assert loads_of(ack.request) is None, "a revocation alone is no reason to report"
    ok(m, ack, INTERVAL)
    steady(m, 2 * INTERVAL, REPORT_MS + 2 * INTERVAL)  # still nothing: a-0 did not move
    # a-2 is assigned and its load set: reported (once the interval since the last report passed).
    out = send(m, REPORT_MS + 2 * INTERVAL)
    ok(m, out, REPORT_MS + 2 * INTERVAL, items("a-0", "a-2"))
    eff = m.poll_effect(REPORT_MS + 2 * INTERVAL)
    assert eff is not None and eff.assigned == items("a-2")
    m.loads.set(TaskId("a", 2), 3.0)
    m.effect_done(eff.seq, REPORT_MS + 2 * INTERVAL)
    assert loads_of(heartbeat(m, REPORT_MS + 2 * INTERVAL)) == {"a-0": 5.0, "a-2": 3.0}


def test_loads_of_items_the_worker_does_not_run_are_never_sent() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 5.0})
    m.loads.set(TaskId("b", 0), 1e6)  # set early (or by mistake): not this worker's
    m.loads.set("b", 1.0)
    assert loads_of(heartbeat(m, 0)) == {"a-0": 5.0}


def test_a_worker_that_sets_no_load_never_sends_the_field() -> None:
    m = joined_running(items("a", "a-0"), {})
    for t in range(0, 3 * REPORT_MS, INTERVAL):
        req = heartbeat(m, t)
        for f in ("item_loads", "capacity", "rack"):
            assert not req.HasField(f), (f, t)


def test_a_failed_report_is_sent_again_at_the_next_heartbeat() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 5.0})
    out = send(m, 0)
    assert loads_of(out.request) == {"a-0": 5.0}
    m.on_heartbeat_failure(out.seq, 10, "deadline exceeded")
    assert m.load_reporter.reports == 0
    retry_at = m.next_wakeup_ms()
    assert retry_at is not None
    again = send(m, retry_at)
    assert loads_of(again.request) == {"a-0": 5.0}, "not acknowledged: still the full report"
    ok(m, again, retry_at)
    assert m.load_reporter.reports == 1


def test_a_refused_report_is_dropped_the_worker_keeps_heartbeating_and_reports_in_full_an_interval_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """INVALID_REQUEST on item_loads (an item the coordinator has just taken away, say) is not fatal:
    one log line, the heartbeat goes again at once without loads, steady heartbeats follow, and a
    full report (unchanged loads included) goes at the next report interval."""
    m = joined_running(items("a-0", "a-1"), {TaskId("a", 0): 5.0, TaskId("a", 1): 7.0})
    out = send(m, 0)
    assert loads_of(out.request) == {"a-0": 5.0, "a-1": 7.0}
    refusal = "item_loads[a-1]: the member does not own a-1; report only the items it runs"
    with caplog.at_level("WARNING", logger="worker_sdk"):
        m.on_heartbeat_response(out.seq, error(ErrorCode.INVALID_REQUEST, refusal), 5)
    assert m.state == MemberState.STABLE and m.fatal_error is None
    assert [r.getMessage() for r in caplog.records if "load report refused" in r.getMessage()] == [
        f"member {m.member_id}: load report refused ({refusal}); dropped, a full report follows in {REPORT_MS} ms"
    ]
    assert m.load_reporter.reports == 0 and m.load_reporter.refusals == 1
    retry_at = m.next_wakeup_ms()
    assert retry_at is not None and retry_at < INTERVAL
    again = send(m, retry_at)
    assert loads_of(again.request) is None, "the refused report is not sent again at once"
    ok(m, again, retry_at)
    m.loads.set(TaskId("a", 0), 50.0)  # a move beyond the threshold waits for the interval too
    steady(m, retry_at + INTERVAL, REPORT_MS)
    assert m.state == MemberState.STABLE
    later = retry_at + REPORT_MS
    assert loads_of(heartbeat(m, later)) == {"a-0": 50.0, "a-1": 7.0}, "the full report, an interval later"
    assert m.load_reporter.reports == 1
    steady(m, later + INTERVAL, later + REPORT_MS)


def test_an_invalid_request_not_about_loads_is_still_fatal() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 5.0})
    out = send(m, 0)
    assert loads_of(out.request) is not None
    m.on_heartbeat_response(out.seq, error(ErrorCode.INVALID_REQUEST, "rebalance_timeout_ms must be >= 0"), 5)
    assert m.state == MemberState.FATAL


def test_a_rejoin_after_fencing_sends_the_full_report_at_once() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 5.0})
    heartbeat(m, 0)
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(ErrorCode.FENCED_MEMBER_EPOCH, "fenced"), INTERVAL)
    run_effects(m, INTERVAL)  # everything is lost (and its loads dropped)
    assert m.state == MemberState.JOINING and len(m.loads) == 0
    join = send(m, INTERVAL)
    assert join.request.member_epoch == 0 and loads_of(join.request) is None
    ok(m, join, INTERVAL, items("a-0"))
    eff = m.poll_effect(INTERVAL)
    assert eff is not None
    m.loads.set(TaskId("a", 0), 5.0)  # the task starts again, sets its load again
    m.effect_done(eff.seq, INTERVAL)
    assert loads_of(heartbeat(m, INTERVAL)) == {"a-0": 5.0}, "the full report after the rejoin, at once"


def test_no_loads_in_the_leave_request() -> None:
    m = joined_running(items("a-0"), {TaskId("a", 0): 5.0})
    heartbeat(m, 0)
    m.loads.set(TaskId("a", 0), 500.0)
    m.leave(REPORT_MS)
    run_effects(m, REPORT_MS)
    out = send(m, REPORT_MS)
    assert out.leave and loads_of(out.request) is None


# ---- capacity and rack ---------------------------------------------------------------------------


def test_capacity_and_rack_go_on_join_and_on_every_full_request_then_only_when_changed() -> None:
    m = member(capacity=2.0, rack="zone-a")
    m.join(0)
    out = send(m, 0)
    join = out.request
    assert join.HasField("capacity") and join.capacity == 2.0 and join.rack == "zone-a"
    ok(m, out, 0)
    assert not heartbeat(m, INTERVAL).HasField("capacity")
    m.set_capacity(INTERVAL + 5, 3.0)
    req = heartbeat(m, INTERVAL + 5)  # sent at once, not at the next interval
    assert req.HasField("capacity") and req.capacity == 3.0 and not req.HasField("rack")
    m.set_rack(INTERVAL + 6, None)  # taken back: "" is "no rack"
    req = heartbeat(m, INTERVAL + 6)
    assert req.HasField("rack") and req.rack == "" and not req.HasField("capacity")
    # After an error the request is full: both again.
    out = send(m, 2 * INTERVAL + 6)
    m.on_heartbeat_response(out.seq, error(ErrorCode.COORDINATOR_NOT_AVAILABLE), 2 * INTERVAL + 6)
    retry_at = m.next_wakeup_ms()
    assert retry_at is not None
    full = send(m, retry_at).request
    assert full.HasField("capacity") and full.HasField("rack")


def test_undeclared_capacity_and_rack_are_never_sent() -> None:
    m = member()
    m.join(0)
    req = send(m, 0).request
    assert not req.HasField("capacity") and not req.HasField("rack")
    m.set_rack(1, None)
    assert m.rack is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity: must be a number from 1e-06 to 1e+06"),
        ({"capacity": -1.0}, "capacity: must be a number from 1e-06 to 1e+06"),
        ({"capacity": math.inf}, "capacity: must be a number from 1e-06 to 1e+06"),
        ({"capacity": 2e6}, "capacity: must be a number from 1e-06 to 1e+06 (default 1.0), got 2000000.0"),
        ({"capacity": 1e-7}, "capacity: must be a number from 1e-06 to 1e+06"),
        ({"rack": "r" * 256}, "rack: at most 255 bytes, got 256"),
        ({"rack": "a\nb"}, "rack: no control characters"),
        ({"load_report_threshold": -0.1}, "load_report_threshold"),
        ({"load_report_interval_ms": -1}, "load_report_interval_ms"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        member(**kwargs)


# ---- the table and the meter ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf, "12", None, True])
def test_bad_loads_are_a_value_error_naming_the_item(bad: object) -> None:
    table = LoadTable()
    with pytest.raises(ValueError, match="load of orders-3: "):
        table.set(TaskId("orders", 3), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="load of orders: "):
        table.update({"ok": 1.0, "orders": bad})  # type: ignore[dict-item]
    assert len(table) == 0, "nothing set when one is bad"


@pytest.mark.parametrize("bad", ["", TaskId("", 1), TaskId("a", -1)])
def test_bad_items_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="item"):
        LoadTable().set(bad, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a connector name"):
        LoadTable().set(("a", 1), 1.0)  # type: ignore[arg-type]


def test_the_table_keeps_values_and_meters_and_drops_stopped_items() -> None:
    now = [0.0]
    table = LoadTable()
    table.set("a", 1.0)
    meter = table.meter(TaskId("a", 0), window_s=10.0, clock=lambda: now[0])
    assert table.meter(TaskId("a", 0)) is meter, "one meter per item"
    now[0] = 2.0
    meter.record(20)
    assert table.snapshot() == {"a": 1.0, TaskId("a", 0): 10.0}
    assert table.snapshot(only=items("a")) == {"a": 1.0}
    table.set(TaskId("a", 0), 3.0)  # a value replaces the meter
    assert table.get(TaskId("a", 0)) == 3.0
    table.discard(items("a", "a-0"))
    assert len(table) == 0


def test_the_meter_is_the_mean_rate_while_warming_up_then_a_moving_average() -> None:
    now = [0.0]
    meter = LoadMeter(window_s=10.0, clock=lambda: now[0])
    assert meter.rate() == 0.0
    for _ in range(10):  # 100 units per second for 10 s
        now[0] += 1.0
        meter.record(100)
    assert meter.rate() == pytest.approx(100.0)
    for _ in range(60):  # then 300 per second for a minute: the average follows
        now[0] += 1.0
        meter.record(300)
    assert meter.rate() == pytest.approx(300.0, rel=0.01)
    for _ in range(10):  # then nothing for one window: down to about exp(-1) of it
        now[0] += 1.0
        assert meter.rate() < 300.0
    assert meter.rate() == pytest.approx(300.0 * math.exp(-1.0), rel=0.05)
    with pytest.raises(ValueError, match="amount"):
        meter.record(-1)


def test_a_metered_load_is_reported_when_its_rate_moves() -> None:
    now = [0.0]
    m = joined_running(items("a-0"), {})
    meter = m.loads.meter(TaskId("a", 0), window_s=5.0, clock=lambda: now[0] / 1000)
    t = 0
    for _ in range(10):  # 50 per second
        t += INTERVAL
        now[0] = t
        meter.record(50)
        req = heartbeat(m, t)
        if m.load_reporter.reports == 1 and loads_of(req) is not None:
            assert loads_of(req) == {"a-0": pytest.approx(50.0)}
    assert m.load_reporter.reports == 1, "reported once after the join, then steady"
    for _ in range(40):  # 200 per second: reported once the interval allows, not every heartbeat
        t += INTERVAL
        now[0] = t
        meter.record(200)
        heartbeat(m, t)
    assert m.load_reporter.reports == 2
    reported = m.load_reporter.reported
    assert reported is not None and reported[TaskId("a", 0)] > 55.0


def test_reporter_rules_without_a_member() -> None:
    r = LoadReporter(threshold=0.1, interval_ms=1_000)
    assert not r.due(0, {}), "nothing to report"
    assert r.due(0, {"a": 1.0}), "the first report: at once"
    r.sent(1, {"a": 1.0}, 0)
    r.acked(2)  # another heartbeat's success: not this report's
    assert r.reports == 0 and r.reported is None
    r.acked(1)
    assert r.reported == {"a": 1.0} and not r.due(999, {"a": 5.0}) and r.due(1_000, {"a": 5.0})
    assert not r.due(1_000, {"a": 1.09}) and r.due(1_000, {"a": 1.11})
    r.reset()
    assert r.due(1, {"a": 1.0}), "after a rejoin: at once again"
