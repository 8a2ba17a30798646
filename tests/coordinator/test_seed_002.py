"""Seed 002's case studies (KIP-848: Basic, Incremental Revocation & Assignment, Member Failure),
adapted to Connect: topic foo's partitions foo-0..foo-5 become tasks 0-5 of one connector "foo",
and the connector itself ("foo") is one more item, given to the first member A (to B once A fails).

Seed 002 computes targets in the coordinator; we run each case twice: with the assignor service
(service mode: the test answers the coordinator's Assign call) and client-side (worker mode: the
chosen member calls Prepare, then Install). Either way the test decides the target, as the seed does.

Epochs are relative: the connector put creates the group at epoch `b`, so the seed's epoch n is b+n.
Where the seed's printouts contradict the rules they illustrate, the comment says so. Run without
the quiet epoch advance (`SEED_CONFIG`): the seed's members move to each epoch at their own heartbeat.
"""

from __future__ import annotations

import pytest

from connect.coordinator.v1 import assignor_pb2, coordinator_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from connect.coordinator.v1.coordinator_pb2 import ConnectGroupHeartbeatResponse
from services.common.items import Items
from tests.coordinator.harness import SEED_CONFIG, Context, items

MODES = ["service", "worker"]
SERVICE_ASSIGNORS = {"incremental-cooperative": (1, 2), "eager": (0, 0)}


def S(*names: str) -> str:
    """A printed item set: S("foo", "foo-0") == "[foo, foo-0]"."""
    return str(items(*names))


def new_group(mode: str, tasks: int) -> tuple[Context, int]:
    ctx = Context(config=SEED_CONFIG, service_assignors=SERVICE_ASSIGNORS if mode == "service" else None)
    ctx.put_connector("foo", tasks)
    return ctx, ctx.group().epoch


def assign(ctx: Context, mode: str, targets: dict[str, Items]) -> None:
    """The coordinator 'computes and installs the new target assignment'."""
    if mode == "service":
        ctx.service_compute(targets)
    else:
        inflight = ctx.group().in_flight
        assert inflight is not None
        if not inflight.prepared:
            assert ctx.prepare(inflight.executor).error_code == ErrorCode.NONE
        assert ctx.install(inflight.executor, targets).error_code == ErrorCode.NONE


def establish(ctx: Context, mode: str, target: dict[str, Items]) -> None:
    """Reach `target`, everyone converged. With the service, the first Assign call went out when the
    first member joined: each answer is for the members of its snapshot (an older epoch is still
    installed), and the next call starts at once."""
    everything = items("foo", *(f"foo-{t}" for t in range(ctx.group().connectors["foo"])))
    while True:
        inflight = ctx.group().in_flight
        assert inflight is not None
        members = set(inflight.snapshot_members) if inflight.prepared else set(ctx.group().members)
        if set(target) <= members:
            assign(ctx, mode, target)
            break
        assign(ctx, mode, {min(members): everything})
    ctx.converge()


def got(r: ConnectGroupHeartbeatResponse) -> tuple[int, str, str]:
    """(member epoch, assigned, pending) of a heartbeat response that carries an assignment."""
    assert r.error_code in (ErrorCode.NONE, ErrorCode.COMPUTE_ASSIGNMENT), r
    assert r.HasField("assignment"), r
    return r.member_epoch, str(Items.from_proto(r.assignment.assigned)), str(Items.from_proto(r.assignment.pending))


def hb(ctx: Context, mid: str, owned: Items | None = None) -> ConnectGroupHeartbeatResponse:
    """A heartbeat at the member's current epoch, reporting `owned` (by default what it runs now)."""
    m = ctx.group().members[mid]
    return ctx.heartbeat(mid, m.member_epoch, owned=m.owned if owned is None else owned)


