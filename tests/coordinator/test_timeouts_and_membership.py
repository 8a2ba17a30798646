"""Timers (session, rebalance/revocation, executor, retry backoff, delayed rebalance, retention),
membership (leave, static temporary leave and rejoin), group states, dynamic configs, the
'assignment only when it changed' rule, and recovery of timers after a restart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from connect.coordinator.v1 import admin_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from connect.coordinator.v1.coordinator_pb2 import ConnectGroupHeartbeatResponse
from services.common.items import Items
from services.coordinator.core.records import EventType
from tests.coordinator.harness import IC, TEST_CONFIG, Context, assignors_proto, items

SESSION = TEST_CONFIG.session_timeout_ms  # 45 s
MAX_SESSION = TEST_CONFIG.max_session_timeout_ms  # 60 s: the first session after a restart
REBALANCE_TIMEOUT = 30_000  # what the harness's workers send
W1_ITEMS = items("AC0", "AT0")
W2_ITEMS = items("AT1", "BC0")
ALL = W1_ITEMS | W2_ITEMS


def assigned(r: ConnectGroupHeartbeatResponse) -> Items:
    assert r.HasField("assignment"), r
    return Items.from_proto(r.assignment.assigned)


def pending(r: ConnectGroupHeartbeatResponse) -> Items:
    assert r.HasField("assignment"), r
    return Items.from_proto(r.assignment.pending)


def stable_group(ctx: Context | None = None, /, **join_kw: Mapping[str, Any]) -> Context:
    """W1 (A, A-0) and W2 (A-1, B), converged. W1 computed the target."""
    ctx = ctx or Context()
    ctx.put_connector("A", 2)
    ctx.put_connector("B", 0)
    ctx.join("W1", **join_kw.get("W1", {}))
    ctx.join("W2", **join_kw.get("W2", {}))
    ctx.compute("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    return ctx


def epoch_of(ctx: Context, mid: str) -> int:
    return ctx.group().members[mid].member_epoch


# ---- sessions --------------------------------------------------------------------------------------


def test_session_timeout_removes_a_silent_worker_and_frees_its_work_at_once() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    # Heartbeats keep a session alive indefinitely.
    ctx.keepalive(3 * SESSION, ["W1", "W2"])
    assert ctx.snapshot()["members"] == ["W1", "W2"] and ctx.group().epoch == e
    # W2 goes silent: still there one ms before its deadline, gone at it.
    last = ctx.now
    ctx.keepalive(SESSION - 1_000, ["W1"])
    ctx.sleep(last + SESSION - 1 - ctx.now)
    assert "W2" in ctx.group().members
    ctx.sleep(1)
    assert ctx.snapshot()["members"] == ["W1"] and ctx.group().epoch == e + 1
    assert [ev.member_id for ev in ctx.events(EventType.MEMBER_EXPIRED)] == ["W2"]
    assert ctx.group().held == {} and ctx.group().owner.keys() == set(W1_ITEMS.item_keys())
    # W1 computes and gets W2's work at once (nothing held).
    assert ctx.heartbeat("W1", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W1", {"W1": ALL})
    r = ctx.heartbeat("W1", e)
    assert r.member_epoch == e + 1 and assigned(r) == ALL and pending(r) == Items()
    # The expired worker's next heartbeat: unknown member; it must rejoin.
    assert ctx.heartbeat("W2", e).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    ctx.check_recovery()


# ---- rebalance timeout (revocation) ------------------------------------------------------------------


def test_rebalance_timeout_fences_a_worker_that_does_not_revoke() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    # W2 joins... no: a third worker joins and W1 must give A-0 to it.
    ctx.join("W3")
    ctx.compute("W1", {"W1": items("AC0"), "W2": W2_ITEMS, "W3": items("AT0")})
    r = ctx.heartbeat("W3", e)
    assert r.member_epoch == e + 1 and pending(r) == items("AT0")
    revoke_at = ctx.now
    r = ctx.heartbeat("W1", e)
    assert assigned(r) == items("AC0") and ctx.group().members["W1"].current.state == "UnrevokedItems"

    # W1 keeps heartbeating but never confirms (it still reports A-0): it stays at epoch e.
    last_w1 = ctx.now
    while ctx.now + 5_000 < revoke_at + REBALANCE_TIMEOUT:
        ctx.sleep(5_000)
        r = ctx.heartbeat("W1", e, owned=W1_ITEMS)
        assert r.error_code == ErrorCode.NONE and r.member_epoch == e and not r.HasField("assignment")
        last_w1 = ctx.now
        for mid in ("W2", "W3"):
            ctx.heartbeat(mid, epoch_of(ctx, mid), owned=ctx.group().members[mid].current.assigned)
    ctx.sleep(revoke_at + REBALANCE_TIMEOUT - 1 - ctx.now)
    assert "W1" in ctx.group().members
    ctx.sleep(1)
    # Fenced when the rebalance timeout expires: removed, epoch bump; its work is held (it may
    # still be running it) until its session would have expired.
    assert ctx.snapshot()["members"] == ["W2", "W3"] and ctx.group().epoch == e + 2
    fenced = ctx.events(EventType.MEMBER_FENCED)
    assert [(ev.member_id, ev.details.get("cause")) for ev in fenced] == [("W1", "rebalance_timeout")]
    assert ctx.group().held == {"W1": W1_ITEMS}
    # Its next heartbeat: it is not a member any more.
    assert ctx.heartbeat("W1", e, owned=W1_ITEMS).error_code == ErrorCode.UNKNOWN_MEMBER_ID

    # A new target gives W1's connector to W2; W3 still waits for A-0.
    executor = ctx.group().in_flight.executor  # type: ignore[union-attr]
    ctx.compute(executor, {"W2": W2_ITEMS | items("AC0"), "W3": items("AT0")})
    ctx.converge()
    assert ctx.snapshot()["assignments"] == {
        "W2": (e + 2, str(W2_ITEMS), str(items("AC0"))),
        "W3": (e + 2, "[]", str(items("AT0"))),
    }
    # Released at W1's session deadline (from its last heartbeat), then handed over.
    ctx.keepalive(last_w1 + SESSION - 1 - ctx.now, ["W2", "W3"])
    assert ctx.group().held == {"W1": W1_ITEMS}
    ctx.sleep(1)
    assert ctx.group().held == {}
    ctx.converge()
    assert ctx.snapshot()["assignments"] == {
        "W2": (e + 2, str(W2_ITEMS | items("AC0")), "[]"),
        "W3": (e + 2, str(items("AT0")), "[]"),
    }
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_confirming_the_revocation_in_time_cancels_the_rebalance_timeout() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.join("W3")
    ctx.compute("W1", {"W1": items("AC0"), "W2": W2_ITEMS, "W3": items("AT0")})
    ctx.heartbeat("W1", e)
    ctx.sleep(REBALANCE_TIMEOUT - 1)
    ctx.heartbeat("W1", e, owned=items("AC0"))
    ctx.keepalive(2 * REBALANCE_TIMEOUT, ["W1", "W2", "W3"])
    assert ctx.snapshot()["members"] == ["W1", "W2", "W3"] and ctx.snapshot()["state"] == "Stable"
    assert ctx.events(EventType.MEMBER_FENCED) == []


# ---- the assignment process --------------------------------------------------------------------------


def test_executor_timeout_chooses_another_worker() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    assert ctx.heartbeat("W1", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    started = ctx.now
    # W1 prepares but never installs. It is replaced after its rebalance timeout.
    assert ctx.prepare("W1").error_code == ErrorCode.NONE
    ctx.keepalive(REBALANCE_TIMEOUT - 5_000, ["W1", "W2"])
    assert ctx.group().in_flight.executor == "W1"  # type: ignore[union-attr]
    ctx.sleep(started + REBALANCE_TIMEOUT - ctx.now)
    assert ctx.group().in_flight.executor == "W2"  # type: ignore[union-attr]
    assert ctx.events(EventType.ASSIGNMENT_FAILED)[-1].details["reason"] == "executor did not install in time"
    # W1 is not the chosen member any more; W2 is told at its next heartbeat.
    assert ctx.heartbeat("W1", e).error_code == ErrorCode.NONE
    r = ctx.install("W1", {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS}, group_epoch=e + 1)
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert ctx.heartbeat("W2", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W2", {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable" and ctx.group().assignment_epoch == e + 1
    ctx.check_recovery()


def test_assignor_error_keeps_the_target_and_retries_after_backoff() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    target_before = ctx.snapshot()["target"]
    backoff = ctx.config.assignment_retry_backoff_ms
    for attempt, executor in enumerate(["W1", "W2", "W1"]):
        assert ctx.heartbeat(executor, e).error_code == ErrorCode.COMPUTE_ASSIGNMENT, attempt
        prep = ctx.prepare(executor)
        r = ctx.install(executor, {}, group_epoch=prep.group_epoch, error=7)
        assert r.error_code == ErrorCode.NONE  # the error was reported, not a failed request
        assert ctx.snapshot()["target"] == target_before and ctx.group().assignment_epoch == e
        assert ctx.snapshot()["state"] == "Assigning" and ctx.group().in_flight is None
        assert ctx.events(EventType.ASSIGNMENT_FAILED)[-1].details["reason"].startswith("assignor error 7")
        # Exponential backoff: 1x, 2x, 4x; nobody is asked before it is over.
        wait = backoff * 2**attempt
        ctx.sleep(wait - 1)
        assert ctx.group().in_flight is None
        ctx.sleep(1)
        assert ctx.group().in_flight is not None
    # Success resets the backoff.
    executor = ctx.group().in_flight.executor  # type: ignore[union-attr]
    ctx.compute(executor, {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS})
    assert ctx.group().assignment_failures == 0
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_older_epoch_install_then_the_next_computation_starts_at_once() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)  # e+1
    prep = ctx.prepare("W1")
    assert prep.group_epoch == e + 1
    ctx.join("W3")  # e+2 while W1 computes for e+1
    assert ctx.group().epoch == e + 2
    assert ctx.install("W1", {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS}).error_code == ErrorCode.NONE
    # Installed (valid for its input), and the next one is requested at once from the same worker.
    assert ctx.group().assignment_epoch == e + 1 and ctx.snapshot()["state"] == "Assigning"
    inflight = ctx.group().in_flight
    assert inflight is not None and inflight.executor == "W1" and not inflight.prepared
    assert ctx.heartbeat("W1", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    assert ctx.prepare("W1").group_epoch == e + 2
    ctx.install("W1", {"W1": W1_ITEMS, "W2": W2_ITEMS, "W3": items("CC0")})
    ctx.converge()
    assert ctx.snapshot()["assignments"] == {
        "W1": (e + 2, str(W1_ITEMS), "[]"),
        "W2": (e + 2, str(W2_ITEMS), "[]"),
        "W3": (e + 2, str(items("CC0")), "[]"),
    }
    ctx.check_recovery()


def test_a_member_in_the_snapshot_leaves_before_the_install() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    ctx.prepare("W1")
    assert ctx.heartbeat("W2", -1).error_code == ErrorCode.NONE
    # Valid for its input: installed; W2's part is lost work for the next computation, which starts at once.
    assert ctx.install("W1", {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS}).error_code == ErrorCode.NONE
    assert ctx.group().assignment_epoch == e + 1 and ctx.group().epoch == e + 2
    prep = ctx.prepare("W1")
    assert [m.member_id for m in prep.members] == ["W1"]
    assert sorted(m.member_id for m in prep.current_target.members) == ["W1", "W2"]
    ctx.install("W1", {"W1": ALL | items("CC0")})
    ctx.converge()
    assert ctx.snapshot()["assignments"] == {"W1": (e + 2, str(ALL | items("CC0")), "[]")}
    ctx.check_recovery()


def test_executor_leaving_hands_the_computation_to_another_worker() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    ctx.prepare("W1")
    ctx.heartbeat("W1", -1)
    assert ctx.group().in_flight.executor == "W2"  # type: ignore[union-attr]
    assert ctx.heartbeat("W2", e).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W2", {"W2": ALL | items("CC0")})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"


# ---- leaving -----------------------------------------------------------------------------------------


def test_leave_frees_the_work_at_once() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    r = ctx.heartbeat("W2", -1)
    assert r.error_code == ErrorCode.NONE and r.member_id == "W2" and r.member_epoch == -1
    assert ctx.snapshot()["members"] == ["W1"] and ctx.group().epoch == e + 1
    assert ctx.group().held == {} and [ev.member_id for ev in ctx.events(EventType.MEMBER_LEFT)] == ["W2"]
    ctx.compute("W1", {"W1": ALL})
    r = ctx.heartbeat("W1", e)
    assert assigned(r) == ALL
    ctx.check_recovery()


def test_leave_while_revoking_frees_at_once() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.join("W3")
    ctx.compute("W1", {"W1": items("AC0"), "W2": W2_ITEMS, "W3": items("AT0")})
    ctx.heartbeat("W1", e)  # asked to revoke A-0
    ctx.heartbeat("W3", e)
    ctx.heartbeat("W1", -1)  # a leaving worker stops everything first
    assert ctx.group().held == {}
    ctx.compute(ctx.group().in_flight.executor, {"W2": W2_ITEMS | items("AC0"), "W3": items("AT0")})  # type: ignore[union-attr]
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


# ---- static membership -------------------------------------------------------------------------------

STATIC = {"W1": {"instance_id": "i1"}, "W2": {"instance_id": "i2"}}


def test_static_temporary_leave_keeps_the_assignment_and_a_rejoin_takes_it_back() -> None:
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    r = ctx.heartbeat("W2", -2, instance_id="i2")
    assert r.error_code == ErrorCode.NONE and r.member_epoch == -2
    # No rebalance: W2 stays a member at epoch -2 and keeps (blocks) its items.
    assert ctx.group().epoch == e and ctx.snapshot()["members"] == ["W1", "W2"]
    assert ctx.snapshot()["assignments"]["W2"] == (-2, str(W2_ITEMS), "[]")
    assert ctx.group().owner.keys() == set(ALL.item_keys())
    assert ctx.snapshot()["state"] == "Reconciling"  # a member is not at the assignment epoch (as Kafka)
    # Leaving again is harmless.
    assert ctx.heartbeat("W2", -2, instance_id="i2").error_code == ErrorCode.NONE
    ctx.keepalive(20_000, ["W1"])

    # A new incarnation with the same instance id takes W2's place, epoch and assignment; no bump.
    r = ctx.join("", instance_id="i2")
    new = r.member_id
    assert new not in ("W1", "W2") and r.error_code == ErrorCode.NONE
    assert r.member_epoch == e and assigned(r) == W2_ITEMS and pending(r) == Items()
    assert ctx.group().epoch == e
    assert ctx.snapshot() == {
        "group_epoch": e,
        "members": sorted(["W1", new]),
        "target_epoch": e,
        "target": {"W1": str(W1_ITEMS), new: str(W2_ITEMS)},
        "assignments": {"W1": (e, str(W1_ITEMS), "[]"), new: (e, str(W2_ITEMS), "[]")},
        "state": "Stable",
    }
    assert [ev.details["replaced"] for ev in ctx.events(EventType.MEMBER_REPLACED)] == ["W2"]
    # The new incarnation has a fresh session: it outlives the old one's deadline.
    ctx.keepalive(SESSION, ["W1", new])
    assert ctx.snapshot()["members"] == sorted(["W1", new])
    ctx.check_recovery()


def test_static_rejoin_with_other_assignors_bumps_the_epoch() -> None:
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.heartbeat("W2", -2, instance_id="i2")
    r = ctx.join("", instance_id="i2", assignors=assignors_proto(IC, ("eager", 0, 0)))
    assert assigned(r) == W2_ITEMS and ctx.group().epoch == e + 1


def test_static_member_session_expiry_removes_it() -> None:
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.heartbeat("W2", -2, instance_id="i2")
    left_at = ctx.now
    ctx.keepalive(SESSION - 5_000, ["W1"])
    ctx.sleep(left_at + SESSION - 1 - ctx.now)
    assert "W2" in ctx.group().members
    ctx.sleep(1)
    assert ctx.snapshot()["members"] == ["W1"] and ctx.group().epoch == e + 1
    assert ctx.group().held == {} and "i2" not in ctx.group().static_members
    # The instance id is free: a rejoin is an ordinary new member now.
    r = ctx.join("", instance_id="i2")
    assert r.member_epoch == e and assigned(r) == Items() and ctx.group().epoch == e + 2
    ctx.check_recovery()


def test_static_rejoin_with_the_same_member_id_takes_its_place_back() -> None:
    # Regression: a static member that left with -2 and rejoined (epoch 0) with the same member
    # id used to be fenced (epoch 0 != -2), losing its assignment and bumping the epoch.
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.heartbeat("W2", -2, instance_id="i2")
    r = ctx.join("W2", instance_id="i2")
    assert r.error_code == ErrorCode.NONE and r.member_id == "W2"
    assert r.member_epoch == e and assigned(r) == W2_ITEMS
    assert ctx.group().epoch == e and ctx.group().held == {}
    assert ctx.snapshot()["assignments"]["W2"] == (e, str(W2_ITEMS), "[]")
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_static_member_leaving_while_waiting_for_items_gets_them_after_rejoining() -> None:
    # Regression: a static member at the target epoch still waiting for pending items left with
    # -2; its replacement was carried over as Stable, so it never got the items (and the group
    # showed Stable with work unassigned).
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    ctx.compute("W1", {"W1": items("AC0", "CC0"), "W2": W2_ITEMS | items("AT0")})
    r = ctx.heartbeat("W2", e)
    assert r.member_epoch == e + 1 and pending(r) == items("AT0")
    ctx.heartbeat("W2", -2, instance_id="i2")
    ctx.heartbeat("W1", e)  # asked to revoke A-0
    ctx.heartbeat("W1", e, owned=items("AC0"))  # confirms: A-0 is free
    r = ctx.join("", instance_id="i2")
    new = r.member_id
    assert r.member_epoch == e + 1
    assert assigned(r) | pending(r) == W2_ITEMS | items("AT0")
    ctx.converge()
    assert ctx.snapshot()["assignments"][new] == (e + 1, str(W2_ITEMS | items("AT0")), "[]")
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_static_member_that_left_is_fenced_by_a_heartbeat_at_its_old_epoch() -> None:
    # Regression: after -2, a heartbeat at the member's last epoch (e.g. a delayed request) passed
    # as the "lost response" case (epoch == previous epoch), resurrecting the member, and the real
    # rejoin then got UNRELEASED_INSTANCE_ID. The lost-response case is for *older* epochs only;
    # a greater epoch (e > -2) is fenced.
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.heartbeat("W2", -2, instance_id="i2")
    r = ctx.heartbeat("W2", e, owned=Items(), instance_id="i2")
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert "W2" not in ctx.group().members and ctx.group().epoch == e + 1
    # The instance can rejoin (as a new member: its old place is gone).
    assert ctx.join("", instance_id="i2").error_code == ErrorCode.NONE
    ctx.check_recovery()


# ---- group states, retention -------------------------------------------------------------------------


def describe(ctx: Context, gid: str = "g") -> admin_pb2.DescribedGroup:
    return ctx.coordinator.describe_groups(admin_pb2.DescribeGroupsRequest(group_ids=[gid])).groups[0]


def test_group_states() -> None:
    ctx = Context()
    ctx.put_connector("A", 2)
    ctx.put_connector("B", 0)
    assert describe(ctx).group_state == "Empty"
    ctx.join("W1")
    assert describe(ctx).group_state == "Assigning"
    ctx.compute("W1", {"W1": ALL})
    assert describe(ctx).group_state == "Reconciling"
    ctx.converge()
    d = describe(ctx)
    assert d.group_state == "Stable" and d.group_epoch == d.assignment_epoch == ctx.group().epoch
    assert d.assignor_name == "incremental-cooperative"
    assert [(c.name, c.task_count) for c in d.connectors] == [("A", 2), ("B", 0)]
    assert [(m.member_id, m.member_epoch, m.member_state) for m in d.members] == [("W1", d.group_epoch, "Stable")]
    listed = ctx.coordinator.list_groups(admin_pb2.ListGroupsRequest(states_filter=["stable"]))
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [("g", "Stable", "connect")]
    assert ctx.coordinator.list_groups(admin_pb2.ListGroupsRequest(states_filter=["Empty"])).groups == []
    ctx.heartbeat("W1", -1)
    assert describe(ctx).group_state == "Empty"


def test_empty_group_without_connectors_is_deleted_after_retention() -> None:
    ctx = Context(config=replace(TEST_CONFIG, empty_retention_ms=60_000))
    ctx.put_connector("A", 1)
    ctx.join("W1")
    ctx.compute("W1", {"W1": items("AC0", "AT0")})
    ctx.converge()
    ctx.delete_connector("A")
    ctx.heartbeat("W1", -1)
    ctx.sleep(30_000)
    # A member coming back restarts the clock.
    ctx.join("W2")
    ctx.sleep(60_000)
    ctx.heartbeat("W2", -1)
    ctx.sleep(59_999)
    assert describe(ctx).group_state == "Empty"
    ctx.sleep(1)
    d = describe(ctx)
    assert d.group_state == "Dead" and d.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert ctx.coordinator.list_groups(admin_pb2.ListGroupsRequest()).groups == []
    assert [ev.event for ev in ctx.events()][-1] == "group_deleted"
    ctx.check_recovery()


def test_empty_group_with_connectors_is_kept() -> None:
    ctx = Context(config=replace(TEST_CONFIG, empty_retention_ms=60_000))
    ctx.put_connector("A", 1)
    ctx.alter_configs(group_id="configs-only", max_size="3")
    ctx.sleep(10 * 60_000)
    assert describe(ctx).group_state == "Empty"
    assert describe(ctx, "configs-only").group_state == "Dead"
    ctx.check_recovery()


# ---- dynamic configuration ---------------------------------------------------------------------------


def test_session_and_heartbeat_configs_take_effect() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    r = ctx.heartbeat("W1", e)
    assert (r.session_timeout_ms, r.heartbeat_interval_ms) == (45_000, 5_000)
    assert ctx.alter_configs(session_timeout_ms="20000", heartbeat_interval_ms="2000").error_code == ErrorCode.NONE
    assert ctx.group().epoch == e  # not an assignment input
    cfg = ctx.coordinator.describe_configs(admin_pb2.DescribeConfigsRequest(group_id="g"))
    assert {c.name: (c.value, c.source) for c in cfg.configs}["session.timeout.ms"] == ("20000", "group")
    assert {c.name: (c.value, c.source) for c in cfg.configs}["max.size"][1] == "default"
    r = ctx.heartbeat("W1", e)
    assert (r.session_timeout_ms, r.heartbeat_interval_ms) == (20_000, 2_000)
    ctx.heartbeat("W2", e)
    # The new session timeout applies from each member's next heartbeat, but a lowered one never
    # ends a session before the deadline the member was last told (45 s after its previous
    # heartbeat): the answer telling it 20 s may have been lost, and its SDK stops its work only
    # by the session it knows (simulator seeds 102525, 102579).
    ctx.keepalive(20_000, ["W1"])
    assert ctx.snapshot()["members"] == ["W1", "W2"]
    ctx.keepalive(25_000, ["W1"])
    assert ctx.snapshot()["members"] == ["W1"]
    # Deleting the override restores the default.
    ctx.alter_configs(delete=["session.timeout.ms", "heartbeat.interval.ms"])
    r = ctx.heartbeat("W1", e)
    assert (r.session_timeout_ms, r.heartbeat_interval_ms) == (45_000, 5_000)
    ctx.check_recovery()


def test_scheduled_rebalance_max_delay_change_bumps_the_epoch() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.alter_configs(scheduled_rebalance_max_delay_ms="1000")
    assert ctx.group().epoch == e + 1
    ctx.alter_configs(scheduled_rebalance_max_delay_ms="1000")  # same value: no change
    assert ctx.group().epoch == e + 1
    prep = ctx.prepare("W1")
    assert prep.group_configs["scheduled.rebalance.max.delay.ms"] == "1000"


def test_connector_changes_bump_the_epoch() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    assert ctx.put_connector("A", 2).group_epoch == e  # unchanged
    assert ctx.put_connector("A", 1).group_epoch == e + 1  # task count changed
    put = ctx.put_connector("C", 3)
    assert put.error_code == ErrorCode.NONE and put.group_epoch == e + 2
    assert ctx.delete_connector("B").group_epoch == e + 3
    reasons = [ev.details["reason"] for ev in ctx.events(EventType.GROUP_EPOCH_BUMPED)][-3:]
    assert reasons == ["task_count_changed", "connector_added", "connector_removed"]
    # Items of removed tasks/connectors are revoked by the next target.
    prep = ctx.prepare("W1")
    assert {c.name: c.task_count for c in prep.connectors} == {"A": 1, "C": 3}
    ctx.install("W1", {"W1": items("AC0", "AT0", "CC0"), "W2": items("CT0", "CT1", "CT2")})
    r = ctx.heartbeat("W2", e)
    assert assigned(r) == Items() and ctx.group().members["W2"].current.state == "UnrevokedItems"
    ctx.converge()
    assert ctx.snapshot()["assignments"]["W2"] == (e + 3, str(items("CT0", "CT1", "CT2")), "[]")
    ctx.check_recovery()


# ---- assignment in the response only when it changed --------------------------------------------------


def test_assignment_only_when_changed_or_full_request() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    r = ctx.heartbeat("W1", e)
    assert r.error_code == ErrorCode.NONE and not r.HasField("assignment")
    r = ctx.heartbeat("W1", e, owned=W1_ITEMS)
    assert not r.HasField("assignment")
    # A full request (rebalance timeout + assignors + owned: e.g. a retry after an error) always gets it.
    r = ctx.heartbeat("W1", e, full=True, owned=W1_ITEMS)
    assert assigned(r) == W1_ITEMS
    # Missing any one of the three: not a full request.
    r = ctx.heartbeat("W1", e, rebalance_timeout_ms=30_000, assignors=assignors_proto(IC))
    assert not r.HasField("assignment")
    # A change of the member's assignment (here: a new target) is sent.
    ctx.put_connector("C", 0)
    ctx.compute("W1", {"W1": W1_ITEMS | items("CC0"), "W2": W2_ITEMS})
    r = ctx.heartbeat("W1", e)
    assert r.member_epoch == e + 1 and assigned(r) == W1_ITEMS | items("CC0")
    r = ctx.heartbeat("W1", e + 1)
    assert not r.HasField("assignment")


def test_assignor_reason_change_requests_a_rebalance() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    r = ctx.heartbeat("W2", e, assignors=assignors_proto(IC, reason=1))
    assert r.error_code == ErrorCode.NONE and ctx.group().epoch == e + 1
    assert ctx.events(EventType.GROUP_EPOCH_BUMPED)[-1].details["reason"] == "member_metadata_changed"
    # The same assignors again: no change.
    ctx.heartbeat("W2", e, assignors=assignors_proto(IC, reason=1))
    assert ctx.group().epoch == e + 1
    # A new rebalance timeout or URL... the URL is assignment input, the timeout is not.
    ctx.heartbeat("W2", e, rebalance_timeout_ms=60_000)
    assert ctx.group().epoch == e + 1
    ctx.heartbeat("W2", e, url="http://w2:8083")
    assert ctx.group().epoch == e + 2


# ---- delayed rebalance and recovery ------------------------------------------------------------------


def test_delayed_rebalance_fires_and_survives_a_restart() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.heartbeat("W2", -1)
    ctx.compute("W1", {"W1": W1_ITEMS}, delay_ms=60_000)  # W2's work held back for 60 s
    due = ctx.now + 60_000
    assert ctx.group().target.scheduled_rebalance_ms == due
    ctx.keepalive(30_000, ["W1"])
    ctx.restart()  # timers are volatile: load() re-arms the delayed rebalance from the stored target
    assert ctx.group().target.scheduled_rebalance_ms == due
    ctx.keepalive(due - 1 - ctx.now, ["W1"])
    assert ctx.group().epoch == e + 1
    ctx.sleep(1)
    assert ctx.group().epoch == e + 2
    assert ctx.events(EventType.GROUP_EPOCH_BUMPED)[-1].details["reason"] == "scheduled_rebalance"
    assert ctx.heartbeat("W1", e + 1).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W1", {"W1": ALL})
    ctx.converge()
    assert ctx.snapshot()["assignments"] == {"W1": (e + 2, str(ALL), "[]")}
    ctx.check_recovery()


def test_delayed_rebalance_due_during_downtime_fires_on_load() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.heartbeat("W2", -1)
    ctx.compute("W1", {"W1": W1_ITEMS}, delay_ms=10_000)
    ctx.now += 20_000  # the coordinator is down meanwhile
    ctx.restart()
    ctx.sleep(0)
    assert ctx.group().epoch == e + 2 and ctx.group().target.scheduled_rebalance_ms == 0


def test_restart_rearms_sessions_revocations_held_work_and_the_computation() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.join("W3")  # e+1; W1 is asked to compute
    ctx.prepare("W1")
    ctx.restart()  # the computation in flight is lost, and started again on load
    inflight = ctx.group().in_flight
    assert inflight is not None and not inflight.prepared
    ctx.compute(inflight.executor, {"W1": items("AC0"), "W2": W2_ITEMS, "W3": items("AT0")})
    ctx.heartbeat("W1", e)  # asked to revoke A-0
    ctx.heartbeat("W2", e + 10, owned=W2_ITEMS)  # fenced: W2's work is held
    assert ctx.group().held == {"W2": W2_ITEMS}
    ctx.restart()
    restarted = ctx.now
    # Everyone gets a fresh session; W1 a fresh rebalance timeout; the held work a fresh session's wait.
    ctx.keepalive(REBALANCE_TIMEOUT - 5_000, ["W3"])
    assert sorted(ctx.group().members) == ["W1", "W3"]
    ctx.sleep(restarted + REBALANCE_TIMEOUT - ctx.now)
    assert sorted(ctx.group().members) == ["W3"]  # W1 did not revoke in time: fenced
    assert ctx.group().held.keys() == {"W1", "W2"}
    # Both waits end a maximal session after the restart: W1's last heartbeat before the restart,
    # and the session timeout W2 was told, are not known.
    ctx.keepalive(restarted + MAX_SESSION - 1 - ctx.now, ["W3"])
    assert ctx.group().held.keys() == {"W1", "W2"}
    ctx.sleep(1)
    assert ctx.group().held == {}
    ctx.check_recovery()


def test_restart_after_lowering_the_session_timeout_does_not_expire_members_early() -> None:
    # Regression (found by test_properties): load() re-armed sessions with the group's *current*
    # session timeout. Lowered (45 s -> 10 s) just before a restart, the members -- told 45 s at
    # their last heartbeat -- were expired 10 s after the restart and their work handed to others
    # while they could still be running it for another 35 s.
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.heartbeat("W1", e)
    told = ctx.heartbeat("W2", e).session_timeout_ms
    assert told == SESSION
    last = ctx.now
    ctx.alter_configs(session_timeout_ms="10000")
    ctx.restart()
    ctx.keepalive(last + told - 1 - ctx.now, ["W1"])  # W2 is silent, but may still be running its work
    assert "W2" in ctx.group().members
    ctx.keepalive(MAX_SESSION - told + 1, ["W1"])
    assert "W2" not in ctx.group().members
    # Heartbeats after the restart are told (and use) the new timeout.
    assert ctx.heartbeat("W1", e).session_timeout_ms == 10_000
    ctx.check_recovery()


def test_losing_the_only_worker_covering_every_version_is_signalled() -> None:
    """When the worker covering every member's range leaves, one covering every version in use
    (each member's `version`) computes instead."""
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join("A", assignors=assignors_proto(("ic", 1, 5)))
    ctx.join("B", assignors=assignors_proto(("ic", 3, 4)))
    ctx.join("C", assignors=assignors_proto(("ic", 2, 3)))  # accepted: A covers 2..4
    ctx.compute("A", {"A": items("AC0"), "B": items("AT0"), "C": Items()})
    ctx.converge()
    e = ctx.group().epoch
    ctx.heartbeat("A", -1)  # A's connector is lost work now
    ctx.keepalive(60_000, ["B", "C"])
    codes = {ctx.heartbeat(m, epoch_of(ctx, m)).error_code for m in ("B", "C")}
    assert ctx.group().epoch == e + 1 and ctx.snapshot()["state"] == "Assigning"
    assert codes & {ErrorCode.COMPUTE_ASSIGNMENT, ErrorCode.UNSUPPORTED_ASSIGNOR}


def test_a_delayed_heartbeat_cannot_acknowledge_a_later_revocation() -> None:
    """`owned` in a heartbeat sent before the work was even given to the member must not count as
    the confirmation of its later revocation: the request_sequence tells the delayed copy apart."""
    ctx = stable_group()
    e = ctx.group().epoch
    # A-1 moves from W2 to W1 at e+1: W1 advances at once, A-1 pending until W2 releases it.
    ctx.put_connector("C", 0)
    ctx.compute("W1", {"W1": W1_ITEMS | items("AT1"), "W2": items("BC0", "CC0")})
    assert pending(ctx.heartbeat("W1", e)) == items("AT1")
    # W1 sends a heartbeat (epoch e+1, owned = A, A-0) that the network delays.
    delayed = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="g", member_id="W1", member_epoch=e + 1, request_sequence=ctx.next_sequence()
    )
    W1_ITEMS.to_proto(delayed.owned)
    # Meanwhile W2 releases A-1, and W1 (retrying) gets it and runs it -- still at epoch e+1.
    ctx.heartbeat("W2", e)
    ctx.heartbeat("W2", e, owned=items("BC0"))
    assert assigned(ctx.heartbeat("W1", e + 1)) == W1_ITEMS | items("AT1")
    # A-1 goes back to W2 at e+2: W1 is asked to revoke it, and stays at e+1 until it confirms.
    ctx.put_connector("D", 0)
    ctx.compute("W1", {"W1": W1_ITEMS | items("DC0"), "W2": W2_ITEMS | items("CC0")})
    ctx.heartbeat("W1", e + 1)
    assert str(ctx.group().members["W1"].current.revoking) == str(items("AT1"))
    # The delayed request arrives: right epoch, `owned` without A-1 -- taken as the confirmation,
    # although W1 is still running A-1.
    before = ctx.durable()
    r = ctx.call("heartbeat", delayed)
    assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and "request_sequence" in r.error_message
    assert ctx.group().members["W1"].current.state == "UnrevokedItems"  # A-1 must not be released yet
    assert ctx.durable() == before  # the stale request changed nothing
    # The real confirmation, sent after the revocation, is taken.
    ctx.heartbeat("W1", e + 1, owned=W1_ITEMS)
    assert ctx.group().members["W1"].current.state != "UnrevokedItems"
    ctx.check_recovery()


