"""Seed 001's case studies end to end: a real coordinator process over real gRPC on loopback, with
SQLite and with a real PostgreSQL server; the test plays the workers and the client-side assignor."""

from __future__ import annotations

import time

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, all_items
from tests.fixtures.coordinator import Client, CoordinatorProcess

ALL = all_items({"A": 3, "B": 2})
A_ITEMS = all_items({"A": 3})
B_ITEMS = all_items({"B": 2})


def test_w1_and_w2_join(coordinator: CoordinatorProcess) -> None:
    c = Client(coordinator.address)
    c.put_connector("A", 3)
    c.put_connector("B", 2)

    r = c.heartbeat("W1", 0)
    assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT and r.member_epoch == 0
    prep = c.prepare("W1", 0)
    assert (
        prep.error_code == ErrorCode.NONE and prep.group_epoch == 3 and prep.assignor_name == "incremental-cooperative"
    )
    assert {(s.name, s.task_count) for s in prep.connectors} == {("A", 3), ("B", 2)}
    assert c.install("W1", 0, prep.group_epoch, {"W1": ALL}).error_code == ErrorCode.NONE
    r = c.heartbeat("W1", 0)
    assert r.member_epoch == 3 and Items.from_proto(r.assignment.assigned) == ALL
    assert c.view() == {
        "state": "Stable",
        "group_epoch": 3,
        "target_epoch": 3,
        "members": {"W1": (3, "Stable", str(ALL), str(ALL), "[]")},
    }

    r = c.heartbeat("W2", 0)
    assert r.member_epoch == 3  # no target for W2 yet: it moves to the current assignment epoch
    assert c.heartbeat("W1", 3).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    prep = c.prepare("W1", 3)
    assert prep.group_epoch == 4 and {m.member_id for m in prep.members} == {"W1", "W2"}
    assert c.install("W1", 3, 4, {"W1": A_ITEMS, "W2": B_ITEMS}).error_code == ErrorCode.NONE

    r = c.heartbeat("W2", 3)
    assert r.member_epoch == 4 and not r.assignment.assigned.tasks and Items.from_proto(r.assignment.pending) == B_ITEMS
    r = c.heartbeat("W1", 3)  # revoke B's items first
    assert r.member_epoch == 3 and Items.from_proto(r.assignment.assigned) == A_ITEMS
    assert c.view()["members"]["W1"][1] == "UnrevokedItems"
    r = c.heartbeat("W1", 3, owned=A_ITEMS)  # revocation done
    assert r.member_epoch == 4
    r = c.heartbeat("W2", 4)
    assert Items.from_proto(r.assignment.assigned) == B_ITEMS
    assert c.view() == {
        "state": "Stable",
        "group_epoch": 4,
        "target_epoch": 4,
        "members": {
            "W1": (4, "Stable", str(A_ITEMS), str(A_ITEMS), "[]"),
            "W2": (4, "Stable", str(B_ITEMS), str(B_ITEMS), "[]"),
        },
    }
    c.close()


def test_worker_leaving_with_delayed_rebalance(coordinator: CoordinatorProcess) -> None:
    """W2 stops heartbeating; after its session the assignor holds its work for a delay, then
    hands it out; the delayed rebalance is fired by the coordinator."""
    c = Client(coordinator.address)
    c.put_connector("A", 2)
    c.put_connector("B", 2)
    members = ["W1", "W2", "W3"]
    for m in members:
        c.heartbeat(m, 0)
    epoch = c.describe().group_epoch
    w1, w2, w3 = Items.of(["A"], [("A", 0)]), Items.of(["B"], [("B", 0), ("B", 1)]), Items.of([], [("A", 1)])
    prep = c.prepare("W1", c.view()["members"]["W1"][0])
    assert prep.error_code == ErrorCode.NONE, prep
    assert (
        c.install("W1", prep.members[0].member_epoch, prep.group_epoch, {"W1": w1, "W2": w2, "W3": w3}).error_code
        == ErrorCode.NONE
    )
    for m in members:
        c.heartbeat(m, c.view()["members"][m][0])
    assert c.view()["state"] == "Stable"

    # Only W1 and W3 keep heartbeating; W2's session (2 s) expires.
    def beat() -> None:
        for m in ("W1", "W3"):
            r = c.heartbeat(m, c.view()["members"][m][0])
            if r.error_code == ErrorCode.COMPUTE_ASSIGNMENT:
                prep = c.prepare(m, r.member_epoch)
                live = {x.member_id for x in prep.members}
                if "W2" in live:
                    continue
                if prep.assignor_state == b"":
                    # First run after W2 left: keep its work unassigned for 1 s (Connect's delay).
                    c.install(
                        m, r.member_epoch, prep.group_epoch, {"W1": w1, "W3": w3}, delay_ms=1000, state=b"delayed"
                    )
                else:
                    # The delay elapsed: give W2's work out.
                    c.install(
                        m,
                        r.member_epoch,
                        prep.group_epoch,
                        {"W1": w1 | Items.of(["B"]), "W3": w3 | Items.of([], [("B", 0), ("B", 1)])},
                    )

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        beat()
        view = c.view()
        if view["state"] == "Stable" and set(view["members"]) == {"W1", "W3"} and "B" in view["members"]["W1"][2]:
            break
        time.sleep(0.1)
    view = c.view()
    assert set(view["members"]) == {"W1", "W3"}
    assert view["members"]["W1"][2] == str(w1 | Items.of(["B"]))
    assert view["members"]["W3"][2] == str(w3 | Items.of([], [("B", 0), ("B", 1)]))
    assert view["state"] == "Stable"
    # Epochs: W2 expired (+1), the delayed rebalance fired (+1).
    assert view["group_epoch"] == epoch + 2
    c.close()
