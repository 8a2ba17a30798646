"""Seed 001's case studies against the core, the test acting as the client-side assignor.

Connectors/tasks as in the seed: AC0, AT1, AT2, BC0, BT1 (connector A with tasks 1-2, B with
task 1; we number tasks from 0 as Connect does, so A has task_count 3 and B 2, and task 0 of each
stays in the group too). Run without the quiet epoch advance (`SEED_CONFIG`): the seed's members
move to each epoch at their own heartbeat.
"""

from __future__ import annotations

from connect.coordinator.v1 import common_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items
from services.coordinator.core.records import EventType
from tests.coordinator.harness import SEED_CONFIG, Context, items


def seed_group() -> Context:
    ctx = Context(config=SEED_CONFIG)
    ctx.put_connector("A", 3)  # AC0, AT0, AT1, AT2
    ctx.put_connector("B", 2)  # BC0, BT0, BT1
    return ctx


ALL = items("AC0", "AT0", "AT1", "AT2", "BC0", "BT0", "BT1")


def test_w1_then_w2_join() -> None:
    ctx = seed_group()
    base = ctx.group().epoch  # two connector puts: epoch 2, nothing to assign (no members)
    assert ctx.snapshot()["state"] == "Empty"

    # W1 joins: the coordinator bumps the group epoch, adds W1 with an empty assignment, and
    # (client-side mode) asks W1 to compute the assignment.
    r = ctx.join("W1")
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    assert r.member_id == "W1" and r.member_epoch == 0
    assert ctx.snapshot() == {
        "group_epoch": base + 1,
        "members": ["W1"],
        "target_epoch": 0,
        "target": {},
        "assignments": {"W1": (0, "[]", "[]")},
        "state": "Assigning",
    }

    # W1 computes: everything to W1, installed as the target at the group epoch.
    ctx.compute("W1", {"W1": ALL})
    snap = ctx.snapshot()
    assert snap["target_epoch"] == base + 1 and snap["target"] == {"W1": str(ALL)}
    assert snap["assignments"] == {"W1": (0, "[]", "[]")}
    assert snap["state"] == "Reconciling"

    # W1 heartbeats: nothing to revoke, so it moves to the target epoch with all of it.
    r = ctx.heartbeat("W1", 0)
    assert r.error_code == ErrorCode.NONE and r.member_epoch == base + 1
    assert str(ctx_items(r.assignment.assigned)) == str(ALL)
    assert ctx.snapshot()["state"] == "Stable"
    e1 = base + 1

    # W2 joins: epoch bump; W2 moves to the current target epoch (it has no target yet).
    r = ctx.join("W2")
    assert r.error_code == ErrorCode.NONE and r.member_epoch == e1
    assert ctx.snapshot()["group_epoch"] == e1 + 1
    assert ctx.snapshot()["state"] == "Assigning"

    # W1 is chosen again (sticky executor); it learns at its next heartbeat.
    r = ctx.heartbeat("W1", e1)
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    assert not r.HasField("assignment")  # nothing changed for W1 yet
    w1_target = items("AC0", "AT0", "AT1", "AT2")
    w2_target = items("BC0", "BT0", "BT1")
    ctx.compute("W1", {"W1": w1_target, "W2": w2_target})
    e2 = e1 + 1
    assert ctx.snapshot()["target_epoch"] == e2

    # W2 heartbeats first: it advances to epoch e2 but its items are still W1's: all pending.
    r = ctx.heartbeat("W2", e1)
    assert r.member_epoch == e2
    assert list(r.assignment.assigned.connectors) == [] and list(r.assignment.assigned.tasks) == []
    assert str(ctx_items(r.assignment.pending)) == str(w2_target)
    assert ctx.snapshot()["assignments"]["W2"] == (e2, "[]", str(w2_target))

    # W1 heartbeats: asked to revoke B's items; it stays at its epoch until it confirms.
    r = ctx.heartbeat("W1", e1)
    assert r.member_epoch == e1
    assert str(ctx_items(r.assignment.assigned)) == str(w1_target)
    assert ctx.group().members["W1"].current.state == "UnrevokedItems"
    # A heartbeat that still reports B's items is not an acknowledgement.
    r = ctx.heartbeat("W1", e1, owned=ALL)
    assert r.member_epoch == e1 and not r.HasField("assignment")

    # W1 confirms the revocation: it moves to e2; B's items are released.
    r = ctx.heartbeat("W1", e1, owned=w1_target)
    assert r.member_epoch == e2
    assert str(ctx_items(r.assignment.assigned)) == str(w1_target)

    # W2 heartbeats and gets B's items.
    r = ctx.heartbeat("W2", e2)
    assert str(ctx_items(r.assignment.assigned)) == str(w2_target)
    assert len(r.assignment.pending.tasks) == 0
    assert ctx.snapshot() == {
        "group_epoch": e2,
        "members": ["W1", "W2"],
        "target_epoch": e2,
        "target": {"W1": str(w1_target), "W2": str(w2_target)},
        "assignments": {"W1": (e2, str(w1_target), "[]"), "W2": (e2, str(w2_target), "[]")},
        "state": "Stable",
    }
    ctx.check_recovery()