@pytest.mark.parametrize("mode", MODES)
def test_basic(mode: str) -> None:
    ctx, b = new_group(mode, 3)
    assert ctx.snapshot() == {
        "group_epoch": b,
        "members": [],
        "target_epoch": 0,
        "target": {},
        "assignments": {},
        "state": "Empty",
    }

    # Member A joins: epoch bump, A added with an empty member assignment.
    r = ctx.join("A")
    assert r.member_epoch == 0
    assert ctx.snapshot() == {
        "group_epoch": b + 1,
        "members": ["A"],
        "target_epoch": 0,
        "target": {},
        "assignments": {"A": (0, "[]", "[]")},
        "state": "Assigning",
    }

    # The new target: everything to A.
    assign(ctx, mode, {"A": items("foo", "foo-0", "foo-1", "foo-2")})
    assert ctx.snapshot() == {
        "group_epoch": b + 1,
        "members": ["A"],
        "target_epoch": b + 1,
        "target": {"A": S("foo", "foo-0", "foo-1", "foo-2")},
        "assignments": {"A": (0, "[]", "[]")},
        "state": "Reconciling",
    }

    # A heartbeats: nothing to revoke, so it moves to epoch 1 with all the items.
    assert got(hb(ctx, "A")) == (b + 1, S("foo", "foo-0", "foo-1", "foo-2"), "[]")
    assert ctx.snapshot()["state"] == "Stable"

    # Member B joins: epoch bump. The seed shows B at epoch 0; B has no part in the current target,
    # so it is moved straight to the target's epoch (b+1), with nothing to run -- as its join
    # response says.
    r = ctx.join("B")
    assert got(r) == (b + 1, "[]", "[]")
    assert ctx.snapshot() == {
        "group_epoch": b + 2,
        "members": ["A", "B"],
        "target_epoch": b + 1,
        "target": {"A": S("foo", "foo-0", "foo-1", "foo-2")},
        "assignments": {"A": (b + 1, S("foo", "foo-0", "foo-1", "foo-2"), "[]"), "B": (b + 1, "[]", "[]")},
        "state": "Assigning",
    }

    assign(ctx, mode, {"A": items("foo", "foo-0", "foo-1"), "B": items("foo-2")})
    assert ctx.snapshot() == {
        "group_epoch": b + 2,
        "members": ["A", "B"],
        "target_epoch": b + 2,
        "target": {"A": S("foo", "foo-0", "foo-1"), "B": S("foo-2")},
        "assignments": {"A": (b + 1, S("foo", "foo-0", "foo-1", "foo-2"), "[]"), "B": (b + 1, "[]", "[]")},
        "state": "Reconciling",
    }

    # B transitions to epoch 2 but cannot get foo-2 until A revokes it.
    assert got(hb(ctx, "B")) == (b + 2, "[]", S("foo-2"))
    assert ctx.snapshot()["assignments"]["B"] == (b + 2, "[]", S("foo-2"))
    assert ctx.group().members["B"].current.state == "UnreleasedItems"

    # A heartbeats: it is asked to revoke foo-2 (a smaller `assigned`), staying at epoch 1.
    assert got(hb(ctx, "A", owned=items("foo", "foo-0", "foo-1", "foo-2"))) == (b + 1, S("foo", "foo-0", "foo-1"), "[]")
    a = ctx.group().members["A"]
    assert a.current.state == "UnrevokedItems" and str(a.current.revoking) == S("foo-2")

    # A heartbeats again and acknowledges the revocation: epoch 2, foo-2 released.
    assert got(hb(ctx, "A", owned=items("foo", "foo-0", "foo-1"))) == (b + 2, S("foo", "foo-0", "foo-1"), "[]")
    assert ctx.snapshot() == {
        "group_epoch": b + 2,
        "members": ["A", "B"],
        "target_epoch": b + 2,
        "target": {"A": S("foo", "foo-0", "foo-1"), "B": S("foo-2")},
        "assignments": {"A": (b + 2, S("foo", "foo-0", "foo-1"), "[]"), "B": (b + 2, "[]", S("foo-2"))},
        "state": "Reconciling",
    }

    # B heartbeats and now gets foo-2.
    assert got(hb(ctx, "B")) == (b + 2, S("foo-2"), "[]")
    assert ctx.snapshot()["state"] == "Stable"

    # Member C joins: epoch bump (C moves to the target epoch b+2, not 0 as printed in the seed).
    assert got(ctx.join("C")) == (b + 2, "[]", "[]")
    assert ctx.snapshot() == {
        "group_epoch": b + 3,
        "members": ["A", "B", "C"],
        "target_epoch": b + 2,
        "target": {"A": S("foo", "foo-0", "foo-1"), "B": S("foo-2")},
        "assignments": {
            "A": (b + 2, S("foo", "foo-0", "foo-1"), "[]"),
            "B": (b + 2, S("foo-2"), "[]"),
            "C": (b + 2, "[]", "[]"),
        },
        "state": "Assigning",
    }

    assign(ctx, mode, {"A": items("foo", "foo-0"), "B": items("foo-2"), "C": items("foo-1")})
    target3 = {"A": S("foo", "foo-0"), "B": S("foo-2"), "C": S("foo-1")}
    assert ctx.snapshot()["target_epoch"] == b + 3 and ctx.snapshot()["target"] == target3

    # B heartbeats: nothing to revoke, so it moves to epoch 3 (its assignment, unchanged, is resent
    # because its member epoch changed).
    assert got(hb(ctx, "B")) == (b + 3, S("foo-2"), "[]")
    assert ctx.snapshot()["assignments"] == {
        "A": (b + 2, S("foo", "foo-0", "foo-1"), "[]"),
        "B": (b + 3, S("foo-2"), "[]"),
        "C": (b + 2, "[]", "[]"),
    }

    # C heartbeats: epoch 3, but foo-1 is still A's: pending.
    assert got(hb(ctx, "C")) == (b + 3, "[]", S("foo-1"))
    assert ctx.snapshot()["assignments"] == {
        "A": (b + 2, S("foo", "foo-0", "foo-1"), "[]"),
        "B": (b + 3, S("foo-2"), "[]"),
        "C": (b + 3, "[]", S("foo-1")),
    }

    # A is asked to revoke foo-1, acknowledges, moves to epoch 3 and releases foo-1.
    assert got(hb(ctx, "A")) == (b + 2, S("foo", "foo-0"), "[]")
    assert got(hb(ctx, "A", owned=items("foo", "foo-0"))) == (b + 3, S("foo", "foo-0"), "[]")
    # The seed's last printout shows B with foo-1 (a typo: B keeps foo-2) and C already running
    # foo-1: C only gets it at its next heartbeat.
    assert ctx.snapshot()["assignments"] == {
        "A": (b + 3, S("foo", "foo-0"), "[]"),
        "B": (b + 3, S("foo-2"), "[]"),
        "C": (b + 3, "[]", S("foo-1")),
    }
    assert got(hb(ctx, "C")) == (b + 3, S("foo-1"), "[]")
    assert ctx.snapshot() == {
        "group_epoch": b + 3,
        "members": ["A", "B", "C"],
        "target_epoch": b + 3,
        "target": target3,
        "assignments": {
            "A": (b + 3, S("foo", "foo-0"), "[]"),
            "B": (b + 3, S("foo-2"), "[]"),
            "C": (b + 3, S("foo-1"), "[]"),
        },
        "state": "Stable",
    }
    ctx.check_recovery()


