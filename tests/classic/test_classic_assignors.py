"""Connect's classic assignors (services.classic.assignors) against Kafka's own tests.

Each test is named after the Kafka test it ports (apache/kafka, connect/runtime/src/test/java/org/
apache/kafka/connect/runtime/distributed/): IncrementalCooperativeAssignorTest (its harness is
``Cluster`` below: workers apply each answer before the next rebalance, the generation grows by one,
time is a mock clock), WorkerCoordinatorIncrementalTest and WorkerCoordinatorTest (exact answers of
a leader). The expected values are the Kafka tests' assertions.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.classic.assignors import (
    CONFIG_MISMATCH,
    DEFAULT_MAX_DELAY_MS,
    NO_ERROR,
    ClassicAssignment,
    IncrementalCooperativeAssignor,
    MemberInfo,
    WorkerLoad,
    assign_connectors,
    assign_tasks,
    eager_assign,
)
from services.common.items import EMPTY, Items, TaskId

CONFIG_OFFSET = 618


def url(worker: str) -> str:
    return f"http://{worker}:8083"


def workers_items(answer: dict[str, ClassicAssignment]) -> dict[str, tuple[Items, Items]]:
    return {m: (a.assigned, a.revoked) for m, a in answer.items()}


class Cluster:
    """IncrementalCooperativeAssignorTest's harness: ``memberAssignments`` (what each worker runs),
    ``connectors`` (name -> task count), a generation starting at 1000 and a mock clock."""

    def __init__(self, max_delay: int = DEFAULT_MAX_DELAY_MS) -> None:
        self.rebalance_delay = max_delay
        self.time = 1_700_000_000_000
        self.generation = 1000
        self.connectors: dict[str, int] = {"connector1": 4, "connector2": 4}
        self.members: dict[str, Items] = {"worker1": EMPTY}
        self.assignor = IncrementalCooperativeAssignor(max_delay)
        self.answer: dict[str, ClassicAssignment] = {}

    def init_assignor(self) -> None:
        """A new leader: a fresh assignor (Kafka's initAssignor)."""
        self.assignor = IncrementalCooperativeAssignor(self.rebalance_delay)
        self.assignor.previous_generation_id = self.generation

    def sleep(self, ms: int) -> None:
        self.time += ms

    def rebalance(self, *, failed: bool = False, mismatched_generation: bool = False) -> None:
        """performStandardRebalance / performFailedRebalance / performRebalanceWithMismatchedGeneration."""
        self.generation += 1
        last_completed = self.generation - 2 if mismatched_generation else self.generation - 1
        members = {w: MemberInfo(url(w), CONFIG_OFFSET, items) for w, items in self.members.items()}
        self.answer = self.assignor.assign(
            members,
            self.connectors,
            self.generation,
            self.time,
            min(members),
            CONFIG_OFFSET,
            last_completed_generation=last_completed,
        )
        assert set(self.answer) == set(self.members)
        self.assert_no_redundant_assignments()
        if not failed:
            for worker, a in self.answer.items():
                owned = self.members[worker]
                assert a.revoked.issubset(owned), f"{worker} revokes what it does not run"
                assert a.error == NO_ERROR and a.config_offset == CONFIG_OFFSET and a.delay_ms == self.assignor.delay
                self.members[worker] = (owned - a.revoked) | a.assigned

    def add_workers(self, *workers: str) -> None:
        for w in workers:
            assert w not in self.members
            self.members[w] = EMPTY

    def add_worker(self, worker: str, connectors: list[str], tasks: list[tuple[str, int]]) -> None:
        assert worker not in self.members
        self.members[worker] = Items.of(connectors, tasks)

    def remove_workers(self, *workers: str) -> None:
        for w in workers:
            del self.members[w]

    # -- assertions of IncrementalCooperativeAssignorTest --

    def assert_delay(self, expected: int) -> None:
        assert self.assignor.delay == expected

    def assert_workers(self, *workers: str) -> None:
        assert set(self.answer) == set(workers)

    def connector_allocations(self) -> list[int]:
        return sorted(len(items.connectors) for items in self.members.values())

    def task_allocations(self) -> list[int]:
        return sorted(len(items.tasks) for items in self.members.values())

    def assert_connector_allocations(self, *counts: int) -> None:
        assert self.connector_allocations() == sorted(counts)

    def assert_task_allocations(self, *counts: int) -> None:
        assert self.task_allocations() == sorted(counts)

    def assert_allocations(self, connectors: tuple[int, ...], tasks: tuple[int, ...]) -> None:
        self.assert_connector_allocations(*connectors)
        self.assert_task_allocations(*tasks)

    def assert_stable_after_the_delay(self) -> None:
        """A rebalance after the current delay changes nothing."""
        self.sleep(self.assignor.delay)
        self.rebalance()
        self.assert_delay(0)
        self.assert_empty_assignment()

    def assert_no_revocations(self) -> None:
        assert all(not a.revoked for a in self.answer.values())

    def assert_empty_assignment(self) -> None:
        assert all(not a.assigned and not a.revoked for a in self.answer.values())

    def assert_no_redundant_assignments(self) -> None:
        new = Counter(k for a in self.answer.values() for k in a.assigned.item_keys())
        assert all(n == 1 for n in new.values()), f"assigned twice: {new}"
        running = {k for items in self.members.values() for k in items.item_keys()}
        assert running.isdisjoint(new), "newly assigned items that already run"

    def assert_balanced_and_complete_allocation(self) -> None:
        for counts in (self.connector_allocations(), self.task_allocations()):
            assert counts[-1] - counts[0] <= 1, counts
        assigned_connectors = [c for items in self.members.values() for c in items.connectors]
        assigned_tasks = [t for items in self.members.values() for t in items.tasks]
        assert sorted(assigned_connectors) == sorted(self.connectors)
        assert sorted(assigned_tasks) == sorted(TaskId(c, t) for c, n in self.connectors.items() for t in range(n))


def three_connectors_then_a_second_worker(max_delay: int = DEFAULT_MAX_DELAY_MS) -> Cluster:
    """The opening the Kafka tests share: three 4-task connectors on worker1, then worker2 joins and
    the first rebalance only revokes."""
    c = Cluster(max_delay)
    c.connectors["connector3"] = 4
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker1")
    c.assert_allocations((3,), (12,))
    c.assert_balanced_and_complete_allocation()
    c.add_workers("worker2")
    c.rebalance()
    c.assert_workers("worker1", "worker2")
    c.assert_allocations((0, 2), (0, 6))
    return c


# -- IncrementalCooperativeAssignorTest: whole rebalances -----------------------------------------


def test_task_assignment_when_worker_joins() -> None:  # testTaskAssignmentWhenWorkerJoins
    c = Cluster()
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker1")
    c.assert_allocations((2,), (8,))
    c.assert_balanced_and_complete_allocation()

    # A second worker joins: the first rebalance only revokes...
    c.add_workers("worker2")
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker1", "worker2")
    c.assert_allocations((0, 1), (0, 4))
    assert not c.answer["worker2"].assigned and c.answer["worker1"].revoked

    # ...and the follow-up rebalance gives the revoked work to the new worker.
    c.rebalance()
    c.assert_no_revocations()
    c.assert_delay(0)
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()

    c.assert_stable_after_the_delay()


def test_assignments_when_workers_join_after_revocations() -> None:  # testAssignmentsWhenWorkersJoinAfterRevocations
    c = three_connectors_then_a_second_worker()
    # A successive revoking rebalance: no revocations, a backoff delay instead.
    c.add_workers("worker3")
    c.rebalance()
    assert c.assignor.delay > 0
    c.assert_workers("worker1", "worker2", "worker3")
    c.assert_allocations((0, 1, 2), (3, 3, 6))

    c.sleep(c.assignor.delay)
    c.add_workers("worker4")
    c.rebalance()
    c.assert_allocations((0, 0, 1, 1), (0, 3, 3, 3))

    c.add_workers("worker5")
    c.rebalance()
    assert c.assignor.delay > 40
    c.assert_allocations((0, 0, 1, 1, 1), (1, 2, 3, 3, 3))

    c.sleep(c.assignor.delay)
    c.add_workers("worker6")
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((0, 0, 0, 1, 1, 1), (0, 1, 2, 2, 2, 2))

    c.rebalance()
    c.assert_allocations((0, 0, 0, 1, 1, 1), (2, 2, 2, 2, 2, 2))
    c.assert_balanced_and_complete_allocation()


def test_backoff_delays_are_connects() -> None:
    """KAFKA-12495's backoff as Kafka computes it: ExponentialBackoff(1, 40, maxDelay, 0), so the
    n-th successive revoking rebalance waits 40^n ms, at most the max delay."""
    c = three_connectors_then_a_second_worker()
    delays = []
    for n in range(3, 9):
        c.add_workers(f"worker{n}")
        c.rebalance()
        if c.assignor.delay:
            delays.append(c.assignor.delay)
            c.sleep(c.assignor.delay)
    assert delays[:2] == [40, 1600]


def test_immediate_revocations_when_max_delay_is0() -> None:  # testImmediateRevocationsWhenMaxDelayIs0
    c = three_connectors_then_a_second_worker(max_delay=0)
    # Successive revoking rebalances, but the max delay is 0: revoke anyway.
    c.add_workers("worker3")
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((0, 1, 1), (3, 3, 4))

    c.rebalance()
    c.assert_no_revocations()
    c.assert_allocations((1, 1, 1), (4, 4, 4))
    c.assert_balanced_and_complete_allocation()


def test_successive_revocations_when_max_delay_is_equal_to_exp_back_off_initial_interval() -> None:
    # testSuccessiveRevocationsWhenMaxDelayIsEqualToExpBackOffInitialInterval
    c = three_connectors_then_a_second_worker(max_delay=1)
    c.add_workers("worker3")
    c.rebalance()
    c.assert_delay(1)
    c.assert_allocations((0, 1, 2), (3, 3, 6))


def test_worker_joining_during_delayed_rebalance() -> None:  # testWorkerJoiningDuringDelayedRebalance
    c = three_connectors_then_a_second_worker()
    c.add_workers("worker3")
    c.rebalance()
    assert c.assignor.delay > 0
    c.assert_no_revocations()
    c.assert_allocations((0, 1, 2), (3, 3, 6))

    # Joining while the delayed rebalance is active: no revocations, the delay counts down.
    c.sleep(c.assignor.delay // 2)
    c.add_workers("worker4")
    c.rebalance()
    assert c.assignor.delay > 0
    c.assert_no_revocations()
    c.assert_allocations((0, 0, 1, 2), (0, 3, 3, 6))

    c.sleep(c.assignor.delay)
    c.add_workers("worker5")
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((0, 0, 0, 1, 1), (0, 0, 2, 3, 3))

    c.rebalance()
    c.assert_delay(0)
    c.assert_no_revocations()
    c.assert_allocations((0, 0, 1, 1, 1), (2, 2, 2, 3, 3))
    c.assert_balanced_and_complete_allocation()


def test_task_assignment_when_worker_leaves_permanently() -> None:  # testTaskAssignmentWhenWorkerLeavesPermanently
    c = Cluster()
    c.add_workers("worker2")
    c.rebalance()
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()

    # The follower leaves: its work is held, the delay starts at its maximum.
    c.remove_workers("worker2")
    c.rebalance()
    c.assert_delay(c.rebalance_delay)
    c.assert_workers("worker1")
    c.assert_empty_assignment()
    assert c.answer["worker1"].delay_ms == c.rebalance_delay

    c.sleep(c.rebalance_delay // 2)
    c.rebalance()
    c.assert_delay(c.rebalance_delay // 2)
    c.assert_empty_assignment()

    c.sleep(c.rebalance_delay // 2 + 1)
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((2,), (8,))
    c.assert_balanced_and_complete_allocation()


def test_task_assignment_when_worker_bounces() -> None:  # testTaskAssignmentWhenWorkerBounces
    c = Cluster()
    c.add_workers("worker2")
    c.rebalance()
    c.assert_balanced_and_complete_allocation()
    lost = c.members["worker2"]

    c.remove_workers("worker2")
    c.rebalance()
    c.assert_delay(c.rebalance_delay)
    c.assert_empty_assignment()

    c.sleep(c.rebalance_delay // 2)
    c.rebalance()
    c.assert_delay(c.rebalance_delay // 2)
    c.assert_empty_assignment()

    # It comes back within the delay: nothing is reassigned until the delay expires...
    c.sleep(c.rebalance_delay // 4)
    c.add_workers("worker2")
    c.rebalance()
    c.assert_delay(c.rebalance_delay // 4)
    c.assert_workers("worker1", "worker2")
    c.assert_empty_assignment()

    # ...then it gets its work back (it is the candidate), with no revocations.
    c.sleep(c.rebalance_delay // 4)
    c.rebalance()
    c.assert_delay(0)
    c.assert_no_revocations()
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()
    assert c.members["worker2"] == lost


def test_lost_work_a_candidate_cannot_keep_is_not_revoked_from_it() -> None:
    """Deviation from Connect's answer, not its state: when the delay expires the only candidate
    gets all the lost work, and the load-balancing revocations of the same round take back what
    is beyond its share -- items it never ran. Connect names them in the candidate's ``revoked``;
    here the answer names only what the member runs, while the assignor's state (what it counts
    as revoked, what the follow-up rebalance hands out) is Connect's."""
    c = Cluster()
    c.add_workers("worker2", "worker3")
    c.rebalance()
    c.remove_workers("worker1", "worker2")
    c.rebalance()
    c.add_workers("worker4")
    c.sleep(1000)
    c.rebalance()
    assert c.assignor.candidate_workers == ["worker4"]
    c.sleep(c.assignor.delay)
    c.rebalance()
    held_back = Items.of(["connector1"], [("connector1", 0), ("connector1", 1)])
    assert c.answer["worker4"].assigned == Items.of(
        ["connector2"], [("connector1", 3), ("connector2", 0), ("connector2", 2), ("connector2", 3)]
    )
    assert c.answer["worker4"].revoked == EMPTY
    assert c.assignor.previous_revocation == held_back
    c.rebalance()
    assert c.answer["worker3"].assigned == held_back
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()


def the_leader_gone() -> Cluster:
    """Three workers balanced, then the leader (worker1) leaves: the new leader starts from a
    clean slate (a new assignor, no delay) and reassigns at once."""
    c = Cluster()
    c.add_workers("worker2", "worker3")
    c.rebalance()
    c.assert_allocations((0, 1, 1), (2, 3, 3))
    c.assert_balanced_and_complete_allocation()
    c.remove_workers("worker1")
    c.init_assignor()
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker2", "worker3")
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()
    return c


def test_task_assignment_when_leader_leaves_permanently() -> None:  # testTaskAssignmentWhenLeaderLeavesPermanently
    c = the_leader_gone()
    c.rebalance()
    c.assert_delay(0)
    c.assert_empty_assignment()


def test_task_assignment_when_leader_bounces() -> None:  # testTaskAssignmentWhenLeaderBounces
    c = the_leader_gone()
    # The old leader returns as a follower: a new worker, revocation first.
    c.add_workers("worker1")
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker1", "worker2", "worker3")
    c.assert_allocations((0, 1, 1), (0, 3, 3))

    c.rebalance()
    c.assert_delay(0)
    c.assert_no_revocations()
    c.assert_allocations((0, 1, 1), (2, 3, 3))
    c.assert_balanced_and_complete_allocation()


def test_task_assignment_when_first_assignment_attempt_fails() -> None:
    # testTaskAssignmentWhenFirstAssignmentAttemptFails
    c = Cluster()
    c.add_workers("worker2")
    c.rebalance(failed=True)
    c.assert_delay(0)
    c.assert_allocations((0, 0), (0, 0))

    # Same members, same (empty) assignments: the missing work is reassigned as new, no delay.
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()


@pytest.mark.parametrize(
    "leader_sync_failed",
    [
        pytest.param(False, id="testTaskAssignmentWhenSubsequentAssignmentAttemptFails"),
        pytest.param(True, id="testTaskAssignmentWhenSubsequentAssignmentAttemptFailsOutsideTheAssignor"),
    ],
)
def test_task_assignment_when_subsequent_assignment_attempt_fails(leader_sync_failed: bool) -> None:
    c = Cluster()
    c.add_workers("worker2")
    c.rebalance()
    c.assert_balanced_and_complete_allocation()

    # A third worker joins; the revoking answer never reaches the workers.
    c.add_workers("worker3")
    c.rebalance(failed=True)
    c.assert_delay(0)
    c.assert_allocations((0, 1, 1), (0, 4, 4))

    # The revocation never took effect: a successive revoking rebalance, so a delay, no revocation.
    # Outside the assignor: the leader's own sync failed too, so its last completed generation is
    # not the one it computed and it forgets its previous assignment.
    c.rebalance(mismatched_generation=leader_sync_failed)
    assert c.assignor.delay > 0
    c.assert_allocations((0, 1, 1), (0, 4, 4))

    c.sleep(c.assignor.delay)
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((0, 1, 1), (0, 3, 3))

    c.rebalance()
    c.assert_allocations((0, 1, 1), (2, 3, 3))
    c.assert_balanced_and_complete_allocation()


def test_task_assignment_when_connectors_are_deleted() -> None:  # testTaskAssignmentWhenConnectorsAreDeleted
    c = Cluster()
    c.connectors["connector3"] = 4
    c.add_workers("worker2")
    c.rebalance()
    c.assert_allocations((1, 2), (6, 6))
    c.assert_balanced_and_complete_allocation()

    del c.connectors["connector3"]
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations((1, 1), (4, 4))
    c.assert_balanced_and_complete_allocation()
    revoked = c.answer["worker1"].revoked | c.answer["worker2"].revoked
    assert "connector3" in revoked.connectors
    assert {t for t in revoked.tasks if t.connector == "connector3"} == {TaskId("connector3", t) for t in range(4)}


def test_connectors_added_are_assigned_without_revocations() -> None:
    """New connectors go to the least loaded workers in one rebalance (``created``), nothing revoked."""
    c = Cluster()
    c.add_workers("worker2", "worker3")
    c.rebalance()
    c.assert_balanced_and_complete_allocation()
    c.connectors["connector3"] = 4
    c.rebalance()
    c.assert_no_revocations()
    c.assert_delay(0)
    c.assert_balanced_and_complete_allocation()
    added = [a.assigned for a in c.answer.values()]
    assert sorted(k for items in added for k in map(str, items.item_keys())) == [
        "connector3",
        "connector3-0",
        "connector3-1",
        "connector3-2",
        "connector3-3",
    ]


@pytest.mark.parametrize(
    ("deleted", "revoking", "balanced"),
    [
        pytest.param(
            False, ((0, 1), (0, 4)), ((1, 1), (4, 4)), id="testTaskAssignmentWhenTasksDuplicatedInWorkerAssignment"
        ),
        pytest.param(
            True,
            ((0, 1), (0, 2)),
            ((0, 1), (2, 2)),
            id="testDuplicatedAssignmentHandleWhenTheDuplicatedAssignmentsDeleted",
        ),
    ],
)
def test_duplicated_assignments(
    deleted: bool, revoking: tuple[tuple[int, ...], tuple[int, ...]], balanced: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    c = Cluster()
    c.rebalance()
    c.assert_allocations((2,), (8,))
    if deleted:
        del c.connectors["connector1"]

    # A worker joins claiming connector1 and its tasks, which worker1 runs too: both revoke them
    # (and the deleted ones are revoked anyway).
    c.add_worker("worker2", ["connector1"], [("connector1", t) for t in range(4)])
    c.rebalance()
    c.assert_delay(0)
    c.assert_allocations(*revoking)
    assert all(not a.assigned for a in c.answer.values())

    c.rebalance()
    c.assert_delay(0)
    c.assert_no_revocations()
    c.assert_allocations(*balanced)
    c.assert_balanced_and_complete_allocation()

    c.assert_stable_after_the_delay()


def test_scheduled_delay_is_disabled() -> None:  # testScheduledDelayIsDisabled
    c = Cluster(max_delay=0)
    c.add_workers("worker2")
    c.rebalance()
    c.assert_balanced_and_complete_allocation()
    c.remove_workers("worker2")
    c.rebalance()
    c.assert_delay(0)
    c.assert_workers("worker1")
    c.assert_allocations((2,), (8,))
    c.assert_balanced_and_complete_allocation()


# -- IncrementalCooperativeAssignorTest: assignConnectors / assignTasks ----------------------------


def new_connectors(start: int, end: int) -> list[str]:
    return [f"connector{i}" for i in range(start, end)]


def new_tasks(start: int, end: int, connector: str = "task") -> list[TaskId]:
    return [TaskId(connector, i) for i in range(start, end)]


def worker_load(worker: str, c_start: int, c_num: int, t_start: int, t_num: int) -> WorkerLoad:
    return WorkerLoad(worker, new_connectors(c_start, c_start + c_num), new_tasks(t_start, t_start + t_num))


def test_assign_connectors_when_balanced() -> None:  # testAssignConnectorsWhenBalanced
    loads = [worker_load(f"worker{i}", i * 2, 2, i * 2, 2) for i in range(3)]
    assign_connectors(loads, new_connectors(6, 11))
    assert [(w.worker, w.connectors[2:]) for w in loads] == [
        ("worker0", ["connector6", "connector9"]),
        ("worker1", ["connector7", "connector10"]),
        ("worker2", ["connector8"]),
    ]


def test_assign_tasks_when_balanced() -> None:  # testAssignTasksWhenBalanced
    loads = [worker_load(f"worker{i}", i * 2, 2, i * 2, 2) for i in range(3)]
    assign_connectors(loads, new_connectors(6, 11))
    assign_tasks(loads, new_tasks(6, 11))
    by_worker = {w.worker: w for w in loads}
    assert by_worker["worker0"].tasks[2:] == [TaskId("task", 6), TaskId("task", 9)]
    assert by_worker["worker1"].tasks[2:] == [TaskId("task", 7), TaskId("task", 10)]
    assert by_worker["worker2"].tasks[2:] == [TaskId("task", 8)]


def test_assign_connectors_when_imbalanced() -> None:  # testAssignConnectorsWhenImbalanced
    loads = [
        worker_load("worker0", 0, 2, 0, 2),
        worker_load("worker1", 2, 3, 2, 3),
        worker_load("worker2", 5, 4, 5, 4),
        WorkerLoad("worker3"),
    ]
    assign_connectors(loads, new_connectors(9, 24))
    assign_tasks(loads, new_tasks(9, 24))
    assert all(len(w.connectors) == 6 and len(w.tasks) == 6 for w in loads)


# -- IncrementalCooperativeAssignorTest: handleLostAssignments -------------------------------------


class LostHandling:
    """The handleLostAssignments tests' setting: worker0..worker2 run 2 connectors and 4 tasks each;
    after a first call with nothing lost, worker1 disappears and its work is ``lost``."""

    def __init__(self, max_delay: int = DEFAULT_MAX_DELAY_MS, *, also_joins: str | None = None) -> None:
        self.delay, self.now = max_delay, 1_000_000
        self.assignor = IncrementalCooperativeAssignor(max_delay)
        self.loads = {
            "worker0": worker_load("worker0", 0, 2, 0, 4),
            "worker1": worker_load("worker1", 2, 2, 4, 4),
            "worker2": worker_load("worker2", 4, 2, 8, 4),
        }
        assert self.handle(EMPTY) == EMPTY
        assert self.state() == ([], 0, 0)
        self.assignor.previous_members = frozenset(self.loads)
        self.lost = self.loads.pop("worker1").items()
        if also_joins:
            self.loads[also_joins] = WorkerLoad(also_joins)

    def handle(self, lost: Items | None = None) -> Items:
        return self.assignor._handle_lost_assignments(
            self.lost if lost is None else lost, list(self.loads.values()), self.now
        )

    def state(self) -> tuple[list[str], int, int]:
        a = self.assignor
        return a.candidate_workers, a.scheduled_rebalance, a.delay

    def half_the_delay_later(self) -> None:
        """``time.sleep(rebalanceDelay / 2); rebalanceDelay /= 2``."""
        self.now += self.delay // 2
        self.delay //= 2


def test_lost_assignment_handling_when_worker_bounces() -> None:  # testLostAssignmentHandlingWhenWorkerBounces
    t = LostHandling()
    t.handle()
    assert t.state() == ([], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.half_the_delay_later()
    t.loads["worker1"] = WorkerLoad("worker1")  # back, empty
    t.handle()
    assert t.state() == (["worker1"], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.now += t.delay
    assert t.handle() == EMPTY  # given to the candidate directly
    assert t.loads["worker1"].items() == t.lost
    assert t.state() == ([], 0, 0)


def test_lost_assignment_handling_when_worker_leaves_permanently() -> None:
    # testLostAssignmentHandlingWhenWorkerLeavesPermanently
    t = LostHandling()
    t.handle()
    assert t.state() == ([], t.now + t.delay, t.delay)

    t.half_the_delay_later()
    t.handle()
    assert t.state() == ([], t.now + t.delay, t.delay)

    t.now += t.delay
    assert t.handle() == t.lost  # reassigned as new work
    assert t.state() == ([], 0, 0)


def test_lost_assignment_handling_with_more_than_one_candidates() -> None:
    # testLostAssignmentHandlingWithMoreThanOneCandidates
    t = LostHandling(also_joins="worker3")
    t.handle()
    assert t.state() == (["worker3"], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.half_the_delay_later()
    t.loads["worker1"] = WorkerLoad("worker1")
    t.handle()
    assert t.state() == (["worker3", "worker1"], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.now += t.delay
    # Both candidates got other work meanwhile; they still share the lost work.
    t.loads["worker1"] = worker_load("worker1", 6, 2, 8, 4)
    t.loads["worker3"] = worker_load("worker3", 8, 2, 12, 4)
    assert t.handle() == EMPTY
    assert t.lost.issubset(t.loads["worker1"].items() | t.loads["worker3"].items())
    # Round robin in the order the candidates were found: worker3 first.
    assert t.loads["worker3"].connectors[2:] == ["connector2"] and t.loads["worker1"].connectors[2:] == ["connector3"]
    assert t.state() == ([], 0, 0)


def test_lost_assignment_handling_when_worker_bounces_back_but_finally_leaves() -> None:
    # testLostAssignmentHandlingWhenWorkerBouncesBackButFinallyLeaves
    t = LostHandling()
    t.handle()
    assert t.state() == ([], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.half_the_delay_later()
    t.loads["worker1"] = WorkerLoad("worker1")
    t.handle()
    assert t.state() == (["worker1"], t.now + t.delay, t.delay)

    t.assignor.previous_members = frozenset(t.loads)
    t.now += t.delay
    del t.loads["worker1"]  # the returning worker leaves again for good
    assert t.handle() == t.lost
    assert t.state() == ([], 0, 0)


def test_lost_assignment_handling_when_scheduled_delay_is_disabled() -> None:
    # testLostAssignmentHandlingWhenScheduledDelayIsDisabled
    t = LostHandling(0)
    assert t.handle() == t.lost
    assert t.state() == ([], 0, 0)


# -- WorkerCoordinatorIncrementalTest: exact answers of a leader -----------------------------------

LEADER, MEMBER, ANOTHER = "worker1", "worker2", "worker3"
OFFSET = 10
CONFIG1 = {"connector1": 4, "connector2": 4}  # clusterConfigState(offset, 2, 4)


def tasks(connector: str, *numbers: int) -> frozenset[TaskId]:
    return frozenset(TaskId(connector, n) for n in numbers)


def leader_assign(
    a: IncrementalCooperativeAssignor, owned: dict[str, Items], now: int = 0
) -> dict[str, ClassicAssignment]:
    """onLeaderElected with the coordinator's generation and last completed generation both -1, as
    in WorkerCoordinatorIncrementalTest (the mocked coordinator never completes a join)."""
    members = {m: MemberInfo(url(m), OFFSET, items) for m, items in owned.items()}
    return a.assign(members, CONFIG1, -1, now, LEADER, OFFSET, last_completed_generation=-1)


def check(answer: ClassicAssignment, connectors: int, task_count: int, delay: int = 0) -> None:
    """assertAssignment(leader, offset, connectors, tasks, no revocations, delay)."""
    assert (answer.leader, answer.leader_url, answer.config_offset, answer.error) == (LEADER, url(LEADER), OFFSET, 0)
    assert (len(answer.assigned.connectors), len(answer.assigned.tasks)) == (connectors, task_count)
    assert not answer.revoked and answer.delay_ms == delay


def test_worker_coordinator_task_assignment_when_worker_joins() -> None:
    # WorkerCoordinatorIncrementalTest.testTaskAssignmentWhenWorkerJoins
    a = IncrementalCooperativeAssignor()
    first = leader_assign(a, {LEADER: EMPTY, MEMBER: EMPTY})
    assert first[LEADER].assigned.connectors == {"connector1"} and len(first[LEADER].assigned.tasks) == 4
    assert first[MEMBER].assigned.connectors == {"connector2"} and len(first[MEMBER].assigned.tasks) == 4

    second = leader_assign(a, {LEADER: first[LEADER].assigned, MEMBER: first[MEMBER].assigned, ANOTHER: EMPTY})
    # Equally distributing tasks: one task revoked from each of the two, nothing assigned yet.
    for m in (LEADER, MEMBER):
        assert not second[m].assigned and not second[m].revoked.connectors and len(second[m].revoked.tasks) == 1
    assert not second[ANOTHER].assigned and not second[ANOTHER].revoked


def test_worker_coordinator_task_assignment_when_worker_leaves_permanently() -> None:
    # WorkerCoordinatorIncrementalTest.testTaskAssignmentWhenWorkerLeavesPermanently
    delay, now = DEFAULT_MAX_DELAY_MS, 0
    a = IncrementalCooperativeAssignor(delay)
    first = leader_assign(a, {LEADER: EMPTY, MEMBER: EMPTY, ANOTHER: EMPTY}, now)
    check(first[LEADER], 1, 3)
    check(first[MEMBER], 1, 3)
    check(first[ANOTHER], 0, 2)
    assert first[LEADER].assigned == Items(
        frozenset({"connector1"}), tasks("connector1", 0, 3) | tasks("connector2", 2)
    )
    assert first[MEMBER].assigned == Items(
        frozenset({"connector2"}), tasks("connector1", 1) | tasks("connector2", 0, 3)
    )
    assert first[ANOTHER].assigned == Items(frozenset(), tasks("connector1", 2) | tasks("connector2", 1))

    owned = {LEADER: first[LEADER].assigned, MEMBER: first[MEMBER].assigned}
    second = leader_assign(a, owned, now)
    check(second[LEADER], 0, 0, delay)
    check(second[MEMBER], 0, 0, delay)

    delay //= 2
    now += delay
    third = leader_assign(a, owned, now)
    check(third[LEADER], 0, 0, delay)
    check(third[MEMBER], 0, 0, delay)

    now += delay + 1
    fourth = leader_assign(a, owned, now)
    check(fourth[LEADER], 0, 1)
    check(fourth[MEMBER], 0, 1)


def test_worker_coordinator_task_assignment_when_worker_bounces() -> None:
    # WorkerCoordinatorIncrementalTest.testTaskAssignmentWhenWorkerBounces
    delay, now = DEFAULT_MAX_DELAY_MS, 0
    a = IncrementalCooperativeAssignor(delay)
    first = leader_assign(a, {LEADER: EMPTY, MEMBER: EMPTY, ANOTHER: EMPTY}, now)
    owned = {LEADER: first[LEADER].assigned, MEMBER: first[MEMBER].assigned}
    second = leader_assign(a, owned, now)
    check(second[LEADER], 0, 0, delay)

    delay //= 2
    now += delay
    owned[ANOTHER] = EMPTY  # the member returns in the meantime, empty
    third = leader_assign(a, owned, now)
    for m in (LEADER, MEMBER, ANOTHER):
        check(third[m], 0, 0, delay)

    now += delay + 1
    fourth = leader_assign(a, owned, now)
    check(fourth[LEADER], 0, 0)
    check(fourth[MEMBER], 0, 0)
    check(fourth[ANOTHER], 0, 2)
    assert fourth[ANOTHER].assigned == first[ANOTHER].assigned  # its own work back


# -- CONFIG_MISMATCH (ensureLeaderConfig) ------------------------------------------------------------


def test_config_mismatch_when_the_leader_is_behind_a_member() -> None:
    """WorkerCoordinatorTest.testJoinLeaderCannotAssign, from the leader's side: a member has read
    config offset 9, the leader's snapshot is at 4: everyone gets CONFIG_MISMATCH at offset 9, no
    items, and the incremental assignor's state does not move."""
    members = {"leader": MemberInfo("http://leader", 4), "member": MemberInfo("http://member", 9)}
    for answer in (
        eager_assign(members, {"connector1": 1}, "leader", 4),
        IncrementalCooperativeAssignor().assign(
            members, {"connector1": 1}, 1, 0, "leader", 4, last_completed_generation=-1
        ),
    ):
        assert set(answer) == {"leader", "member"}
        for a in answer.values():
            assert (a.error, a.config_offset, a.leader, a.leader_url) == (CONFIG_MISMATCH, 9, "leader", "http://leader")
            assert a.failed and not a.assigned and not a.revoked and a.delay_ms == 0

    assignor = IncrementalCooperativeAssignor()
    assignor.assign(members, {"connector1": 1}, 1, 0, "leader", 4, last_completed_generation=-1)
    assert (assignor.previous_generation_id, assignor.previous_assignment, assignor.previous_members) == (
        -1,
        EMPTY,
        frozenset(),
    )


def test_a_leader_with_a_fresh_snapshot_assigns_and_members_behind_catch_up() -> None:
    """The leader refreshed past the members' offsets (ensureLeaderConfig's fresh snapshot): the
    assignment is at the leader's offset, a member behind it gets its work (no error) and must
    read the config up to that offset before running it."""
    members = {"leader": MemberInfo("http://leader", 9), "member": MemberInfo("http://member", 4)}
    conns = {"connector1": 2}
    eager = eager_assign(members, conns, "leader", 12)
    cooperative = IncrementalCooperativeAssignor().assign(
        members, conns, 1, 0, "leader", 12, last_completed_generation=-1
    )
    for answer in (eager, cooperative):
        assert {m: (a.error, a.config_offset) for m, a in answer.items()} == {
            "leader": (NO_ERROR, 12),
            "member": (NO_ERROR, 12),
        }
    # Eager continues the round after the connectors; the cooperative assignor deals connectors and
    # tasks each from the least loaded worker by id.
    assert eager["leader"].assigned == Items.of(["connector1"], [("connector1", 1)])
    assert eager["member"].assigned == Items.of([], [("connector1", 0)])
    assert cooperative["leader"].assigned == Items.of(["connector1"], [("connector1", 0)])
    assert cooperative["member"].assigned == Items.of([], [("connector1", 1)])


# -- EagerAssignor (WorkerCoordinatorTest.testLeaderPerformAssignment*) -------------------------------


def eager(connectors: dict[str, int], offset: int) -> dict[str, ClassicAssignment]:
    members = {"leader": MemberInfo("leaderUrl", offset), "member": MemberInfo("memberUrl", offset)}
    return eager_assign(members, connectors, "leader", offset)


def test_leader_perform_assignment1() -> None:  # WorkerCoordinatorTest.testLeaderPerformAssignment1
    answer = eager({"connector1": 1}, 4)
    assert answer["leader"] == ClassicAssignment(Items.of(["connector1"]), EMPTY, 0, NO_ERROR, "leader", "leaderUrl", 4)
    assert answer["member"].assigned == Items.of([], [("connector1", 0)])
    assert (answer["member"].leader, answer["member"].config_offset) == ("leader", 4)


def test_leader_perform_assignment2() -> None:  # WorkerCoordinatorTest.testLeaderPerformAssignment2
    answer = eager({"connector1": 2, "connector2": 1}, 9)
    assert answer["leader"].assigned == Items.of(["connector1"], [("connector1", 0), ("connector2", 0)])
    assert answer["member"].assigned == Items.of(["connector2"], [("connector1", 1)])


def test_leader_perform_assignment_single_task_connectors() -> None:
    # WorkerCoordinatorTest.testLeaderPerformAssignmentSingleTaskConnectors
    answer = eager({"connector1": 1, "connector2": 1, "connector3": 1}, 12)
    assert answer["leader"].assigned == Items.of(["connector1", "connector3"], [("connector2", 0)])
    assert answer["member"].assigned == Items.of(["connector2"], [("connector1", 0), ("connector3", 0)])


def test_eager_everything_is_reassigned_on_every_rebalance() -> None:
    """Eager is stateless and from scratch: a join recomputes the whole round robin (the workers
    revoked everything before rejoining), and nobody gets a revocation list or a delay."""
    conns = {"a": 3, "b": 2}
    two = eager_assign({"w1": MemberInfo(), "w2": MemberInfo()}, conns, "w1", 0)
    three = eager_assign({"w1": MemberInfo(), "w2": MemberInfo(), "w0": MemberInfo()}, conns, "w1", 0)
    assert list(three) == ["w0", "w1", "w2"]
    # Sorted members w0, w1, w2: connectors a, b; the tasks continue the round at w2.
    assert three["w0"].assigned == Items.of(["a"], [("a", 1), ("b", 1)])
    assert three["w1"].assigned == Items.of(["b"], [("a", 2)])
    assert three["w2"].assigned == Items.of([], [("a", 0), ("b", 0)])
    assert two["w1"].assigned == Items.of(["a"], [("a", 0), ("a", 2), ("b", 1)])
    assert two["w2"].assigned == Items.of(["b"], [("a", 1), ("b", 0)])
    for answer in (two, three):
        assert all(not a.revoked and a.delay_ms == 0 for a in answer.values())


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 9), max_size=6),
    st.sets(st.sampled_from([f"w{i}" for i in range(7)]), min_size=1),
)
def test_eager_round_robin_is_balanced(conns: dict[str, int], workers: set[str]) -> None:
    answer = eager_assign({w: MemberInfo() for w in workers}, conns, min(workers), 0)
    c_counts = [len(a.assigned.connectors) for a in answer.values()]
    t_counts = [len(a.assigned.tasks) for a in answer.values()]
    assert max(c_counts) - min(c_counts) <= 1 and max(t_counts) - min(t_counts) <= 1
    keys = [k for a in answer.values() for k in a.assigned.item_keys()]
    assert len(keys) == len(set(keys)) == len(conns) + sum(conns.values())


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "connectors", "leader", "offset", "field"),
    [
        ({}, {}, "w1", 0, "members"),
        ({"w1": MemberInfo()}, {}, "w2", 0, "leader"),
        ({"w1": MemberInfo(config_offset="3")}, {}, "w1", 0, "members['w1'].config_offset"),  # type: ignore[arg-type]
        ({"w1": MemberInfo()}, {"c": -1}, "w1", 0, "connectors['c']"),
        ({"w1": MemberInfo()}, {"": 1}, "w1", 0, "connectors"),
        ({"w1": MemberInfo()}, {}, "w1", None, "config_offset"),
        ({"w1": MemberInfo(owned=[])}, {}, "w1", 0, "members['w1'].owned"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_names_the_field(
    members: dict[str, MemberInfo], connectors: dict[str, int], leader: str, offset: int, field: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}: "):
        eager_assign(members, connectors, leader, offset)
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}: "):
        IncrementalCooperativeAssignor().assign(members, connectors, 1, 0, leader, offset, last_completed_generation=0)


def test_bad_max_delay_names_the_config() -> None:
    with pytest.raises(ValueError, match=r"^scheduled.rebalance.max.delay.ms must be"):
        IncrementalCooperativeAssignor(-1)


# -- property: convergence with a fixed membership ----------------------------------------------------------

WORKERS = [f"w{i}" for i in range(6)]
events = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(WORKERS)),
        st.tuples(st.just("leave"), st.sampled_from(WORKERS)),
        st.tuples(st.just("put"), st.sampled_from("abcde"), st.integers(0, 6)),
        st.tuples(st.just("delete"), st.sampled_from("abcde")),
        st.tuples(
            st.just("fail"),
        ),
        st.tuples(
            st.just("new_leader"),
        ),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 6), max_size=5),
    st.sets(st.sampled_from(WORKERS), min_size=1, max_size=4),
    events,
    st.sampled_from([0, 1, 1000, DEFAULT_MAX_DELAY_MS]),
)
def test_converges_to_exactly_once_and_balanced(
    conns: dict[str, int], start: set[str], history: list[tuple], max_delay: int
) -> None:
    """Any history of joins, leaves, connector changes, failed syncs and leader changes, then a fixed
    membership: once the delays have run out, every item runs exactly once and the counts of
    connectors and of tasks each differ by at most one between workers. No item is ever handed to
    two workers, nor to one that already runs it, along the way."""
    c = Cluster(max_delay)
    c.connectors = dict(conns)
    c.members = {w: EMPTY for w in sorted(start)}
    for event in history:
        kind = event[0]
        if kind == "join" and event[1] not in c.members:
            c.members[event[1]] = EMPTY
        elif kind == "leave" and event[1] in c.members and len(c.members) > 1:
            del c.members[event[1]]
        elif kind == "put":
            c.connectors[event[1]] = event[2]
        elif kind == "delete":
            c.connectors.pop(event[1], None)
        elif kind == "new_leader":
            c.init_assignor()
        c.rebalance(failed=kind == "fail")
        c.sleep(1)
    # Fixed membership from here: rejoin after each answer's delay until nothing changes.
    for _ in range(12):
        c.sleep(max(c.assignor.delay, 1))
        c.rebalance()
    c.assert_empty_assignment()
    c.assert_balanced_and_complete_allocation()


def test_the_same_input_gives_the_same_answer() -> None:
    """Determinism: the answer does not depend on the order members or connectors are given in."""

    def run(order: list[str], conn_order: list[str]) -> list[list[tuple[str, ClassicAssignment]]]:
        a = IncrementalCooperativeAssignor()
        conns = {name: 3 for name in conn_order}
        owned = dict.fromkeys(order, EMPTY)
        answers = []
        for generation in range(4):
            members = {w: MemberInfo(url(w), 0, owned[w]) for w in order}
            answer = a.assign(members, conns, generation, 0, "a", 0, last_completed_generation=generation - 1)
            answers.append(list(answer.items()))
            owned = {w: (owned[w] - answer[w].revoked) | answer[w].assigned for w in order}
            order = [f"x{generation}", *order]
            owned[f"x{generation}"] = EMPTY
        return answers

    first, second = run(["b", "a", "c"], ["z", "y", "x"]), run(["c", "a", "b"], ["x", "z", "y"])
    assert first == second
    assert any(a.revoked for answer in first for _, a in answer)  # the runs did move work
