"""Properties of the member under arbitrary outcomes: whatever the coordinator (or the network)
answers -- any error code, any assignment, late, lost, out of order -- the member never crashes,
never busy-loops, keeps one heartbeat in flight and one effect outstanding at most, never rejoins
or leaves while work may still run, and never starts work after its session-safety deadline."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from connect.coordinator.v1 import coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, TaskId
from worker_sdk import AssignmentOutcome, Member, MemberConfig, MemberState

CODES = [
    ErrorCode.NONE,
    ErrorCode.NONE,
    ErrorCode.NONE,
    ErrorCode.COMPUTE_ASSIGNMENT,
    ErrorCode.FENCED_MEMBER_EPOCH,
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNRELEASED_INSTANCE_ID,
    ErrorCode.STALE_MEMBER_EPOCH,
    ErrorCode.UNSUPPORTED_ASSIGNOR,
    4242,
]
POOL = ["a", "b", ("a", 0), ("a", 1), ("b", 0)]

items_st = st.sets(st.sampled_from(POOL)).map(
    lambda s: Items(
        frozenset(x for x in s if isinstance(x, str)), frozenset(TaskId(*x) for x in s if isinstance(x, tuple))
    )
)

step_st = st.one_of(
    st.tuples(st.just("advance"), st.integers(1, 3_000)),
    st.tuples(
        st.just("respond"),
        st.sampled_from(CODES),
        st.integers(-1, 9),
        st.one_of(st.none(), items_st),
        items_st,
        st.booleans(),
    ),
    st.tuples(st.just("fail")),
    st.tuples(st.just("finish_effect")),
    st.tuples(st.just("finish_task"), st.sampled_from(list(AssignmentOutcome))),
    st.tuples(st.just("leave"), st.booleans()),
)


def make_response(
    code: int, epoch: int, assigned: Items | None, pending: Items, malformed: bool
) -> coordinator_pb2.ConnectGroupHeartbeatResponse:
    r = coordinator_pb2.ConnectGroupHeartbeatResponse(
        error_code=code,  # type: ignore[arg-type]
        member_id="m1" if not malformed else "",
        member_epoch=epoch,
        heartbeat_interval_ms=500,
        session_timeout_ms=5_000,
    )
    if assigned is not None:
        assigned.to_proto(r.assignment.assigned)
        (pending - assigned).to_proto(r.assignment.pending)
    return r


@settings(max_examples=400, deadline=None)
@given(st.lists(step_st, max_size=60), st.booleans())
def test_member_survives_any_sequence_of_outcomes(steps: list[tuple[object, ...]], static: bool) -> None:
    m = Member(MemberConfig(group_id="g", instance_id="i1" if static else None), rng=random.Random(0))
    now = 0
    m.join(now)
    effect = None
    task = None
    for step in steps:
        # The driver's loop: act on everything due, then the scripted outcome.
        new_effect = m.poll_effect(now)
        if new_effect is not None:
            assert effect is None, "a second effect while one is outstanding"
            effect = new_effect
            assert new_effect.assigned.issubset(m.assigned), "started something not assigned"
            assert new_effect.assigned.isdisjoint(m.pending), "started a pending item"
            assert not (new_effect.assigned and (new_effect.revoked or new_effect.lost)), "stop and start at once"
            if m.safety_deadline_ms() is not None and new_effect.assigned:
                assert now < m.safety_deadline_ms(), "work started after the session-safety deadline"  # type: ignore[operator]
        joining = m.state == MemberState.JOINING
        out = m.poll_heartbeat(now)
        if out is not None:
            req = out.request
            if out.leave:
                assert req.member_epoch in (-1, -2) and not m.owned, "left while work may still run"
            elif joining:
                assert req.member_epoch == 0 and out.full
                assert not m.owned, "(re)joined while work may still run"
        new_task = m.poll_assignment_task(now)
        if new_task is not None:
            assert task is None
            task = new_task
        wake = m.next_wakeup_ms()
        assert wake is None or wake > now, f"busy loop: wake-up {wake} at {now} in {m.state}"
        m.drain_events()

        kind = step[0]
        if kind == "advance":
            now += int(step[1])  # type: ignore[call-overload]
        elif kind == "respond" and m.in_flight is not None:
            _, code, epoch, assigned, pending, malformed = step
            m.on_heartbeat_response(m.in_flight.seq, make_response(code, epoch, assigned, pending, malformed), now)  # type: ignore[arg-type]
        elif kind == "fail" and m.in_flight is not None:
            m.on_heartbeat_failure(m.in_flight.seq, now, "UNAVAILABLE")
        elif kind == "finish_effect" and effect is not None:
            m.effect_done(effect.seq, now)
            effect = None
        elif kind == "finish_task" and task is not None:
            m.assignment_task_done(task.seq, step[1], now)  # type: ignore[arg-type]
            task = None
        elif kind == "leave":
            m.leave(now, temporary=bool(step[1]) and static)
        assert m.running.issubset(m.owned)
        if m.state in (MemberState.JOINING, MemberState.FENCED, MemberState.UNSUBSCRIBED):
            assert not m.assigned and not m.pending
