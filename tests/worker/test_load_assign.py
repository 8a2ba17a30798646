"""The SDK's client-side `load-balanced` assignor (SPEC §13): the loads, capacities and racks the
coordinator puts in the Prepare response's GroupMembers reach the worker's in-process assignor
(through the shared proto -> input mapping) and drive its answer."""

from __future__ import annotations

import services.assignor
from connect.coordinator.v1 import coordinator_pb2
from services.common.items import Items, TaskId
from worker_sdk import assign_request, local_assignors, run_assignor


def prepared(
    loads: dict[int, float] | None, capacity_b: float | None = None
) -> coordinator_pb2.ConnectGroupPrepareAssignmentResponse:
    """Two workers: a runs src-0..2 (src-0 is hot), b runs src-3..5."""
    p = coordinator_pb2.ConnectGroupPrepareAssignmentResponse(
        group_epoch=6, assignor_name="load-balanced", now_ms=10**9
    )
    p.connectors.add(name="src", task_count=6)
    p.current_target.assignment_epoch = 5
    for mid, tasks in (("a", (0, 1, 2)), ("b", (3, 4, 5))):
        m = p.members.add(member_id=mid, member_epoch=5)
        m.assignor.name, m.assignor.minimum_version, m.assignor.maximum_version, m.assignor.version = (
            "load-balanced",
            1,
            2,
            2,
        )
        owned = Items.of((), [("src", t) for t in tasks])
        owned.to_proto(m.owned)
        owned.to_proto(m.target)
        if loads is not None:
            for t in tasks:
                m.item_loads.loads.add(connector="src", task=t, load=loads[t])
        if mid == "b" and capacity_b is not None:
            m.capacity = capacity_b
        owned.to_proto(p.current_target.members.add(member_id=mid).connectors_and_tasks)
    return p


def targets(p: coordinator_pb2.ConnectGroupPrepareAssignmentResponse) -> dict[str, set[TaskId]]:
    result = run_assignor(services.assignor.assign, assign_request("g", p))
    assert result.error == 0, result.error_message
    return {m.member_id: set(Items.from_proto(m.connectors_and_tasks).tasks) for m in result.members}


def test_the_worker_computes_with_load_balanced() -> None:
    assert "load-balanced" in local_assignors()


def test_reported_loads_move_work_off_the_hot_worker() -> None:
    skewed = {0: 90.0, 1: 10.0, 2: 10.0, 3: 10.0, 4: 10.0, 5: 10.0}
    got = targets(prepared(skewed))
    # a carries 110 against b's 30: moving a task from a to b lowers the maximum.
    assert len(got["a"]) < 3 and len(got["b"]) > 3
    assert TaskId("src", 0) in got["a"], "the hot task stays; the light ones move"


def test_without_loads_the_count_balanced_answer_stands() -> None:
    got = targets(prepared(None))
    assert got == {"a": {TaskId("src", t) for t in (0, 1, 2)}, "b": {TaskId("src", t) for t in (3, 4, 5)}}


def test_capacity_reaches_the_assignor() -> None:
    even = dict.fromkeys(range(6), 10.0)
    assert targets(prepared(even)) == targets(prepared(None)), "equal loads, equal capacities: balanced"
    got = targets(prepared(even, capacity_b=3.0))
    assert len(got["b"]) > 3, "b can take three times as much: work moves to it"
