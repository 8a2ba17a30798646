"""The sans-I/O runtime machine on its own: group commit, answers only once durable, reads behind
writes, a failed batch isolated request by request, effects released only with a committed ticket.

The machine is driven here the way the asyncio runtime and the simulator drive it: the test plays
the storage (a commit succeeds or fails) and the clock."""

from __future__ import annotations

from typing import Any

import pytest

from connect.coordinator.v1 import admin_pb2
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.coordinator.core.coordinator import GroupCoordinator, ServiceAssignment
from services.coordinator.runtime.machine import CoordinatorMachine, HandlerFailed, NotAvailable, Status, Ticket
from tests.coordinator.harness import TEST_CONFIG, heartbeat_request


def put(machine: CoordinatorMachine, group: str, connector: str = "A", tasks: int = 1) -> Ticket:
    req = admin_pb2.PutConnectorRequest(group_id=group, connector=connector, task_count=tasks)
    return machine.submit(machine.core.put_connector, req, 0)


def describe(machine: CoordinatorMachine, group: str) -> Ticket:
    req = admin_pb2.DescribeGroupsRequest(group_ids=[group])
    return machine.read(machine.core.describe_groups, req)


def loaded(service: bool = False) -> CoordinatorMachine:
    core = GroupCoordinator(TEST_CONFIG, {"incremental-cooperative": (0, 5)} if service else None)
    machine = CoordinatorMachine(core)
    ticket = machine.load([], 0)
    assert machine.next_batch() is None  # nothing to re-arm in an empty state
    assert ticket.status is Status.DONE and ticket.answered
    assert machine.take_resolved() == []  # answered at once, with nothing for the shell to release
    return machine


def test_requests_wait_for_their_records_and_are_committed_together() -> None:
    machine = loaded()
    a, b = put(machine, "g1"), put(machine, "g2")
    assert not a.answered and not b.answered
    batch = machine.next_batch()
    assert batch is not None and batch.tickets == [a, b]
    assert batch.records == a.records + b.records
    c = put(machine, "g3")
    assert machine.next_batch() is None  # one write at a time: c gathers for the next batch
    machine.committed(batch)
    assert a.status is b.status is Status.DONE and a.answered and not c.answered
    assert machine.take_resolved() == [a, b]
    nxt = machine.next_batch()
    assert nxt is not None and nxt.tickets == [c]


def test_a_read_waits_for_the_writes_before_it_and_fails_if_they_touched_its_group() -> None:
    machine = loaded()
    write = put(machine, "g1")
    read_other = describe(machine, "g2")
    read_same = describe(machine, "g1")
    assert not read_other.answered and not read_same.answered
    batch = machine.next_batch()
    assert batch is not None
    machine.commit_failed(batch)  # the batch is isolated: its one write is committed alone
    single = machine.next_batch()
    assert single is not None and single.isolating and single.tickets == [write]
    machine.commit_failed(single)
    assert write.status is Status.FAILED and write.error is not None
    assert write.error.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert machine.next_batch() is None  # the reads are answered without a write
    assert read_other.status is Status.DONE
    assert read_same.status is Status.FAILED  # it may have seen the lost change
    assert machine.take_reloads() == {"g1"}


def test_a_read_with_nothing_pending_is_answered_at_once() -> None:
    machine = loaded()
    ticket = describe(machine, "g")
    assert ticket.answered and ticket.status is Status.DONE
    assert ticket.response.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_failed_batch_costs_only_the_failing_request_and_what_is_built_on_it() -> None:
    machine = loaded()
    good, poison, built_on = put(machine, "ok"), put(machine, "bad"), put(machine, "bad", "B")
    batch = machine.next_batch()
    assert batch is not None
    machine.commit_failed(batch)
    later = put(machine, "bad", "C")  # applied on top of the failing group while it is isolated
    unrelated = put(machine, "other")
    first = machine.next_batch()
    assert first is not None and first.tickets == [good]
    machine.committed(first)
    second = machine.next_batch()
    assert second is not None and second.tickets == [poison]
    machine.commit_failed(second)
    third = machine.next_batch()  # built_on is failed without a write; isolation ends
    assert third is not None and third.tickets == [unrelated]
    assert good.status is Status.DONE
    assert poison.status is built_on.status is later.status is Status.FAILED
    assert machine.take_reloads() == {"bad"}
    machine.committed(third)
    assert unrelated.status is Status.DONE


def test_effects_are_released_only_once_their_records_are_committed() -> None:
    machine = loaded(service=True)
    put(machine, "g")
    req = heartbeat_request("", 0, "g")
    join = machine.submit(machine.core.heartbeat, req, 0)
    assert [type(e) for e in join.effects] == [ServiceAssignment]
    assert machine.take_jobs() == []  # not before the commit
    batch = machine.next_batch()
    assert batch is not None
    machine.commit_failed(batch)
    while (single := machine.next_batch()) is not None:
        machine.commit_failed(single)
    assert join.status is Status.FAILED
    assert machine.take_jobs() == []  # never, for a change that was lost
    # The reload re-arms the group from storage (here: nothing stored) and emits nothing to call.
    assert machine.take_reloads() == {"g"}


def test_a_committed_join_releases_its_assignor_job() -> None:
    machine = loaded(service=True)
    put(machine, "g")
    req = heartbeat_request("", 0, "g")
    machine.submit(machine.core.heartbeat, req, 0)
    batch = machine.next_batch()
    assert batch is not None
    machine.committed(batch)
    jobs = machine.take_jobs()
    assert [(j.group_id, j.group_epoch) for j in jobs] == [("g", 2)]


def test_loading_answers_load_in_progress_and_a_handler_bug_unloads() -> None:
    machine = CoordinatorMachine(GroupCoordinator(TEST_CONFIG))
    with pytest.raises(NotAvailable) as e:
        put(machine, "g")
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    machine.load([], 0)

    def broken(_request: Any, _now: int) -> Any:
        raise RuntimeError("boom")

    with pytest.raises(HandlerFailed):
        machine.submit(broken, None, 0)
    assert not machine.loaded  # memory may hold part of its records: reload before serving again