def ctx_items(msg: common_pb2.ConnectorsAndTasks) -> Items:
    return Items.from_proto(msg)


# ---- "Worker Leaving the Group" and "Worker Bounces" -----------------------------------------------
#
# The seed starts both at "epoch 35 with 3 workers"; we build the same shape (W1, W2, W3, one
# target, everyone converged) and use relative epochs: E is the seed's 35, E+1 its 36, E+2 its 37.
# The seed's tasks AT1/AT2/BT1 become A-0..A-2 and B-0..B-1 (tasks numbered from 0): W1 runs A's
# connector and tasks 0-1, W2 all of B, W3 task A-2. W3 joins first, so it computed the first
# target and, as the previous executor, is the one chosen again (the seed's "W3 is chosen").

W1_ITEMS = items("AC0", "AT0", "AT1")
W2_ITEMS = items("BC0", "BT0", "BT1")
W3_ITEMS = items("AT2")
DELAY_MS = 20_000  # the assignor's rebalance_delay_ms ("delay d"); below scheduled.rebalance.max.delay.ms


def three_workers() -> tuple[Context, int]:
    ctx = seed_group()
    assert ctx.join("W3").error_code == ErrorCode.COMPUTE_ASSIGNMENT
    ctx.join("W1")
    ctx.join("W2")
    ctx.compute("W3", {"W1": W1_ITEMS, "W2": W2_ITEMS, "W3": W3_ITEMS})
    ctx.converge()
    e = ctx.group().epoch
    assert ctx.snapshot() == {
        "group_epoch": e,
        "members": ["W1", "W2", "W3"],
        "target_epoch": e,
        "target": {"W1": str(W1_ITEMS), "W2": str(W2_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {"W1": (e, str(W1_ITEMS), "[]"), "W2": (e, str(W2_ITEMS), "[]"), "W3": (e, str(W3_ITEMS), "[]")},
        "state": "Stable",
    }
    return ctx, e


def w2_expires_and_w3_holds_its_work(ctx: Context, e: int) -> None:
    """Shared first half of both case studies: W2 goes silent and is expired; W3 computes a target
    that keeps W2's work unassigned for DELAY_MS; W1 and W3 move to the new epoch."""
    # W2 fails to heartbeat; W1 and W3 keep heartbeating. After the session timeout W2 is removed
    # and the group epoch bumps. The target (epoch E) still lists W2: the assignor must see lost work.
    ctx.keepalive(45_000, ["W1", "W3"])
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["W1", "W3"],
        "target_epoch": e,
        "target": {"W1": str(W1_ITEMS), "W2": str(W2_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {"W1": (e, str(W1_ITEMS), "[]"), "W3": (e, str(W3_ITEMS), "[]")},
        "state": "Assigning",
    }
    # Session expiry releases at once: nothing is held for W2 (it was not fenced).
    assert ctx.group().held == {} and [ev.member_id for ev in ctx.events(EventType.MEMBER_EXPIRED)] == ["W2"]

    # W3 (the previous executor) is asked to compute.
    r = ctx.heartbeat("W3", e)
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT and r.member_epoch == e
    assert not r.HasField("assignment")
    prep = ctx.prepare("W3")
    assert prep.error_code == ErrorCode.NONE and prep.group_epoch == e + 1
    assert sorted(m.member_id for m in prep.members) == ["W1", "W3"]
    # current_target still lists W2, whose work the assignor now sees as lost.
    assert prep.current_target.assignment_epoch == e
    lost = {m.member_id: str(Items.from_proto(m.connectors_and_tasks)) for m in prep.current_target.members}
    assert lost == {"W1": str(W1_ITEMS), "W2": str(W2_ITEMS), "W3": str(W3_ITEMS)}

    # It keeps W2's work unassigned (giving W2 a chance to come back) and asks for a rebalance in d.
    r2 = ctx.install(
        "W3",
        {"W1": W1_ITEMS, "W3": W3_ITEMS},
        group_epoch=prep.group_epoch,
        delay_ms=DELAY_MS,
        assignor_state=b"lost=W2",
    )
    assert r2.error_code == ErrorCode.NONE
    assert ctx.group().target.scheduled_rebalance_ms == ctx.now + DELAY_MS
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["W1", "W3"],
        "target_epoch": e + 1,
        "target": {"W1": str(W1_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {"W1": (e, str(W1_ITEMS), "[]"), "W3": (e, str(W3_ITEMS), "[]")},
        "state": "Reconciling",
    }

    # W1 and W3 heartbeat: they move to E+1 and get their (unchanged) assignments.
    for mid, its in (("W1", W1_ITEMS), ("W3", W3_ITEMS)):
        r = ctx.heartbeat(mid, e)
        assert r.error_code == ErrorCode.NONE and r.member_epoch == e + 1
        assert str(Items.from_proto(r.assignment.assigned)) == str(its)
        assert not r.assignment.HasField("pending") or len(Items.from_proto(r.assignment.pending)) == 0
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["W1", "W3"],
        "target_epoch": e + 1,
        "target": {"W1": str(W1_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {"W1": (e + 1, str(W1_ITEMS), "[]"), "W3": (e + 1, str(W3_ITEMS), "[]")},
        "state": "Stable",  # Stable, although B's items are unassigned on purpose until the delay ends
    }


def test_worker_leaving_the_group() -> None:
    ctx, e = three_workers()
    w2_expires_and_w3_holds_its_work(ctx, e)

    # Nothing happens before the delay is over...
    ctx.keepalive(DELAY_MS - 5_000, ["W1", "W3"])
    assert ctx.group().epoch == e + 1
    # ...then the coordinator bumps the group epoch (the seed's worker bumps it with a new assignor
    # `reason`; here the assignor returned rebalance_delay_ms and the coordinator keeps the timer).
    ctx.keepalive(5_000, ["W1"])
    bumps = [ev.details["reason"] for ev in ctx.events(EventType.GROUP_EPOCH_BUMPED)]
    assert bumps[-1] == "scheduled_rebalance"
    assert ctx.group().target.scheduled_rebalance_ms == 0
    # Seed printout at 37 lists "W2 - epoch=36, [AT2]" under Member Assignment: a typo for W3.
    assert ctx.snapshot() == {
        "group_epoch": e + 2,
        "members": ["W1", "W3"],
        "target_epoch": e + 1,
        "target": {"W1": str(W1_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {"W1": (e + 1, str(W1_ITEMS), "[]"), "W3": (e + 1, str(W3_ITEMS), "[]")},
        "state": "Assigning",
    }

    # W3 is chosen again; the assignor state it stored with the target comes back in Prepare.
    r = ctx.heartbeat("W3", e + 1)
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    prep = ctx.prepare("W3")
    assert prep.group_epoch == e + 2 and prep.assignor_state == b"lost=W2"
    # The delay is over: W2's work is redistributed (the seed's "BC1" is B's task, B-1 here).
    w1_new = W1_ITEMS | items("BC0")
    w3_new = W3_ITEMS | items("BT0", "BT1")
    assert ctx.install("W3", {"W1": w1_new, "W3": w3_new}, group_epoch=e + 2).error_code == ErrorCode.NONE
    assert ctx.group().target.scheduled_rebalance_ms == 0
    assert ctx.snapshot() == {
        "group_epoch": e + 2,
        "members": ["W1", "W3"],
        "target_epoch": e + 2,
        "target": {"W1": str(w1_new), "W3": str(w3_new)},
        "assignments": {"W1": (e + 1, str(W1_ITEMS), "[]"), "W3": (e + 1, str(W3_ITEMS), "[]")},
        "state": "Reconciling",
    }

    # W1 and W3 heartbeat and get the new work at once (W2 expired: nothing held).
    r = ctx.heartbeat("W1", e + 1)
    assert r.member_epoch == e + 2 and str(Items.from_proto(r.assignment.assigned)) == str(w1_new)
    r = ctx.heartbeat("W3", e + 1)
    assert r.member_epoch == e + 2 and str(Items.from_proto(r.assignment.assigned)) == str(w3_new)
    assert ctx.snapshot() == {
        "group_epoch": e + 2,
        "members": ["W1", "W3"],
        "target_epoch": e + 2,
        "target": {"W1": str(w1_new), "W3": str(w3_new)},
        "assignments": {"W1": (e + 2, str(w1_new), "[]"), "W3": (e + 2, str(w3_new), "[]")},
        "state": "Stable",
    }
    ctx.check_recovery()


def test_worker_bounces() -> None:
    ctx, e = three_workers()
    w2_expires_and_w3_holds_its_work(ctx, e)
    ctx.keepalive(5_000, ["W1", "W3"])

    # W2 comes back before the delay is over. The seed lets it heartbeat with its last epoch (35);
    # but its session expired, so that member id is gone: UNKNOWN_MEMBER_ID, and nothing changes.
    before = ctx.durable()
    r = ctx.heartbeat("W2", e, owned=Items())
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert ctx.durable() == before
    # It rejoins with epoch 0 (keeping its member id): epoch bump. The seed's printout shows the
    # group still at 36 with W2 listed; the rules bump it at once (the seed's text says 37 too).
    # W2 has no target yet: it is moved straight to the current target epoch with nothing to run.
    r = ctx.join("W2")
    assert r.error_code == ErrorCode.NONE and r.member_id == "W2" and r.member_epoch == e + 1
    assert Items.from_proto(r.assignment.assigned) == Items() and Items.from_proto(r.assignment.pending) == Items()
    assert ctx.snapshot() == {
        "group_epoch": e + 2,
        "members": ["W1", "W2", "W3"],
        "target_epoch": e + 1,
        "target": {"W1": str(W1_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {
            "W1": (e + 1, str(W1_ITEMS), "[]"),
            "W2": (e + 1, "[]", "[]"),
            "W3": (e + 1, str(W3_ITEMS), "[]"),
        },
        "state": "Assigning",
    }

    # W3 is chosen; it sees the delay in progress (its assignor state) and W2 back, and gives W2
    # its work back, with no further delay.
    assert ctx.heartbeat("W3", e + 1).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    prep = ctx.prepare("W3")
    assert prep.assignor_state == b"lost=W2" and sorted(m.member_id for m in prep.members) == ["W1", "W2", "W3"]
    assert ctx.install("W3", {"W1": W1_ITEMS, "W2": W2_ITEMS, "W3": W3_ITEMS}, group_epoch=e + 2).error_code == 0
    assert ctx.group().target.scheduled_rebalance_ms == 0
    assert ctx.snapshot()["target"] == {"W1": str(W1_ITEMS), "W2": str(W2_ITEMS), "W3": str(W3_ITEMS)}

    # W1 and W3 move to E+2 keeping their work; W2 gets B's connector and tasks back.
    r = ctx.heartbeat("W2", e + 1)
    assert r.member_epoch == e + 2 and str(Items.from_proto(r.assignment.assigned)) == str(W2_ITEMS)
    ctx.converge()
    assert ctx.snapshot() == {
        "group_epoch": e + 2,
        "members": ["W1", "W2", "W3"],
        "target_epoch": e + 2,
        "target": {"W1": str(W1_ITEMS), "W2": str(W2_ITEMS), "W3": str(W3_ITEMS)},
        "assignments": {
            "W1": (e + 2, str(W1_ITEMS), "[]"),
            "W2": (e + 2, str(W2_ITEMS), "[]"),
            "W3": (e + 2, str(W3_ITEMS), "[]"),
        },
        "state": "Stable",
    }
    # The delayed rebalance was cancelled by the new target: no bump when the old delay would end.
    ctx.keepalive(DELAY_MS, ["W1", "W2", "W3"])
    assert ctx.group().epoch == e + 2
    ctx.check_recovery()
