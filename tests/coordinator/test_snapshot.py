"""The assignor's input (Prepare, the Assign request) lists the group as it is.

The snapshot encodes each distinct set of items once and copies the message where the same set
appears again (a reconciled member's owned items, its target and its current-target entry are one
object). These tests decode every field of the snapshot and compare it with the group's state, for
members whose three sets are equal and for members whose sets differ (one still revoking, one
waiting for items someone else owns, one that has nothing yet).
"""

from __future__ import annotations

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import EMPTY, Items
from tests.coordinator.harness import IC, Context, assignors_proto, items


def executor(ctx: Context) -> str:
    inflight = ctx.group().in_flight
    assert inflight is not None and inflight.executor, "no assignment in flight"
    return inflight.executor


def test_every_member_s_owned_target_and_current_target_are_listed_as_the_group_holds_them() -> None:
    ctx = Context()
    ctx.put_connector("a", 4)
    w1 = ctx.join(assignors=assignors_proto(IC)).member_id
    w2 = ctx.join(assignors=assignors_proto(IC)).member_id
    ctx.compute(executor(ctx), {w1: items("a", "a-0", "a-1"), w2: items("a-2", "a-3")})
    ctx.converge()

    w3 = ctx.join(assignors=assignors_proto(IC)).member_id
    ctx.compute(executor(ctx), {w1: items("a", "a-0"), w2: items("a-2"), w3: items("a-1", "a-3")})
    # w1 is told to give a-1 up and has not yet confirmed it; w2 gives a-3 up at once.
    m1 = ctx.group().members[w1]
    assert ctx.heartbeat(w1, m1.member_epoch, owned=m1.owned).error_code == ErrorCode.NONE
    for _ in range(2):  # told to give a-3 up, then confirms it
        m2 = ctx.group().members[w2]
        assert ctx.heartbeat(w2, m2.member_epoch, owned=items("a-2")).error_code == ErrorCode.NONE
    ctx.put_connector("b", 1)  # a new group epoch: an assignment is asked for, from this state
    prep = ctx.prepare(executor(ctx))
    assert prep.error_code == ErrorCode.NONE, prep

    group = ctx.group()
    listed = {gm.member_id: gm for gm in prep.members}
    assert set(listed) == set(group.members) == {w1, w2, w3}
    for mid, member in group.members.items():
        gm = listed[mid]
        assert Items.from_proto(gm.owned) == member.owned, mid
        assert Items.from_proto(gm.target) == group.target_of(mid), mid
        assert gm.assignor.name == IC[0] and gm.assignor.version == IC[2], mid
    current = {mt.member_id: Items.from_proto(mt.connectors_and_tasks) for mt in prep.current_target.members}
    assert current == {mid: tv.items for mid, tv in group.target_members.items()}
    # The cases the copies must not blur: owned differs from the target (w1 still revokes a-1,
    # w3 waits for a-1), equals it (w2), and a member with a target but nothing owned (w3).
    assert group.members[w1].owned == items("a", "a-0", "a-1") != group.target_of(w1)
    assert group.members[w2].owned == items("a-2") == group.target_of(w2)
    assert group.members[w3].owned in (items("a-3"), EMPTY) and group.target_of(w3) == items("a-1", "a-3")