@pytest.mark.parametrize("mode", MODES)
def test_incremental_revocation_and_assignment(mode: str) -> None:
    ctx, _ = new_group(mode, 6)
    ctx.join("A")
    ctx.join("B")
    establish(ctx, mode, {"A": items("foo", "foo-0", "foo-1", "foo-2"), "B": items("foo-3", "foo-4", "foo-5")})
    e = ctx.group().epoch  # the seed's 21
    assert ctx.snapshot() == {
        "group_epoch": e,
        "members": ["A", "B"],
        "target_epoch": e,
        "target": {"A": S("foo", "foo-0", "foo-1", "foo-2"), "B": S("foo-3", "foo-4", "foo-5")},
        "assignments": {
            "A": (e, S("foo", "foo-0", "foo-1", "foo-2"), "[]"),
            "B": (e, S("foo-3", "foo-4", "foo-5"), "[]"),
        },
        "state": "Stable",
    }

    # C joins: epoch bump, member assignment created (at the current target epoch, not 0 as
    # printed), new target computed.
    assert got(ctx.join("C")) == (e, "[]", "[]")
    assign(ctx, mode, {"A": items("foo", "foo-0", "foo-1"), "B": items("foo-3", "foo-4"), "C": items("foo-2", "foo-5")})
    target = {"A": S("foo", "foo-0", "foo-1"), "B": S("foo-3", "foo-4"), "C": S("foo-2", "foo-5")}
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["A", "B", "C"],
        "target_epoch": e + 1,
        "target": target,
        "assignments": {
            "A": (e, S("foo", "foo-0", "foo-1", "foo-2"), "[]"),
            "B": (e, S("foo-3", "foo-4", "foo-5"), "[]"),
            "C": (e, "[]", "[]"),
        },
        "state": "Reconciling",
    }

    # C heartbeats: epoch 22, but no items yet: both are still owned.
    assert got(hb(ctx, "C")) == (e + 1, "[]", S("foo-2", "foo-5"))
    assert ctx.snapshot()["assignments"]["C"] == (e + 1, "[]", S("foo-2", "foo-5"))

    # A is asked to revoke foo-2; B to revoke foo-5. Both stay at epoch 21 meanwhile.
    assert got(hb(ctx, "A")) == (e, S("foo", "foo-0", "foo-1"), "[]")
    assert got(hb(ctx, "B")) == (e, S("foo-3", "foo-4"), "[]")
    assert str(ctx.group().members["A"].current.revoking) == S("foo-2")
    assert str(ctx.group().members["B"].current.revoking) == S("foo-5")

    # C heartbeats: no change for it, so no assignment in the response.
    r = hb(ctx, "C")
    assert r.error_code == ErrorCode.NONE and r.member_epoch == e + 1 and not r.HasField("assignment")

    # A acknowledges: epoch 22, foo-2 released.
    assert got(hb(ctx, "A", owned=items("foo", "foo-0", "foo-1"))) == (e + 1, S("foo", "foo-0", "foo-1"), "[]")
    # (The seed prints C with foo-2 already; C gets it at its next heartbeat.)
    assert ctx.snapshot()["assignments"] == {
        "A": (e + 1, S("foo", "foo-0", "foo-1"), "[]"),
        "B": (e, S("foo-3", "foo-4"), "[]"),
        "C": (e + 1, "[]", S("foo-2", "foo-5")),
    }

    # C heartbeats: it gets foo-2, which is free now; foo-5 stays pending.
    assert got(hb(ctx, "C")) == (e + 1, S("foo-2"), S("foo-5"))
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["A", "B", "C"],
        "target_epoch": e + 1,
        "target": target,
        "assignments": {
            "A": (e + 1, S("foo", "foo-0", "foo-1"), "[]"),
            "B": (e, S("foo-3", "foo-4"), "[]"),
            "C": (e + 1, S("foo-2"), S("foo-5")),
        },
        "state": "Reconciling",
    }

    # B acknowledges: epoch 22, foo-5 released.
    assert got(hb(ctx, "B", owned=items("foo-3", "foo-4"))) == (e + 1, S("foo-3", "foo-4"), "[]")
    # C heartbeats and gets foo-5 too (the seed prints this state one step early).
    assert got(hb(ctx, "C")) == (e + 1, S("foo-2", "foo-5"), "[]")
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["A", "B", "C"],
        "target_epoch": e + 1,
        "target": target,
        "assignments": {
            "A": (e + 1, S("foo", "foo-0", "foo-1"), "[]"),
            "B": (e + 1, S("foo-3", "foo-4"), "[]"),
            "C": (e + 1, S("foo-2", "foo-5"), "[]"),
        },
        "state": "Stable",
    }
    ctx.check_recovery()


