"""The sans-I/O member state machine, one transition at a time (virtual time, no I/O)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from tests.worker.helpers import error, items, response
from worker_sdk import (
    AssignmentOutcome,
    ClientAssignor,
    Effect,
    Member,
    MemberConfig,
    MemberState,
    OutgoingHeartbeat,
    RebalanceCompleted,
    StateChanged,
)

INTERVAL = 1_000
SESSION = 10_000
MARGIN = 2_000  # max(interval, 20% of session)


def new_member(**overrides: object) -> Member:
    config = MemberConfig(group_id="g", **overrides)  # type: ignore[arg-type]
    return Member(config, rng=random.Random(7))


def send(m: Member, now: int) -> OutgoingHeartbeat:
    out = m.poll_heartbeat(now)
    assert out is not None, f"expected a heartbeat at {now} in state {m.state}"
    return out


def run_effect(m: Member, now: int) -> Effect:
    eff = m.poll_effect(now)
    assert eff is not None, f"expected an effect in state {m.state}"
    m.effect_done(eff.seq, now)
    return eff


def joined(assigned: Items = EMPTY, **overrides: object) -> Member:
    """A member that joined at t=0 and runs `assigned` (acknowledged at t=0)."""
    m = new_member(**overrides)
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response(assigned=assigned), 0)
    if assigned:
        run_effect(m, 0)
        ack = send(m, 0)
        m.on_heartbeat_response(ack.seq, response(), 0)
    assert m.state == MemberState.STABLE
    assert m.running == assigned
    m.drain_events()
    return m


# ---- joining ----------------------------------------------------------------------------------


def test_join_sends_a_full_request_with_epoch_zero_and_empty_member_id() -> None:
    m = new_member(instance_id="i1", url="http://w1", client_id="c1", rebalance_timeout_ms=5_000)
    assert m.state == MemberState.UNSUBSCRIBED
    assert m.poll_heartbeat(0) is None
    m.join(0)
    assert m.state == MemberState.JOINING
    out = send(m, 0)
    req = out.request
    assert out.full
    assert (req.group_id, req.member_id, req.member_epoch) == ("g", "", 0)
    assert req.rebalance_timeout_ms == 5_000
    assert [(a.name, a.minimum_version, a.maximum_version, a.version) for a in req.client_assignors.assignors] == [
        ("incremental-cooperative", 1, 2, 2),
        ("eager", 0, 0, 0),
    ]
    assert req.HasField("owned") and not req.owned.connectors and not req.owned.tasks
    assert (req.instance_id, req.url, req.client_id) == ("i1", "http://w1", "c1")
    assert m.poll_heartbeat(0) is None, "one heartbeat in flight at a time"


def test_join_response_sets_identity_interval_and_session() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response("m1", 3, interval=700, session=9_000, assigned=EMPTY), 5)
    assert m.state == MemberState.STABLE
    assert (m.member_id, m.member_epoch, m.heartbeat_interval_ms, m.session_timeout_ms) == ("m1", 3, 700, 9_000)
    assert m.poll_effect(5) is None
    # The interval counts from when the request was sent.
    assert m.next_wakeup_ms() == 700
    assert m.poll_heartbeat(699) is None
    assert send(m, 700).request.member_epoch == 3


def test_steady_heartbeats_are_partial() -> None:
    m = joined(items("a", "a-0"), instance_id="i1", url="u")
    req = send(m, INTERVAL).request
    assert (req.member_id, req.member_epoch) == ("m1", 1)
    for f in ("instance_id", "url", "rebalance_timeout_ms", "client_assignors", "owned", "client_id"):
        assert not req.HasField(f), f


def test_changed_assignors_are_sent_at_once_and_only_them() -> None:
    m = joined()
    m.set_assignors(10, (ClientAssignor("incremental-cooperative", 1, 2, 2, reason=1),))
    req = send(m, 10).request
    assert [a.reason for a in req.client_assignors.assignors] == [1]
    assert not req.HasField("owned") and not req.HasField("rebalance_timeout_ms")


def test_the_join_is_a_rebalance_that_completes_when_the_assignment_runs() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), 10)
    run_effect(m, 30)
    ack = send(m, 30)
    m.on_heartbeat_response(ack.seq, response(), 40)
    done = [e for e in m.drain_events() if isinstance(e, RebalanceCompleted)]
    assert done == [RebalanceCompleted(0, 40, False, "join: reconciled")]


# ---- reconciliation ---------------------------------------------------------------------------


def test_assignment_is_started_then_acknowledged_at_once() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(epoch=2, assigned=items("a", "a-0")), INTERVAL + 5)
    assert m.state == MemberState.RECONCILING
    eff = m.poll_effect(INTERVAL + 5)
    assert eff is not None
    assert (eff.lost, eff.revoked, eff.assigned) == (EMPTY, EMPTY, items("a", "a-0"))
    assert m.owned == items("a", "a-0"), "what is being started is owned"
    assert m.running == EMPTY
    assert m.poll_effect(INTERVAL + 6) is None, "one effect at a time"
    m.effect_done(eff.seq, INTERVAL + 50)
    assert m.state == MemberState.ACKNOWLEDGING
    ack = send(m, INTERVAL + 50)  # not waiting for the interval
    assert m.state == MemberState.STABLE
    assert Items.from_proto(ack.request.owned) == items("a", "a-0")
    assert ack.request.member_epoch == 2


def test_revocation_stops_first_and_is_acknowledged_by_the_next_heartbeat_sent_immediately() -> None:
    m = joined(items("a", "a-0", "a-1"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(assigned=items("a", "a-0")), INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None and eff.revoked == items("a-1") and not eff.assigned
    # While the stop runs the item is still owned; a regular heartbeat may go out meanwhile.
    assert m.owned == items("a", "a-0", "a-1")
    mid = send(m, 2 * INTERVAL)
    assert not mid.request.HasField("owned"), "owned did not change yet"
    m.on_heartbeat_response(mid.seq, response(), 2 * INTERVAL)
    m.effect_done(eff.seq, 2 * INTERVAL + 100)
    ack = send(m, 2 * INTERVAL + 100)
    assert Items.from_proto(ack.request.owned) == items("a", "a-0")


def test_ack_waits_for_the_heartbeat_in_flight_then_goes_at_once() -> None:
    m = joined(items("a", "b"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None
    inflight = send(m, 2 * INTERVAL)
    m.effect_done(eff.seq, 2 * INTERVAL + 1)
    assert m.poll_heartbeat(2 * INTERVAL + 1) is None
    m.on_heartbeat_response(inflight.seq, response(), 2 * INTERVAL + 10)
    ack = send(m, 2 * INTERVAL + 10)
    assert Items.from_proto(ack.request.owned) == items("a")


def test_revoke_and_assign_in_one_response_revokes_first() -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(assigned=items("b")), INTERVAL)
    first = run_effect(m, INTERVAL)
    assert (first.revoked, first.assigned) == (items("a"), EMPTY)
    second = run_effect(m, INTERVAL)
    assert (second.revoked, second.assigned) == (EMPTY, items("b"))
    assert m.running == items("b")


def test_assignment_arriving_during_an_effect_is_applied_after_it() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(epoch=2, assigned=items("a")), INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, response(epoch=3, assigned=items("a", "b")), 2 * INTERVAL)
    assert m.poll_effect(2 * INTERVAL) is None
    m.effect_done(eff.seq, 2 * INTERVAL + 1)
    assert m.state == MemberState.RECONCILING
    assert run_effect(m, 2 * INTERVAL + 1).assigned == items("b")
    assert m.state == MemberState.ACKNOWLEDGING


def test_pending_items_are_exposed_and_never_started() -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(epoch=2, assigned=items("a"), pending=items("b", "b-0")), INTERVAL)
    assert m.pending == items("b", "b-0")
    assert m.poll_effect(INTERVAL) is None
    assert m.state == MemberState.STABLE
    # Released later: now it is assigned.
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, response(epoch=2, assigned=items("a", "b", "b-0")), 2 * INTERVAL)
    assert m.pending == EMPTY
    assert run_effect(m, 2 * INTERVAL).assigned == items("b", "b-0")


def test_response_without_assignment_changes_nothing() -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(epoch=1), INTERVAL)
    assert m.poll_effect(INTERVAL) is None
    assert m.assigned == items("a") and m.running == items("a")


# ---- errors, retries, not-understood responses ----------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.STALE_MEMBER_EPOCH,
        4242,  # a code this client does not know
    ],
)
def test_retriable_or_unknown_errors_back_off_then_send_a_full_request(code: int) -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(code, "boom"), INTERVAL)
    assert m.state == MemberState.STABLE and m.running == items("a"), "errors do not disturb the work"
    assert m.poll_heartbeat(INTERVAL) is None, "backs off"
    wake = m.next_wakeup_ms()
    assert wake is not None and INTERVAL + 80 <= wake <= INTERVAL + 120  # 100 ms +-20%
    retry = send(m, wake)
    assert retry.full
    req = retry.request
    assert (req.member_id, req.member_epoch) == ("m1", 1)
    assert req.HasField("rebalance_timeout_ms") and req.HasField("client_assignors")
    assert Items.from_proto(req.owned) == items("a")


def test_transport_failures_back_off_exponentially_with_a_cap() -> None:
    m = joined()
    now = INTERVAL
    delays = []
    for _ in range(6):
        out = send(m, now)
        m.on_heartbeat_failure(out.seq, now, "UNAVAILABLE")
        wake = m.next_wakeup_ms()
        assert wake is not None
        delays.append(wake - now)
        now = wake
    for d, base in zip(delays, [100, 200, 400, 800, 1000, 1000], strict=True):
        assert base * 0.8 <= d <= base * 1.2
    out = send(m, now)
    m.on_heartbeat_response(out.seq, response(), now)
    out2 = send(m, now + INTERVAL)
    m.on_heartbeat_failure(out2.seq, now + INTERVAL, "UNAVAILABLE")
    wake = m.next_wakeup_ms()
    assert wake is not None and wake - (now + INTERVAL) <= 120, "a success resets the backoff"


def test_backoff_jitter_is_deterministic_for_a_seed() -> None:
    def delays(seed: int) -> list[int]:
        m = Member(MemberConfig(group_id="g"), rng=random.Random(seed))
        m.join(0)
        now, out_delays = 0, []
        for _ in range(5):
            out = send(m, now)
            m.on_heartbeat_failure(out.seq, now, "x")
            wake = m.next_wakeup_ms()
            assert wake is not None
            out_delays.append(wake - now)
            now = wake
        return out_delays

    assert delays(1) == delays(1)
    assert delays(1) != delays(2)


def test_request_timeout_is_a_failure_and_a_late_answer_is_ignored() -> None:
    m = joined(items("a"), request_timeout_ms=1_500)
    out = send(m, INTERVAL)
    assert out.timeout_ms == 1_500
    m.tick(INTERVAL + 1_500)
    assert m.in_flight is None
    m.on_heartbeat_response(out.seq, response(epoch=9, assigned=EMPTY), INTERVAL + 1_600)
    assert m.member_epoch == 1 and m.assigned == items("a"), "the answer to a timed-out request is ignored"
    retry = m.poll_heartbeat(INTERVAL + 5_000)
    assert retry is not None and retry.full


def test_request_timeout_is_capped_at_half_the_session() -> None:
    m = joined(request_timeout_ms=30_000)
    assert send(m, INTERVAL).timeout_ms == SESSION // 2


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.assignment.pending.connectors.append("a"),  # both assigned and pending
        lambda r: r.assignment.assigned.tasks.add(connector="a", task=-1),
        lambda r: r.assignment.assigned.tasks.add(connector="", task=0),
        lambda r: r.assignment.assigned.connectors.append(""),
        lambda r: setattr(r, "member_id", ""),
        lambda r: setattr(r, "member_epoch", -5),
    ],
)
def test_malformed_response_is_an_error_and_nothing_of_it_is_applied(mutate: Callable[[Any], None]) -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    bad = response(epoch=2, assigned=items("a", "b"))
    mutate(bad)
    m.on_heartbeat_response(out.seq, bad, INTERVAL)
    assert m.member_epoch == 1 and m.assigned == items("a") and m.poll_effect(INTERVAL) is None
    wake = m.next_wakeup_ms()
    assert wake is not None
    assert send(m, wake).full


def test_unreleased_instance_id_keeps_retrying_the_join() -> None:
    m = new_member(instance_id="i1")
    m.join(0)
    now = 0
    for _ in range(3):
        out = send(m, now)
        assert out.request.member_epoch == 0 and out.request.instance_id == "i1"
        m.on_heartbeat_response(out.seq, error(ErrorCode.UNRELEASED_INSTANCE_ID), now)
        assert m.state == MemberState.JOINING
        wake = m.next_wakeup_ms()
        assert wake is not None and wake > now
        now = wake
    out = send(m, now)
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), now)
    assert m.state == MemberState.RECONCILING


def test_a_response_to_an_older_request_is_ignored() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq - 1, response(epoch=7), INTERVAL)
    assert m.in_flight is out and m.member_epoch == 1


# ---- fencing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fenced_loses_everything_then_rejoins_with_the_same_id_and_epoch_zero(code: int) -> None:
    m = joined(items("a", "a-0"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(code, "fenced"), INTERVAL)
    assert m.state == MemberState.FENCED
    assert m.poll_heartbeat(INTERVAL) is None, "no rejoin while work may still run"
    eff = m.poll_effect(INTERVAL)
    assert eff is not None
    assert (eff.lost, eff.revoked, eff.assigned) == (items("a", "a-0"), EMPTY, EMPTY)
    assert m.poll_heartbeat(INTERVAL + 500) is None
    m.effect_done(eff.seq, INTERVAL + 500)
    assert m.state == MemberState.JOINING
    rejoin = send(m, INTERVAL + 500)
    assert rejoin.full
    assert (rejoin.request.member_id, rejoin.request.member_epoch) == ("m1", 0)
    assert Items.from_proto(rejoin.request.owned) == EMPTY
    failed = [e for e in m.drain_events() if isinstance(e, RebalanceCompleted)]
    assert failed == [], "no rebalance was in progress"
    m.on_heartbeat_response(rejoin.seq, response("m1", 4, assigned=items("a")), INTERVAL + 510)
    assert m.state == MemberState.RECONCILING and m.member_epoch == 4


def test_fenced_during_an_effect_loses_after_it_including_what_it_started() -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(epoch=2, assigned=items("a", "b")), INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None and eff.assigned == items("b")
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, error(ErrorCode.FENCED_MEMBER_EPOCH), 2 * INTERVAL)
    assert m.state == MemberState.FENCED
    events = m.drain_events()
    assert any(isinstance(e, RebalanceCompleted) and e.failed for e in events)
    assert m.poll_effect(2 * INTERVAL) is None
    m.effect_done(eff.seq, 2 * INTERVAL + 5)
    lost = run_effect(m, 2 * INTERVAL + 5)
    assert lost.lost == items("a", "b")
    assert m.state == MemberState.JOINING and m.running == EMPTY


def test_fenced_with_nothing_running_rejoins_at_once() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(ErrorCode.UNKNOWN_MEMBER_ID), INTERVAL)
    assert m.state == MemberState.JOINING
    assert send(m, INTERVAL).request.member_id == "m1"


# ---- session safety ---------------------------------------------------------------------------


def test_session_safety_stops_all_work_measured_from_the_last_successful_send() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    # Sent at 0, answered at 900: the window counts from 0.
    m.on_heartbeat_response(out.seq, response(assigned=items("a", "a-0")), 900)
    run_effect(m, 900)
    assert m.safety_deadline_ms() == SESSION - MARGIN
    t = 900
    while t < SESSION - MARGIN:  # the coordinator is gone: every heartbeat fails
        hb = m.poll_heartbeat(t)
        if hb is not None:
            m.on_heartbeat_failure(hb.seq, t, "UNAVAILABLE")
        assert m.poll_effect(t) is None, f"stopped too early at {t}"
        t += 50
    eff = m.poll_effect(SESSION - MARGIN)
    assert eff is not None and eff.lost == items("a", "a-0")
    assert m.assigned == EMPTY
    m.effect_done(eff.seq, SESSION - MARGIN + 10)
    assert m.running == EMPTY
    assert any(isinstance(e, RebalanceCompleted) and e.failed for e in m.drain_events())


def test_session_safety_margin_is_at_least_one_interval() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response(interval=2_500, session=10_000, assigned=items("a")), 0)
    assert m.safety_margin_ms() == 2_500
    assert m.safety_deadline_ms() == 7_500
    assert new_member(session_safety_margin_ms=123).safety_margin_ms() == 123


def test_after_a_safety_stop_a_later_success_restarts_the_work() -> None:
    m = joined(items("a"))
    m.tick(SESSION - MARGIN)
    run_effect(m, SESSION - MARGIN)
    assert m.running == EMPTY
    out = send(m, SESSION)
    assert out.full, "we do not know what the coordinator thinks: full request"
    assert Items.from_proto(out.request.owned) == EMPTY
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), SESSION + 5)
    assert run_effect(m, SESSION + 5).assigned == items("a")


def test_a_successful_response_arriving_after_the_window_is_not_trusted() -> None:
    m = joined()
    out = send(m, INTERVAL)
    late = INTERVAL + SESSION - MARGIN
    m.on_heartbeat_response(out.seq, response(epoch=2, assigned=items("a")), late)
    assert m.assigned == EMPTY and m.poll_effect(late) is None
    assert m.member_epoch == 2, "facts about the member are kept"
    wake = m.next_wakeup_ms()
    assert wake is not None and send(m, wake).full


def test_no_safety_stop_while_heartbeats_succeed() -> None:
    m = joined(items("a"))
    t = 0
    for _ in range(30):
        t += INTERVAL
        out = send(m, t)
        m.on_heartbeat_response(out.seq, response(), t + 10)
        assert m.poll_effect(t + 10) is None
    assert m.running == items("a")


# ---- client-side assignment -----------------------------------------------------------------


def test_compute_assignment_is_a_signal_and_the_rest_of_the_response_applies() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(
        out.seq, response(epoch=2, assigned=items("a"), code=ErrorCode.COMPUTE_ASSIGNMENT), INTERVAL
    )
    assert m.member_epoch == 2 and m.state == MemberState.RECONCILING
    task = m.poll_assignment_task(INTERVAL)
    assert task is not None and (task.group_id, task.member_id, task.member_epoch) == ("g", "m1", 2)
    # Asked again while computing: no second task.
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, response(epoch=2, code=ErrorCode.COMPUTE_ASSIGNMENT), 2 * INTERVAL)
    assert m.poll_assignment_task(2 * INTERVAL) is None
    m.assignment_task_done(task.seq, AssignmentOutcome.INSTALLED, 2 * INTERVAL + 5)
    assert m.poll_heartbeat(2 * INTERVAL + 5) is not None, "installed: heartbeat at once for the new target"


def test_stale_epoch_on_prepare_or_install_retries_after_the_next_heartbeat() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(code=ErrorCode.COMPUTE_ASSIGNMENT), INTERVAL)
    task = m.poll_assignment_task(INTERVAL)
    assert task is not None
    m.assignment_task_done(task.seq, AssignmentOutcome.RETRY, INTERVAL + 5)
    assert m.poll_assignment_task(INTERVAL + 5) is None
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, response(epoch=3), 2 * INTERVAL)
    again = m.poll_assignment_task(2 * INTERVAL)
    assert again is not None and again.member_epoch == 3


def test_abandoned_assignment_is_not_retried_unless_asked_again() -> None:
    m = joined()
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(code=ErrorCode.COMPUTE_ASSIGNMENT), INTERVAL)
    task = m.poll_assignment_task(INTERVAL)
    assert task is not None
    m.assignment_task_done(task.seq, AssignmentOutcome.ABANDONED, INTERVAL)
    hb = send(m, 2 * INTERVAL)
    m.on_heartbeat_response(hb.seq, response(), 2 * INTERVAL)
    assert m.poll_assignment_task(2 * INTERVAL) is None


# ---- leaving ----------------------------------------------------------------------------------


def test_close_revokes_everything_then_leaves_with_minus_one() -> None:
    m = joined(items("a", "a-0"))
    m.leave(100)
    assert m.state == MemberState.LEAVING
    assert m.poll_heartbeat(100) is None, "work first"
    eff = m.poll_effect(100)
    assert eff is not None and eff.revoked == items("a", "a-0") and not eff.lost
    m.effect_done(eff.seq, 300)
    out = send(m, 300)
    assert out.leave
    assert (out.request.member_id, out.request.member_epoch) == ("m1", -1)
    m.on_heartbeat_response(out.seq, response("m1", -1), 310)
    assert m.state == MemberState.UNSUBSCRIBED and m.closed
    assert m.member_id == "", "a later join is a new member"


def test_static_restart_leaves_with_minus_two_and_the_instance_id() -> None:
    with pytest.raises(ValueError):
        joined().leave(0, temporary=True)
    m = joined(items("a"), instance_id="i1")
    m.leave(100, temporary=True)
    run_effect(m, 100)
    out = send(m, 100)
    assert (out.request.member_epoch, out.request.instance_id) == (-2, "i1")
    m.on_heartbeat_failure(out.seq, 101, "UNAVAILABLE")
    assert m.state == MemberState.LEAVING, "a failed leave is retried"
    wake = m.next_wakeup_ms()
    assert wake is not None
    out = send(m, wake)
    m.on_heartbeat_response(out.seq, response("m1", -2), wake)
    assert m.closed


def test_leave_gives_up_after_max_attempts() -> None:
    m = joined(max_leave_attempts=2)
    m.leave(0)
    now = 0
    for _ in range(2):
        out = send(m, now)
        m.on_heartbeat_failure(out.seq, now, "UNAVAILABLE")
        now = m.next_wakeup_ms() or now
    assert m.closed


def test_leave_while_the_join_is_in_flight_waits_for_the_member_id() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.leave(5)
    assert m.state == MemberState.LEAVING
    m.on_heartbeat_response(out.seq, response("m9", 1, assigned=items("a")), 10)
    assert m.poll_effect(10) is None, "nothing starts while leaving"
    leave = send(m, 10)
    assert (leave.request.member_id, leave.request.member_epoch) == ("m9", -1)


def test_leave_before_joining_is_immediate() -> None:
    m = new_member()
    m.join(0)
    m.leave(0)
    assert m.closed and m.poll_heartbeat(0) is None


def test_fenced_while_leaving_stops_the_work_and_sends_no_leave() -> None:
    m = joined(items("a"))
    hb = send(m, INTERVAL)
    m.leave(INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None and eff.revoked == items("a")
    m.on_heartbeat_response(hb.seq, error(ErrorCode.FENCED_MEMBER_EPOCH), INTERVAL + 1)
    m.effect_done(eff.seq, INTERVAL + 2)
    assert m.poll_effect(INTERVAL + 2) is None
    assert m.poll_heartbeat(INTERVAL + 2) is None
    assert m.closed


# ---- fatal errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
    ],
)
def test_fatal_errors_stop_the_work_and_end_the_membership(code: int) -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(code, "nope"), INTERVAL)
    assert m.state == MemberState.FATAL
    assert m.fatal_error == (code, "nope")
    assert run_effect(m, INTERVAL).lost == items("a")
    assert m.poll_heartbeat(INTERVAL + 10_000) is None
    assert m.closed
    with pytest.raises(RuntimeError):
        m.join(INTERVAL)


# ---- bookkeeping ------------------------------------------------------------------------------


def test_state_changes_are_reported_as_events() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), 0)
    run_effect(m, 0)
    send(m, 0)
    states = [(e.old, e.new) for e in m.drain_events() if isinstance(e, StateChanged)]
    assert states == [
        (MemberState.UNSUBSCRIBED, MemberState.JOINING),
        (MemberState.JOINING, MemberState.STABLE),
        (MemberState.STABLE, MemberState.RECONCILING),
        (MemberState.RECONCILING, MemberState.ACKNOWLEDGING),
        (MemberState.ACKNOWLEDGING, MemberState.STABLE),
    ]


def test_next_wakeup_covers_heartbeat_timeout_and_safety_deadline() -> None:
    m = new_member()
    assert m.next_wakeup_ms() is None
    m.join(0)
    out = send(m, 0)
    assert m.next_wakeup_ms() == out.timeout_ms
    m.on_heartbeat_response(out.seq, response(assigned=items("a")), 0)
    run_effect(m, 0)
    ack = send(m, 0)
    m.on_heartbeat_response(ack.seq, response(), 0)
    assert m.next_wakeup_ms() == INTERVAL
    hb = send(m, INTERVAL)
    m.on_heartbeat_failure(hb.seq, INTERVAL, "x")
    # Safety deadline 8000 (sent at 0) is later than the retry.
    wake = m.next_wakeup_ms()
    assert wake is not None and wake < 2 * INTERVAL


def test_effect_done_for_an_unknown_effect_is_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        joined().effect_done(99, 0)


def test_no_wakeup_in_the_past_while_a_leave_waits_for_a_slow_stop() -> None:
    m = joined(items("a"))
    hb = send(m, INTERVAL)
    m.leave(INTERVAL)
    eff = m.poll_effect(INTERVAL)
    assert eff is not None
    m.on_heartbeat_failure(hb.seq, INTERVAL + 1, "UNAVAILABLE")
    wake = m.next_wakeup_ms()
    assert wake is None or wake > INTERVAL + 1, "nothing can be sent until the stop is done: no busy loop"
    assert m.poll_heartbeat(INTERVAL + 3_000) is None
    m.effect_done(eff.seq, INTERVAL + 3_000)
    out = send(m, INTERVAL + 3_000)
    assert out.leave


def test_heartbeats_at_epoch_zero_are_full_since_the_coordinator_may_take_them_for_a_join() -> None:
    m = new_member()
    m.join(0)
    out = send(m, 0)
    # Joined, but no target assignment yet: still at epoch 0.
    m.on_heartbeat_response(out.seq, response(epoch=0, assigned=EMPTY), 0)
    assert m.state == MemberState.STABLE and m.member_epoch == 0
    hb = send(m, INTERVAL)
    assert hb.full and hb.request.member_epoch == 0 and hb.request.member_id == "m1"


def test_a_late_duplicate_answer_with_an_assignment_makes_the_next_heartbeat_full() -> None:
    m = joined(items("a"))
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, response(), INTERVAL + 5)  # the first copy's answer: nothing new
    # The second copy's answer carried a released item; it arrives after the request is done.
    m.on_heartbeat_response(out.seq, response(assigned=items("a", "b")), INTERVAL + 6)
    assert m.assigned == items("a"), "an answer to a request no longer in flight is not applied"
    nxt = send(m, INTERVAL + 6)
    assert nxt.full, "the coordinator may think we were told: ask again"
    m.on_heartbeat_response(nxt.seq, response(assigned=items("a", "b")), INTERVAL + 10)
    assert run_effect(m, INTERVAL + 10).assigned == items("b")


def test_a_partial_heartbeat_sent_before_a_safety_stop_does_not_end_the_resync() -> None:
    # Found by the simulator (seed 556): the answer to a heartbeat sent before the stop cleared the
    # need for a full request; the coordinator still counted the work as ours, the worker ran none.
    m = joined(items("b", "b-1"), session_safety_margin_ms=6_000)  # safety window 4 s from t=0
    slow = send(m, INTERVAL)
    assert not slow.full
    m.tick(4_000)
    lost = run_effect(m, 4_010)
    assert lost.lost == items("b", "b-1")
    # The slow request's answer: fresh for its own send time, and without an assignment (nothing
    # changed as far as the coordinator knows).
    m.on_heartbeat_response(slow.seq, response(), 4_500)
    nxt = send(m, 4_500)
    assert nxt.full, "the coordinator must be told, in full, that nothing runs"
    m.on_heartbeat_response(nxt.seq, response(assigned=items("b", "b-1")), 4_510)
    assert run_effect(m, 4_510).assigned == items("b", "b-1")


def test_every_heartbeat_carries_a_strictly_increasing_request_sequence() -> None:
    """The coordinator uses it to drop delayed or duplicated copies of older heartbeats."""
    m = new_member()
    m.join(0)
    sequences = []
    now = 0
    out = send(m, now)
    sequences.append(out.request.request_sequence)
    m.on_heartbeat_response(out.seq, response(), now)
    for _ in range(3):
        now += INTERVAL
        out = send(m, now)
        assert out.request.HasField("request_sequence") and out.request.request_sequence == out.seq
        sequences.append(out.request.request_sequence)
        m.on_heartbeat_response(out.seq, response(), now)
    m.leave(now)
    out = send(m, now)
    sequences.append(out.request.request_sequence)
    assert out.request.member_epoch == -1
    assert sequences == sorted(set(sequences)) and len(sequences) == 5


def test_a_duplicate_sequence_answer_is_retried_with_a_full_request() -> None:
    """The coordinator processed the original copy; its answer was lost and the copy's answer came
    back: stay in the group and resynchronise."""
    m = new_member()
    m.join(0)
    out = send(m, 0)
    m.on_heartbeat_response(out.seq, response(), 0)
    out = send(m, INTERVAL)
    m.on_heartbeat_response(out.seq, error(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "copy"), INTERVAL)
    assert m.state not in ("fatal", "fenced") and m.member_id == "m1"
    out = send(m, INTERVAL * 3)
    assert out.full and out.request.HasField("owned") and out.request.request_sequence > 2
