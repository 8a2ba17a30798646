"""Crash recovery: SIGKILL the coordinator mid-reconciliation, restart it on the same database, and
check that every group, epoch, target and current assignment survived and the group converges."""

from __future__ import annotations

from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.items import Items, all_items
from tests.fixtures.coordinator import Client, CoordinatorProcess

A_ITEMS = all_items({"A": 3})
B_ITEMS = all_items({"B": 2})


def test_sigkill_mid_reconciliation_then_recover(database_url: str) -> None:
    first = CoordinatorProcess(database_url).start()
    try:
        c = Client(first.address)
        c.put_connector("A", 3)
        c.put_connector("B", 2)
        c.heartbeat("W1", 0)
        prep = c.prepare("W1", 0)
        c.install("W1", 0, prep.group_epoch, {"W1": A_ITEMS | B_ITEMS})
        e1 = c.heartbeat("W1", 0).member_epoch
        c.heartbeat("W2", 0)
        assert c.heartbeat("W1", e1).error_code == ErrorCode.COMPUTE_ASSIGNMENT
        prep = c.prepare("W1", e1)
        c.install("W1", e1, prep.group_epoch, {"W1": A_ITEMS, "W2": B_ITEMS})
        # W1 is told to revoke B's items and W2 waits for them: mid-reconciliation.
        r = c.heartbeat("W1", e1)
        assert Items.from_proto(r.assignment.assigned) == A_ITEMS
        c.heartbeat("W2", e1)
        before = c.view()
        assert before["state"] == "Reconciling"
        assert before["members"]["W1"][1] == "UnrevokedItems"
        assert before["members"]["W2"][4] == str(B_ITEMS)
        c.close()
    finally:
        first.kill()

    second = CoordinatorProcess(database_url).start()
    try:
        c = Client(second.address)
        after = c.view()
        assert after == before  # epochs, targets, current assignments, pending: all survived
        # The group converges: W1 confirms the revocation, W2 gets B's items.
        r = c.heartbeat("W1", e1, owned=A_ITEMS)
        assert r.error_code == ErrorCode.NONE and r.member_epoch == prep.group_epoch
        r = c.heartbeat("W2", prep.group_epoch)
        assert Items.from_proto(r.assignment.assigned) == B_ITEMS
        assert c.view()["state"] == "Stable"
        c.close()
    finally:
        assert second.stop() == 0  # graceful SIGTERM shutdown exits cleanly


def test_restart_while_an_assignment_is_pending(database_url: str) -> None:
    """A group that still needs a target when the coordinator dies: the restarted coordinator asks
    for it again (recovery itself writes records) and serves at once."""
    first = CoordinatorProcess(database_url).start()
    try:
        c = Client(first.address)
        c.put_connector("A", 3)
        assert c.heartbeat("W1", 0).error_code == ErrorCode.COMPUTE_ASSIGNMENT
        assert c.view()["state"] == "Assigning"
        c.close()
    finally:
        first.kill()
    second = CoordinatorProcess(database_url).start()
    try:
        c = Client(second.address)
        assert c.view()["state"] == "Assigning"
        r = c.heartbeat("W1", 0)
        assert r.error_code == ErrorCode.COMPUTE_ASSIGNMENT  # the pending assignment resumed
        prep = c.prepare("W1", 0)
        assert c.install("W1", 0, prep.group_epoch, {"W1": A_ITEMS}).error_code == ErrorCode.NONE
        assert Items.from_proto(c.heartbeat("W1", 0).assignment.assigned) == A_ITEMS
        c.close()
    finally:
        assert second.stop() == 0
