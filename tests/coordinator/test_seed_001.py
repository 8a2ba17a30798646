"""Seed 001's case studies against the core, the test acting as the client-side assignor.

Connectors/tasks as in the seed: AC0, AT1, AT2, BC0, BT1 (connector A with tasks 1-2, B with
task 1; we number tasks from 0 as Connect does, so A has task_count 3 and B 2, and task 0 of each
stays in the group too).
"""

from __future__ import annotations

from connect.coordinator.v1.common_pb2 import ErrorCode
from tests.coordinator.harness import Context, items


def seed_group() -> Context:
    ctx = Context()
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


def ctx_items(msg):  # type: ignore[no-untyped-def]
    from services.common.items import Items

    return Items.from_proto(msg)