@pytest.mark.parametrize("mode", MODES)
def test_member_failure(mode: str) -> None:
    ctx, _ = new_group(mode, 6)
    for mid in ("A", "B", "C"):
        ctx.join(mid)
    target = {"A": items("foo", "foo-0", "foo-1"), "B": items("foo-3", "foo-4"), "C": items("foo-2", "foo-5")}
    establish(ctx, mode, target)
    e = ctx.group().epoch  # the seed's 22
    printed = {m: str(its) for m, its in target.items()}
    assert ctx.snapshot() == {
        "group_epoch": e,
        "members": ["A", "B", "C"],
        "target_epoch": e,
        "target": printed,
        "assignments": {m: (e, s, "[]") for m, s in printed.items()},
        "state": "Stable",
    }

    # A fails to heartbeat: removed when its session expires, epoch bump. The target still lists A.
    ctx.keepalive(45_000, ["B", "C"])
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["B", "C"],
        "target_epoch": e,
        "target": printed,
        "assignments": {"B": (e, printed["B"], "[]"), "C": (e, printed["C"], "[]")},
        "state": "Assigning",
    }
    # The assignor's input shows A's work as lost: A is in current_target but not a member.
    request: assignor_pb2.AssignRequest | coordinator_pb2.ConnectGroupPrepareAssignmentResponse
    if mode == "service":
        request = ctx.service_request()
    else:
        executor = ctx.group().in_flight.executor  # type: ignore[union-attr]
        assert executor in ("B", "C")
        assert hb(ctx, executor).error_code == ErrorCode.COMPUTE_ASSIGNMENT
        request = ctx.prepare(executor)
    assert request.group_epoch == e + 1
    assert sorted(m.member_id for m in request.members) == ["B", "C"]
    assert sorted(m.member_id for m in request.current_target.members) == ["A", "B", "C"]

    new_target = {"B": items("foo", "foo-3", "foo-4", "foo-0"), "C": items("foo-2", "foo-5", "foo-1")}
    assign(ctx, mode, new_target)
    printed = {m: str(its) for m, its in new_target.items()}
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["B", "C"],
        "target_epoch": e + 1,
        "target": printed,
        "assignments": {"B": (e, S("foo-3", "foo-4"), "[]"), "C": (e, S("foo-2", "foo-5"), "[]")},
        "state": "Reconciling",
    }

    # B and C heartbeat and move to epoch 23 with A's work (expired, so free at once).
    assert got(hb(ctx, "B")) == (e + 1, printed["B"], "[]")
    assert got(hb(ctx, "C")) == (e + 1, printed["C"], "[]")
    assert ctx.snapshot() == {
        "group_epoch": e + 1,
        "members": ["B", "C"],
        "target_epoch": e + 1,
        "target": printed,
        "assignments": {"B": (e + 1, printed["B"], "[]"), "C": (e + 1, printed["C"], "[]")},
        "state": "Stable",
    }
    ctx.check_recovery()