def test_switching_assignment_mode_abandons_the_computation_in_flight() -> None:
    ctx = Context(service_assignors={"incremental-cooperative": (1, 2)})
    ctx.put_connector("A", 1)
    ctx.join("W1")  # service mode (the default with a service): the Assign call goes out at once
    (stale,) = ctx.service_calls()
    assert ctx.alter_configs(assignment_mode="worker").error_code == ErrorCode.NONE
    # The worker is asked instead; the service's late answer is ignored.
    assert ctx.group().in_flight.executor == "W1"  # type: ignore[union-attr]
    assert ctx.answer_service(stale, {"W1": items("AC0", "AT0")}) == ErrorCode.NONE
    assert ctx.group().assignment_epoch == 0
    assert ctx.heartbeat("W1", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.compute("W1", {"W1": items("AC0", "AT0")})
    ctx.converge()
    # And back: the next computation goes to the service.
    ctx.alter_configs(assignment_mode="service")
    ctx.join("W2")
    assert ctx.group().in_flight.executor == ""  # type: ignore[union-attr]
    assert ctx.heartbeat("W1", epoch_of(ctx, "W1")).error_code == ErrorCode.NONE
    ctx.service_compute({"W1": items("AC0"), "W2": items("AT0")})
    ctx.converge()
    assert ctx.snapshot()["state"] == "Stable"
    ctx.check_recovery()


def test_no_worker_able_to_compute_is_reported_once_and_the_target_is_kept() -> None:
    ctx = Context()
    ctx.put_connector("A", 1)
    ctx.join("A", assignors=assignors_proto(("ic", 1, 5)))
    ctx.join("B", assignors=assignors_proto(("ic", 3, 4)))  # uses version 4
    ctx.join("C", assignors=assignors_proto(("ic", 2, 3)))  # uses version 3
    ctx.compute("A", {"A": items("AC0"), "B": items("AT0"), "C": Items()})
    ctx.converge()
    target = ctx.group().target
    # C moves to version 2: B [3-4] can't read it, C [2-3] can't read B's 4, and A leaves.
    c = assignors_proto(("ic", 2, 3))
    c.assignors[0].version = 2
    ctx.heartbeat("C", ctx.group().members["C"].member_epoch, assignors=c)
    ctx.heartbeat("A", -1)
    failed = [e for e in ctx.events(EventType.ASSIGNMENT_FAILED) if "no worker supports" in e.details.get("reason", "")]
    assert len(failed) == 1
    for _ in range(3):  # heartbeats go on; nobody is asked to compute, nothing else is said
        for m in ("B", "C"):
            assert ctx.heartbeat(m, ctx.group().members[m].member_epoch).error_code == ErrorCode.NONE
    assert (
        len([e for e in ctx.events(EventType.ASSIGNMENT_FAILED) if "no worker supports" in e.details.get("reason", "")])
        == 1
    )
    assert ctx.snapshot()["state"] == "Assigning" and ctx.group().target.assignment_epoch == target.assignment_epoch
    ctx.check_recovery()


def test_a_duplicated_heartbeat_is_answered_as_a_duplicate_and_changes_nothing() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    req = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="g", member_id="W1", member_epoch=e, request_sequence=ctx.next_sequence()
    )
    assert ctx.call("heartbeat", req).error_code == ErrorCode.NONE
    before = ctx.durable()
    copy = ctx.call("heartbeat", req)  # the network delivers it twice
    assert copy.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    # An older copy -- even one whose epoch would fence the member -- is out of order, not fatal.
    old = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="g", member_id="W1", member_epoch=e - 1, request_sequence=1
    )
    assert ctx.call("heartbeat", old).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ctx.durable() == before and "W1" in ctx.group().members


