"""DescribeGroups says why: items being revoked (since when, fenced by when), pending items and who
holds them, work held for a fenced member or for the delayed rebalance, the assignment in flight,
the last assignment error -- and which of these are volatile (gone or restarted after a restart)."""

from __future__ import annotations

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.assignor import AssignorState, LostWork
from services.common.items import Items
from tests.coordinator.harness import TEST_CONFIG, Context, items

REBALANCE_TIMEOUT = 30_000  # what the harness's workers send
W1_ITEMS = items("AC0", "AT0")
W2_ITEMS = items("AT1", "BC0")
T0 = 1_000_000


def describe(ctx: Context) -> admin_pb2.DescribedGroup:
    return ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=["g"])).groups[0]


def member(g: admin_pb2.DescribedGroup, mid: str) -> admin_pb2.DescribedMember:
    return next(m for m in g.members if m.member_id == mid)


def held(g: admin_pb2.DescribedGroup) -> list[tuple[str, str, str, Items, int]]:
    return [(h.reason, h.member_id, h.instance_id, Items.from_proto(h.items), h.until_ms) for h in g.held]


def holders(m: admin_pb2.DescribedMember) -> list[tuple[str, bool, Items]]:
    return [(h.member_id, h.fenced, Items.from_proto(h.items)) for h in m.pending_holders]


def epoch(ctx: Context, mid: str) -> int:
    return ctx.group().members[mid].member_epoch


