"""RemoveMembers (Kafka's RemoveMembersFromConsumerGroup): an operator removes members for good.

A removed member that is still active may still be running its work, so its items are held until
its session would have expired (like a fenced member's); a static member that left temporarily (-2)
stopped its work before leaving, so its items are released at once."""

from __future__ import annotations

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.records import EventType
from tests.coordinator.harness import Context
from tests.coordinator.test_timeouts_and_membership import ALL, SESSION, STATIC, W1_ITEMS, W2_ITEMS, stable_group


def remove(ctx: Context, *who: tuple[str, str], group_id: str = "g") -> admin_pb2.RemoveMembersResponse:
    members = [admin_pb2.MemberIdentity(**{kind: value}) for kind, value in who]
    return ctx.call("remove_members", admin_pb2.RemoveMembersRequest(group_id=group_id, members=members))


def test_removing_a_static_member_that_left_temporarily_releases_its_work_at_once() -> None:
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    ctx.heartbeat("W2", -2, instance_id="i2")
    assert ctx.group().epoch == e  # the temporary leave alone changes nothing

    r = remove(ctx, ("instance_id", "i2"))
    assert r.error_code == ErrorCode.NONE and r.group_epoch == e + 1
    assert [(x.member_id, x.instance_id, x.error_code) for x in r.results] == [("W2", "i2", ErrorCode.NONE)]
    assert ctx.snapshot()["members"] == ["W1"] and ctx.group().held == {}
    assert "i2" not in ctx.group().static_members
    assert [ev.member_id for ev in ctx.events(EventType.MEMBER_REMOVED)] == ["W2"]
    ctx.compute("W1", {"W1": ALL})
    ctx.converge()
    assert ctx.snapshot()["assignments"]["W1"][1] == str(ALL)
    # The instance id is free again: a new worker with it joins as a new member, with a rebalance.
    r2 = ctx.join("", instance_id="i2")
    assert r2.error_code == ErrorCode.NONE and ctx.group().epoch == e + 2
    ctx.check_recovery()


def test_removing_an_active_member_holds_its_work_until_its_session_would_have_expired() -> None:
    ctx = stable_group()
    e = ctx.group().epoch
    last_w2 = ctx.now
    r = remove(ctx, ("member_id", "W2"))
    assert r.error_code == ErrorCode.NONE and r.results[0].error_code == ErrorCode.NONE
    assert ctx.snapshot()["members"] == ["W1"] and ctx.group().epoch == e + 1
    # Its worker may still be running W2's items: nobody gets them before W2's session deadline.
    assert ctx.group().held == {"W2": W2_ITEMS}
    assert ctx.heartbeat("W2", e, owned=W2_ITEMS).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    ctx.compute("W1", {"W1": ALL})
    ctx.keepalive(last_w2 + SESSION - 1 - ctx.now, ["W1"])
    assert ctx.group().held == {"W2": W2_ITEMS}
    assert ctx.snapshot()["assignments"]["W1"][1:] == (str(W1_ITEMS), str(W2_ITEMS)), "W2's items went nowhere"
    ctx.sleep(1)
    assert ctx.group().held == {}
    ctx.converge()
    assert ctx.snapshot()["assignments"]["W1"][1] == str(ALL)
    ctx.check_recovery()


def test_unknown_members_are_refused_in_band_and_change_nothing() -> None:
    ctx = stable_group(**STATIC)
    before, e = ctx.durable(), ctx.group().epoch
    r = remove(ctx, ("instance_id", "nope"), ("member_id", "ghost"))
    assert r.error_code == ErrorCode.NONE and r.group_epoch == e
    assert [x.error_code for x in r.results] == [ErrorCode.UNKNOWN_MEMBER_ID] * 2
    assert "instance_id 'nope'" in r.results[0].error_message and "member 'ghost'" in r.results[1].error_message
    assert ctx.durable() == before


def test_a_mix_removes_the_known_and_reports_the_unknown() -> None:
    ctx = stable_group(**STATIC)
    e = ctx.group().epoch
    r = remove(ctx, ("member_id", "W1"), ("instance_id", "nope"), ("member_id", "W1"))
    # The second mention of W1 finds it gone: removed by the first.
    assert [x.error_code for x in r.results] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert ctx.snapshot()["members"] == ["W2"] and ctx.group().epoch == e + 1
    ctx.check_recovery()


def test_malformed_requests_name_the_field_and_change_nothing() -> None:
    ctx = stable_group(**STATIC)
    before = ctx.durable()
    cases = [
        (admin_pb2.RemoveMembersRequest(group_id="", members=[admin_pb2.MemberIdentity(member_id="W1")]), "group_id"),
        (admin_pb2.RemoveMembersRequest(group_id="g"), "members"),
        (admin_pb2.RemoveMembersRequest(group_id="g", members=[admin_pb2.MemberIdentity()]), "members[0]"),
        (
            admin_pb2.RemoveMembersRequest(
                group_id="g", members=[admin_pb2.MemberIdentity(member_id="W1", instance_id="i1")]
            ),
            "members[0]",
        ),
        (
            admin_pb2.RemoveMembersRequest(group_id="g", members=[admin_pb2.MemberIdentity(instance_id="x" * 300)]),
            "members[0].instance_id",
        ),
    ]
    for req, field in cases:
        r = ctx.call("remove_members", req)
        assert r.error_code == ErrorCode.INVALID_REQUEST and field in r.error_message, (req, r)
        assert not r.results
    r = remove(ctx, ("member_id", "W1"), group_id="other")
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "'other'" in r.error_message
    assert ctx.durable() == before