def test_a_delayed_heartbeat_cannot_acknowledge_a_revocation_after_a_restart() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    ctx.put_connector("C", 0)
    ctx.compute("W1", {"W1": W1_ITEMS | items("AT1"), "W2": items("BC0", "CC0")})
    assert pending(ctx.heartbeat("W1", e)) == items("AT1")
    delayed = coordinator_pb2.ConnectGroupHeartbeatRequest(
        group_id="g", member_id="W1", member_epoch=e + 1, request_sequence=ctx.next_sequence()
    )
    W1_ITEMS.to_proto(delayed.owned)  # sent before W1 got A-1
    ctx.heartbeat("W2", e)
    ctx.heartbeat("W2", e, owned=items("BC0"))
    assert assigned(ctx.heartbeat("W1", e + 1)) == W1_ITEMS | items("AT1")  # W1 runs A-1
    ctx.put_connector("D", 0)
    ctx.compute("W1", {"W1": W1_ITEMS | items("DC0"), "W2": W2_ITEMS | items("CC0")})
    ctx.heartbeat("W1", e + 1)  # asked to revoke A-1
    ctx.restart()
    # The sequence stored with the revocation outlives the restart: the copy is recognised as stale.
    assert ctx.call("heartbeat", delayed).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert ctx.group().members["W1"].current.state == "UnrevokedItems"  # A-1 must not be released yet
