"""Apache Kafka's IncrementalCooperativeAssignorTest scenarios, re-expressed for declarative targets.

Connect answers a join with revocations first and the additions in a follow-up rebalance; here
one answer is the final target (the coordinator sequences revoke-before-assign), so where Connect
asserts "revoke 1 connector and 4 tasks, then assign them" these tests assert the target after
the first run and the number of items that changed owner. The setup is Connect's: two
connectors of four tasks each, workers named worker1, worker2, ...
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from services.assignor import assign
from services.common.items import Items, TaskId
from tests.assignor.kit import DELAY, Group, assert_balanced, connectors

CONNECTORS = connectors(2, 4)  # connector1, connector2: 2 connectors, 8 tasks


def test_worker_joins() -> None:
    group = Group(CONNECTORS).join("worker1")
    first = group.assign()
    assert first.delay == 0
    assert first.counts() == {"worker1": (2, 8)}

    group.join("worker2")
    second = group.assign()
    assert second.delay == 0
    assert second.counts() == {"worker1": (1, 4), "worker2": (1, 4)}
    assert second.moved() == (1, 4)  # Connect: revoke 1 connector and 4 tasks, then assign them
    assert not second.gained("worker1")  # worker1 only gives up work
    # The tasks that move are spread over both connectors, not one connector's pile.
    assert {t.connector for t in second.gained("worker2").tasks} == {"connector1", "connector2"}

    third = group.assign()
    assert third.after == third.before and third.moved() == (0, 0)
    assert third.response.assignor_state == b""


def test_workers_join_after_revocations() -> None:
    group = Group(CONNECTORS).join("worker1")
    group.assign()
    group.join("worker2")
    # worker1 has not released its revoked work yet when worker3 joins: it still runs all of it.
    group.assign(reconcile=False)
    group.join("worker3")
    third = group.assign(reconcile=False)
    assert third.delay == 0
    assert_balanced(third.after)
    assert sorted(third.counts().values()) == [(0, 2), (1, 3), (1, 3)]
    assert third.moved() == (0, 2)  # one task from each of worker1 and worker2
    assert not third.gained("worker1") and not third.gained("worker2")

    group.join("worker4")
    fourth = group.assign()
    assert_balanced(fourth.after)
    assert sorted(c for _, c in fourth.counts().values()) == [2, 2, 2, 2]
    assert fourth.moved() == (0, 2)
    assert fourth.counts()["worker4"] == (0, 2)

    fifth = group.assign()
    assert fifth.after == fifth.before


def test_worker_leaves_permanently() -> None:
    group = Group(CONNECTORS).join("worker1", "worker2")
    first = group.assign()
    assert first.counts() == {"worker1": (1, 4), "worker2": (1, 4)}
    lost = first.after["worker2"]

    # worker2 leaves: nothing moves, its work is held unassigned and the delay starts.
    group.leave("worker2")
    second = group.assign()
    assert second.delay == DELAY
    assert second.after == {"worker1": first.after["worker1"]}
    assert second.response.assignor_state != b""

    # An incidental rebalance halfway: still held, the delay counts down (it does not restart).
    group.advance(DELAY // 2)
    third = group.assign()
    assert third.delay == DELAY // 2
    assert third.after == second.after

    # The delay expires: the lost work goes to the remaining worker and the state is cleared.
    group.advance(DELAY // 2 + 1)
    fourth = group.assign()
    assert fourth.delay == 0
    assert fourth.counts() == {"worker1": (2, 8)}
    assert fourth.gained("worker1") == lost
    assert fourth.response.assignor_state == b""


def test_worker_bounces_with_a_new_member_id() -> None:
    """Connect's testTaskAssignmentWhenWorkerBounces: a dynamic worker comes back under a new id."""
    group = Group(CONNECTORS).join("worker1", "worker2")
    first = group.assign()
    lost = first.after["worker2"]

    group.leave("worker2")
    assert group.assign().delay == DELAY
    group.advance(DELAY // 2)
    assert group.assign().delay == DELAY // 2

    # It returns before the delay expires: a candidate, but nothing is reassigned yet.
    group.advance(DELAY // 4)
    group.join("worker2-new")
    fourth = group.assign()
    assert fourth.delay == DELAY // 4
    assert fourth.counts() == {"worker1": (1, 4), "worker2-new": (0, 0)}

    # The delay expires: the lost work goes to the worker that appeared during it.
    group.advance(DELAY // 4)
    fifth = group.assign()
    assert fifth.delay == 0
    assert fifth.after == {"worker1": first.after["worker1"], "worker2-new": lost}
    assert fifth.response.assignor_state == b""


def test_worker_bounces_with_its_member_id() -> None:
    """Seed 001, "Worker Bounces": W2 rejoins within the delay and the original target comes back."""
    group = Group({"A": 3, "B": 2}).join("W1", "W2", "W3")
    original = group.assign().after

    group.leave("W2")
    held = group.assign()
    assert held.delay == DELAY
    assert held.after == {"W1": original["W1"], "W3": original["W3"]}

    group.advance(DELAY // 3)
    group.join("W2")
    back = group.assign()
    assert back.delay == 0
    assert back.after == original
    assert back.response.assignor_state == b""


def test_static_member_returns_with_a_new_member_id() -> None:
    group = Group(CONNECTORS).join("worker1", instance_id="host-1").join("worker2", instance_id="host-2")
    original = group.assign().after

    group.leave("worker2")
    assert group.assign().delay == DELAY
    group.advance(1_000)
    # The same instance rejoins with a fresh member id: it gets its work back at once.
    group.join("worker2-b", instance_id="host-2")
    back = group.assign()
    assert back.delay == 0
    assert back.after == {"worker1": original["worker1"], "worker2-b": original["worker2"]}


def test_static_members_instance_ids_survive_in_the_state() -> None:
    """The departed member's instance id is only known from the state of the run before it left."""
    group = Group(CONNECTORS).join("worker1", instance_id="host-1").join("worker2", instance_id="host-2")
    original = group.assign().after
    group.leave("worker2")
    group.assign()
    group.join("intruder")  # a dynamic worker joining meanwhile is a candidate, not the owner
    group.join("worker2-b", instance_id="host-2")
    back = group.assign()
    assert back.delay == 0
    # worker2-b gets its work back; only then is the group balanced over the three workers.
    assert back.after["worker2-b"].issubset(original["worker2"])
    assert back.counts()["worker2-b"] == (1, 3)
    assert_balanced(back.after)


def test_leader_leaves_permanently() -> None:
    """In Connect the delay lived in the leader's memory and died with it; here it is in the state,
    so the leader (worker1, which computed the assignments) leaving is like any worker leaving."""
    group = Group(CONNECTORS).join("worker1", "worker2", "worker3")
    first = group.assign()
    # Connect gets (1, 3), (1, 3), (0, 2); the extra task goes to the worker without a connector here.
    assert sorted(first.counts().values()) == [(0, 3), (1, 2), (1, 3)]

    group.leave("worker1")
    second = group.assign()
    assert second.delay == DELAY
    assert second.after == {m: first.after[m] for m in ("worker2", "worker3")}

    group.advance(DELAY)
    third = group.assign()
    assert third.delay == 0
    assert_balanced(third.after)
    assert sorted(third.counts().values()) == [(1, 4), (1, 4)]
    assert third.moved() == (0, 0)  # lost work is not counted: it had no live owner
    assert not third.revoked("worker2") and not third.revoked("worker3")


def test_leader_bounces() -> None:
    group = Group(CONNECTORS).join("worker1", "worker2", "worker3")
    first = group.assign()
    group.leave("worker1")
    group.assign()
    group.advance(10)
    group.join("worker1-new")
    during = group.assign()
    assert during.delay == DELAY - 10
    group.advance(DELAY)
    after = group.assign()
    assert after.after["worker1-new"] == first.after["worker1"]
    assert after.after == {"worker1-new": first.after["worker1"], **{m: first.after[m] for m in ("worker2", "worker3")}}


def test_state_lost_during_the_delay_reassigns_at_once() -> None:
    """Connect's new leader starts from a clean slate and reassigns at once; losing the state is the
    equivalent here (the coordinator forgot it, or it is garbage): no crash, no work left behind."""
    group = Group(CONNECTORS).join("worker1", "worker2", "worker3")
    group.assign()
    group.leave("worker1")
    assert group.assign().delay == DELAY
    group.state = b"\x00not json"
    result = group.assign()
    assert result.delay == 0
    assert_balanced(result.after)
    assert sorted(result.counts().values()) == [(1, 4), (1, 4)]


def test_no_delay_when_max_delay_is_zero() -> None:
    group = Group(CONNECTORS, delay_ms=0).join("worker1", "worker2")
    group.assign()
    group.leave("worker2")
    result = group.assign()
    assert result.delay == 0
    assert result.counts() == {"worker1": (2, 8)}
    assert result.response.assignor_state == b""


def test_default_delay_applies_without_config() -> None:
    group = Group(CONNECTORS, delay_ms=None).join("worker1", "worker2")
    group.assign()
    group.leave("worker2")
    assert group.assign().delay == 300_000


def test_workers_join_during_the_delay_get_the_lost_work() -> None:
    group = Group(connectors(3, 4)).join("worker1", "worker2", "worker3")
    first = group.assign()
    lost = first.after["worker3"]

    group.leave("worker3")
    group.assign()
    group.advance(1_000)
    group.join("worker4", "worker5")
    group.connectors["connector4"] = 2  # new work is not held back: it is assigned at once
    during = group.assign()
    assert during.delay == DELAY - 1_000
    new = Items.of(["connector4"], [("connector4", 0), ("connector4", 1)])
    assert new.issubset(during.gained("worker4") | during.gained("worker5"))
    assert not during.revoked("worker1") and not during.revoked("worker2")  # no balancing revocations
    assert (during.after["worker4"] | during.after["worker5"]) == new

    group.advance(DELAY)
    after = group.assign()
    assert after.delay == 0
    assert_balanced(after.after)
    # The lost work went to the workers that joined during the delay.
    assert lost.issubset(after.after["worker4"] | after.after["worker5"])


def test_second_departure_during_the_delay_shares_its_deadline() -> None:
    group = Group(connectors(3, 3)).join("worker1", "worker2", "worker3")
    group.assign()
    group.leave("worker2")
    group.assign()
    group.advance(DELAY // 2)
    group.leave("worker3")
    second = group.assign()
    assert second.delay == DELAY // 2
    assert second.counts() == {"worker1": (1, 3)}
    group.advance(DELAY // 2)
    assert group.assign().counts() == {"worker1": (3, 9)}


def test_lost_work_of_a_deleted_connector_is_forgotten() -> None:
    group = Group({"a": 2, "b": 2}).join("worker1", "worker2")
    group.target = {
        "worker1": Items.of(["a"], [("a", 0), ("a", 1)]),
        "worker2": Items.of(["b"], [("b", 0), ("b", 1)]),
    }
    group.leave("worker2")
    assert group.assign().delay == DELAY
    # Deleting everything worker2 had ends the delay: nothing is left to wait for.
    del group.connectors["b"]
    result = group.assign()
    assert result.delay == 0
    assert result.after == {"worker1": Items.of(["a"], [("a", 0), ("a", 1)])}
    assert result.response.assignor_state == b""


def test_connectors_deleted() -> None:
    group = Group(connectors(3, 4)).join("worker1", "worker2")
    first = group.assign()
    assert sorted(first.counts().values()) == [(1, 6), (2, 6)]

    del group.connectors["connector3"]
    second = group.assign()
    assert second.delay == 0
    assert sorted(second.counts().values()) == [(1, 4), (1, 4)]
    deleted = Items.of(["connector3"], [("connector3", t) for t in range(4)])
    # The deleted connector's tasks were spread, so the remaining tasks stay where they are; at
    # most one connector moves, if the deleted one was not on the worker that had two.
    for m in second.after:
        assert (first.after[m] - deleted).tasks == second.after[m].tasks
    assert second.moved()[0] <= 1


def test_task_count_reduced() -> None:
    group = Group({"c": 6}).join("worker1", "worker2")
    first = group.assign()
    group.connectors["c"] = 4
    second = group.assign()
    gone = Items.of([], [("c", 4), ("c", 5)])
    assert second.after == {m: items - gone for m, items in first.after.items()}
    assert_balanced(second.after)
    assert second.moved() == (0, 0)


def test_duplicated_assignments_are_resolved() -> None:
    """Connect's duplicated-assignment tests: two members report the same items."""
    group = Group(CONNECTORS).join("worker1", "worker2")
    group.assign()
    both = Items.of(["connector1"], [("connector1", 0), ("connector1", 1)])
    group.target["worker2"] = group.target["worker2"] | both
    group.target["worker1"] = group.target["worker1"] | both
    result = group.assign()  # the kit checks nothing is assigned twice
    assert_balanced(result.after)
    assert sorted(result.counts().values()) == [(1, 4), (1, 4)]


def test_duplicated_owned_items_without_a_target() -> None:
    """No target (e.g. a fresh coordinator): stick to what members run, once each."""
    group = Group(CONNECTORS).join("worker1", "worker2")
    running = Items.of(["connector1", "connector2"], [("connector1", t) for t in range(4)])
    group.owned = {"worker1": running, "worker2": running}
    result = group.assign()
    assert_balanced(result.after)
    assert result.after["worker1"].connectors == {"connector1"}


def test_owned_fills_in_where_the_target_has_nothing() -> None:
    group = Group(CONNECTORS).join("worker1", "worker2")
    running = {
        "worker1": Items.of(["connector2"], [("connector2", t) for t in range(4)]),
        "worker2": Items.of(["connector1"], [("connector1", t) for t in range(4)]),
    }
    group.owned = dict(running)
    result = group.assign()
    assert result.after == running


def test_assign_into_a_balanced_group() -> None:
    """testAssignConnectorsWhenBalanced / testAssignTasksWhenBalanced: 5 new of each over 3 workers."""
    names = [f"connector{i:02d}" for i in range(11)]
    group = Group(dict.fromkeys(names, 0) | {"connector00": 11}).join("worker0", "worker1", "worker2")
    group.target = {
        f"worker{i}": Items.of(names[2 * i : 2 * i + 2], [("connector00", 2 * i), ("connector00", 2 * i + 1)])
        for i in range(3)
    }
    result = group.assign()
    assert all(not result.revoked(m) for m in result.after)
    # Connectors are dealt round-robin in order, exactly as Connect expects.
    assert result.gained("worker0").connectors == {"connector06", "connector09"}
    assert result.gained("worker1").connectors == {"connector07", "connector10"}
    assert result.gained("worker2").connectors == {"connector08"}
    # Connect also gives worker0 and worker1 the extra tasks (loads 8, 8, 6); here the worker with
    # fewer connectors gets one of them, so the total load is even too.
    assert {m: len(result.gained(m).tasks) for m in result.after} == {"worker0": 2, "worker1": 1, "worker2": 2}
    assert sorted(len(items) for items in result.after.values()) == [7, 7, 8]


def test_assign_into_an_imbalanced_group() -> None:
    """testAssignConnectorsWhenImbalanced: loads 2, 3, 4, 0 plus 15 new of each -> 6 each."""
    names = [f"connector{i:02d}" for i in range(24)]
    group = Group(dict.fromkeys(names, 0) | {"connector00": 24})
    group.join("worker0", "worker1", "worker2", "worker3")
    group.target = {
        f"worker{w}": Items.of(names[lo:hi], [("connector00", t) for t in range(lo, hi)])
        for w, (lo, hi) in enumerate([(0, 2), (2, 5), (5, 9)])
    }
    result = group.assign()
    assert set(result.counts().values()) == {(6, 6)}
    assert all(not result.revoked(m) for m in result.after)


def test_unchanged_balanced_group_changes_nothing() -> None:
    group = Group(connectors(5, 7)).join(*(f"worker{i}" for i in range(4)))
    group.assign()
    again = group.assign()
    assert again.after == again.before
    # The unchanged members come back as the very messages they were sent in.
    assert again.response == group.assign().response


def test_retry_of_the_same_input_gives_the_same_answer() -> None:
    """testTaskAssignmentWhenFirstAssignmentAttemptFails: the coordinator retries with the same input."""
    group = Group(CONNECTORS).join("worker1", "worker2", "worker3")
    request = group.request()
    assert assign(request).SerializeToString(deterministic=True) == assign(request).SerializeToString(
        deterministic=True
    )


def test_tasks_of_one_connector_are_spread() -> None:
    group = Group({"a": 6, "b": 6}).join("worker1", "worker2", "worker3")
    first = group.assign()
    for items in first.after.values():
        assert Counter(t.connector for t in items.tasks) == {"a": 2, "b": 2}
    # Each worker gives one task to the newcomer, and not all of them from the same connector.
    group.join("worker4")
    result = group.assign()
    assert result.moved() == (0, 3)
    for items in result.after.values():
        assert max(Counter(t.connector for t in items.tasks).values()) <= 2


def test_version_follows_the_lowest_member() -> None:
    group = Group(CONNECTORS).join("worker1", "worker2")
    request = group.request()
    request.members[1].assignor.version = 1
    response = assign(request)
    assert {m.version for m in response.members} == {1}
    assert {m.version for m in assign(group.request()).members} == {2}


def test_new_member_receives_tasks_from_several_workers() -> None:
    group = Group({"a": 10, "b": 10}).join("w1", "w2", "w3", "w4")
    group.assign()
    group.join("w5")
    result = group.assign()
    assert result.counts()["w5"] == (0, 4)
    assert result.moved() == (0, 4)
    assert len({m for m in ("w1", "w2", "w3", "w4") if result.revoked(m)}) == 4
    assert all(isinstance(t, TaskId) for t in result.after["w5"].tasks)


_HISTORY = """
import hashlib
from tests.assignor.kit import Group, connectors
group = Group(connectors(7, 5)).join(*(f"w{i}" for i in range(5)))
digest = hashlib.sha256()
for step in ("assign", "leave w3", "assign", "join n1", "join n2", "assign", "advance", "assign", "join n3", "assign"):
    if step == "assign":
        digest.update(group.assign().response.SerializeToString(deterministic=True))
    elif step == "advance":
        group.advance(10**6)
    else:
        verb, member = step.split()
        getattr(group, verb)(member)
print(digest.hexdigest())
"""


def test_same_answer_in_every_process() -> None:
    """Replicas must agree: nothing may depend on set iteration order, which varies with the hash seed."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", _HISTORY],
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1