def stable(ctx: Context) -> Context:
    """W1 (A, A-0) and W2 (A-1, B), converged; W1 computes assignments (client-side mode)."""
    ctx.now = T0
    ctx.put_connector("A", 2)
    ctx.put_connector("B", 0)
    ctx.join("W1")
    ctx.join("W2")
    ctx.compute("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS})
    ctx.converge()
    return ctx


def test_a_stable_group_has_nothing_to_explain() -> None:
    g = describe(stable(Context()))
    assert g.group_state == "Stable"
    assert list(g.held) == [] and not g.HasField("assignment_in_flight") and not g.HasField("last_assignment_error")
    assert g.scheduled_rebalance_ms == 0
    for m in g.members:
        assert Items.from_proto(m.revoking) == Items() and m.revoking_since_ms == 0 and m.revocation_deadline_ms == 0
        assert list(m.pending_holders) == []
        # Every member of `stable` heartbeat last at T0 (the harness clock does not move while converging).
        assert m.session_expires_ms == T0 + TEST_CONFIG.session_timeout_ms


def test_assignment_in_flight_then_revoking_then_pending_with_its_holder() -> None:
    ctx = stable(Context())
    ctx.now += 1_000
    ctx.join("W3")
    g = describe(ctx)
    assert g.group_state == "Assigning"
    f = g.assignment_in_flight
    assert (f.executor, f.started_ms, f.deadline_ms) == ("W1", ctx.now, ctx.now + REBALANCE_TIMEOUT)

    ctx.now += 1_000
    ctx.compute("W1", {"W1": items("AC0"), "W2": W2_ITEMS, "W3": items("AT0")})
    asked_at = ctx.now
    ctx.heartbeat("W1", epoch(ctx, "W1"), owned=W1_ITEMS)  # told to revoke A-0
    ctx.now += 500
    ctx.heartbeat("W3", epoch(ctx, "W3"), owned=Items())  # waits for A-0
    g = describe(ctx)
    assert not g.HasField("assignment_in_flight")
    w1, w3 = member(g, "W1"), member(g, "W3")
    assert Items.from_proto(w1.revoking) == items("AT0")
    assert (w1.revoking_since_ms, w1.revocation_deadline_ms) == (asked_at, asked_at + REBALANCE_TIMEOUT)
    assert Items.from_proto(w3.pending) == items("AT0")
    assert holders(w3) == [("W1", False, items("AT0"))]
    assert list(member(g, "W2").pending_holders) == []

    # After a restart, the revocation deadline (and its "since") count from the load: volatile.
    ctx.now += 5_000
    ctx.restart()
    w1 = member(describe(ctx), "W1")
    assert (w1.revoking_since_ms, w1.revocation_deadline_ms) == (ctx.now, ctx.now + REBALANCE_TIMEOUT)


def test_work_of_a_fenced_member_is_held_until_its_session_would_have_expired() -> None:
    ctx = stable(Context())
    session_end = ctx.group().members["W2"].session_deadline_ms
    ctx.now += 2_000
    r = ctx.heartbeat("W2", 99, owned=W2_ITEMS)  # a wrong epoch: fenced, its work held
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    g = describe(ctx)
    assert held(g) == [("fenced", "W2", "", W2_ITEMS, session_end)]
    # The new target gives W2's work to W1, which waits for it: held for the fenced member.
    ctx.compute("W1", {"W1": W1_ITEMS | W2_ITEMS})
    ctx.heartbeat("W1", epoch(ctx, "W1"), owned=W1_ITEMS)
    w1 = member(describe(ctx), "W1")
    assert holders(w1) == [("W2", True, W2_ITEMS)]
    ctx.sleep(session_end - ctx.now)
    assert held(describe(ctx)) == []


def test_work_of_a_departed_member_is_held_for_the_delayed_rebalance() -> None:
    ctx = stable(Context())
    ctx.now += 1_000
    assert ctx.heartbeat("W2", -1).error_code == ErrorCode.NONE  # leaves; its work is lost
    state = AssignorState(
        delay_start_ms=ctx.now, lost=(LostWork("W2", "worker-2", W2_ITEMS),), candidates=frozenset({"W1"})
    )
    ctx.prepare("W1")
    ctx.install("W1", {"W1": W1_ITEMS}, delay_ms=10_000, assignor_state=state.encode())
    # (the harness installs as "incremental-cooperative", the assignor every member chose)
    g = describe(ctx)
    assert g.scheduled_rebalance_ms == ctx.now + 10_000
    assert held(g) == [("delayed_rebalance", "W2", "worker-2", W2_ITEMS, ctx.now + 10_000)]
    # The delayed rebalance fires: a new assignment is asked for, nothing is held any more.
    ctx.sleep(10_000)
    g = describe(ctx)
    assert g.scheduled_rebalance_ms == 0 and held(g) == []
    assert g.assignment_in_flight.executor == "W1"


def test_an_assignor_whose_state_does_not_say_whose_work_is_held_still_shows_the_items() -> None:
    ctx = stable(Context())
    ctx.now += 1_000
    ctx.heartbeat("W2", -1)
    ctx.prepare("W1")
    ctx.install("W1", {"W1": W1_ITEMS}, delay_ms=4_000)  # no assignor state
    assert held(describe(ctx)) == [("delayed_rebalance", "", "", W2_ITEMS, ctx.now + 4_000)]


def test_the_last_assignment_error_is_shown_with_its_time_and_forgotten_at_a_restart() -> None:
    ctx = stable(Context())
    ctx.now += 1_000
    ctx.join("W3")
    ctx.prepare("W1")
    failed_at = ctx.now
    r = ctx.install("W1", {"W1": W1_ITEMS, "W3": W1_ITEMS})  # A twice: invalid
    assert r.error_code == ErrorCode.INVALID_ASSIGNMENT
    g = describe(ctx)
    e = g.last_assignment_error
    assert (e.executor, e.time_ms) == ("W1", failed_at) and e.message.startswith("invalid assignment: ")
    assert not g.HasField("assignment_in_flight")  # backing off
    assert g.group_state == "Assigning"

    # The executor does not install in time: another error replaces it.
    ctx.sleep(TEST_CONFIG.assignment_retry_backoff_ms)
    g = describe(ctx)
    executor = g.assignment_in_flight.executor
    ctx.sleep(REBALANCE_TIMEOUT)
    e = describe(ctx).last_assignment_error
    assert (e.executor, e.message, e.time_ms) == (executor, "executor did not install in time", ctx.now)

    ctx.restart()
    assert not describe(ctx).HasField("last_assignment_error")


def test_a_failed_call_to_the_assignor_service_names_the_service() -> None:
    ctx = Context(service_assignors={"incremental-cooperative": (1, 2)})
    ctx.now = T0
    ctx.put_connector("A", 1)
    ctx.join("W1")
    g = describe(ctx)
    assert g.assignment_in_flight.executor == "service"
    assert g.assignment_in_flight.deadline_ms == T0 + TEST_CONFIG.assignor_timeout_ms
    call = ctx.service_calls()[0]
    ctx._apply(ctx.coordinator.fail_service_assignment("g", call.group_epoch, "assignor service: UNAVAILABLE", ctx.now))
    e = describe(ctx).last_assignment_error
    assert (e.executor, e.message, e.time_ms) == ("service", "assignor service: UNAVAILABLE", T0)
